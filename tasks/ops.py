"""One Prefect task per unique op; its work runs on the Dask cluster's warm op workers.

The task body runs in a flow thread and only hands the op to Dask (a few ms), so every op is its own
visible task run while the per-op orchestration cost stays small next to the op's own work
(measured in benchmarks/bench_orchestration.py). Op failures are results, never exceptions; only
infrastructure errors (a lost connection to the scheduler) raise, and only those are retried.
"""

from __future__ import annotations

import uuid

from distributed import KilledWorker, default_client
from distributed.comm.core import CommClosedError
from prefect import task
from prefect.cache_policies import NONE

from opbyop.records import OpResult, Stage, Status, UniqueOp, WholeModelResult, utcnow
from opbyop.worker import dask as on_dask
from opbyop.worker.protocol import AnalysisSettings


class InfrastructureError(RuntimeError):
    """The cluster, not the op, failed: worth one retry."""


def _retry_infrastructure(task, task_run, state) -> bool:  # noqa: ANN001  (Prefect's hook signature)
    try:
        state.result()
    except InfrastructureError:
        return True
    except Exception:
        return False
    return False


@task(name="analyze-op", task_run_name="{label}", retries=1, retry_delay_seconds=2,
      retry_condition_fn=_retry_infrastructure, cache_policy=NONE, persist_result=False)
def analyze_op(op: UniqueOp, label: str, chip: str, settings: AnalysisSettings, timeout: float) -> OpResult:
    """Compile, simulate and check one unique op on a Dask worker."""
    client = default_client()
    started = utcnow()
    future = client.submit(on_dask.analyze_op, op, chip, settings, timeout, pure=False,
                           key=f"op-{op.signature[:16]}-{uuid.uuid4().hex[:8]}")
    try:
        return future.result()  # the op worker enforces `timeout` on the op itself; queueing is free
    except KilledWorker as e:
        return OpResult(signature=op.signature, op_name=op.op_name, status=Status.CRASHED, depth=Stage.SPLIT,
                        failed_stage=None, started_at=started, ended_at=utcnow(),
                        message=f"the Dask worker running this op died ({e}); the stage it was in is unknown")
    except (CommClosedError, OSError) as e:
        raise InfrastructureError(f"lost the Dask cluster while running {op.signature[:12]}: {e}") from e


@task(name="whole-model", task_run_name="whole-{model}", cache_policy=NONE, persist_result=False)
def whole_model(model: str, module_text: str, values_path: str, parameters: list[int], chip: str,
                settings: AnalysisSettings, timeout: float) -> WholeModelResult:
    """Compile the whole model and run it stitched on a Dask worker."""
    future = default_client().submit(on_dask.analyze_whole, model, module_text, values_path, parameters, chip,
                                     settings, timeout, pure=False, key=f"whole-{model}-{uuid.uuid4().hex[:8]}")
    try:
        return future.result()
    except KilledWorker as e:
        return WholeModelResult(status=Status.CRASHED, depth=Stage.SPLIT, failed_stage=None,
                                message=f"the Dask worker running the whole model died ({e})")
