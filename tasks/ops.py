"""One Prefect task per unique op; its work runs on the Dask cluster's warm op workers.

The task body runs in a flow thread and only hands the op to Dask (a few ms), so every op is its own
visible task run while the per-op orchestration cost stays small next to the op's own work
(measured in benchmarks/bench_orchestration.py). Op failures are results, never exceptions.

A Dask worker that dies fails every op it held, though at most one of them killed it: each such op is
run once more alone on the cluster (tasks/gate.py), and only an op that kills a worker again is
`crashed`. The cluster itself failing (connection lost, scheduler gone) is `infra_error`: worth one
retry of the task, then recorded as such; a run whose own cluster was lost starts it again and hands
the op out once more (flows/hosting/run_cluster.py).

The Dask worker may be on another host with a home of its own: there an op needs the artifacts it
reads (sent only when that worker asks: run_shipping), and the artifacts its result names come back
with it into the flow's store (opbyop.worker.wire).
"""

from __future__ import annotations

import uuid
from concurrent.futures import CancelledError
from pathlib import Path
from typing import Callable, TypeVar

from distributed import Client, KilledWorker, default_client
from distributed.comm.core import CommClosedError
from prefect import task
from prefect.cache_policies import NONE
from prefect.states import Cancelled

from opbyop.artifacts import ArtifactStore
from opbyop.op_memory import op_size
from opbyop.records import OpResult, Stage, Status, UniqueOp, WholeModelResult, utcnow
from opbyop.stage_call import StageCall
from opbyop.worker import dask as on_dask
from opbyop.worker.process import RunStopped
from opbyop.worker.wire import Parcel, pack
from opbyop.workspace import Workspace
from opbyop.config import AnalysisSettings
from opbyop_tasks.gate import ClusterGate, GateClosed

T = TypeVar("T")
P = TypeVar("P")


class InfrastructureError(RuntimeError):
    """The cluster, not the op, failed: worth one retry."""


class KilledTwice(RuntimeError):
    """The work killed a Dask worker, then killed another one running alone."""


def _retry_infrastructure(task, task_run, state) -> bool:  # noqa: ANN001  (Prefect's hook signature)
    try:
        state.result()
    except InfrastructureError:
        return True
    except Exception:
        return False
    return False


def run_isolated(gate: ClusterGate, submit: Callable[[Client], object]) -> T:
    """The result of the Dask future `submit(client)` returns. Its work shares the cluster with the
    other ops; if its worker dies, it runs once more alone; KilledTwice if that worker dies too. It
    goes to the gate's cluster (a run whose cluster was restarted has a gate for each)."""
    client = gate.client or default_client()
    for alone in (False, True):
        with gate.exclusive() if alone else gate.shared():
            future = submit(client)
            try:
                with gate.in_flight(future):
                    return future.result()  # the op worker enforces the op's time limit; queueing is free
            except KilledWorker:
                if alone:
                    raise KilledTwice() from None
            except (CommClosedError, OSError, CancelledError, TimeoutError, RunStopped) as e:
                if gate.closed:
                    raise GateClosed(gate.why) from None
                raise InfrastructureError(f"lost the Dask cluster: {type(e).__name__}: {e}") from e
            finally:
                future.release()
    raise AssertionError("unreachable")


def run_shipping(gate: ClusterGate, submitting: Callable[[P | None], Callable[[Client], object]],
                 payload: Callable[[], P]) -> T:
    """run_isolated of work that reads files of the flow's home. It goes first without their bytes
    (a worker sharing the home, the common case, reads them there); a worker on another host raises
    ValuesWanted, and it goes again with `payload()`."""
    try:
        return run_isolated(gate, submitting(None))
    except on_dask.ValuesWanted:
        return run_isolated(gate, submitting(payload()))


@task(name="analyze-op", task_run_name="{label}", retries=1, retry_delay_seconds=2,
      retry_condition_fn=_retry_infrastructure, cache_policy=NONE, persist_result=False)
def analyze_op(op: UniqueOp, label: str, chip: str, settings: AnalysisSettings, timeout: float, plugin: str,
               gate: ClusterGate, artifacts: ArtifactStore | None = None) -> OpResult:
    """Compile, simulate and check one unique op on a Dask worker. `artifacts`: the flow's store (default:
    OPBYOP_HOME's), where the op's inputs are read and its result's artifacts are put."""
    artifacts = artifacts or Workspace.default().artifacts

    def submitting(inputs: Parcel | None):  # noqa: ANN202
        def submit(client: Client):
            return client.submit(on_dask.analyze_op_shipped, plugin, op, chip, settings, timeout, tag=gate.tag,
                                 inputs=inputs, pure=False, key=f"op-{op.signature[:16]}-{uuid.uuid4().hex[:8]}")
        return submit

    call = StageCall.of(lambda: run_shipping(gate, submitting, lambda: pack(artifacts, op.input_values.values())
                                             ).landed(artifacts), catch=(GateClosed, KilledTwice))
    if call.ok:
        return call.value
    if isinstance(call.error, GateClosed):
        return Cancelled(message=str(call.error))
    return OpResult.failure(op.signature, op.op_name, Status.CRASHED,
                            "killed the Dask worker running it, twice: the second time it ran alone on the "
                            f"cluster (the stage it was in is unknown; {op_size(op)})",
                            started_at=call.started_at, ended_at=utcnow())


@task(name="whole-model", task_run_name="whole-{model}", retries=1, retry_delay_seconds=2,
      retry_condition_fn=_retry_infrastructure, cache_policy=NONE, persist_result=False)
def whole_model(model: str, staged: tuple[str, str], parameters: list[int], chip: str, settings: AnalysisSettings,
                timeout: float, plugin: str, gate: ClusterGate,
                artifacts: ArtifactStore | None = None) -> WholeModelResult:
    """Compile the whole model and run it stitched on a Dask worker. `staged` is (module text, npz of
    its values) from stage_whole_model; the npz's bytes travel only to a worker without the flow's home."""
    module_text, values_path = staged
    artifacts = artifacts or Workspace.default().artifacts

    def submitting(values: bytes | None):  # noqa: ANN202
        def submit(client: Client):
            return client.submit(on_dask.analyze_whole_shipped, plugin, model, module_text, values_path, parameters,
                                 chip, settings, timeout, tag=gate.tag, values=values, pure=False,
                                 key=f"whole-{model}-{uuid.uuid4().hex[:8]}")
        return submit

    try:
        return run_shipping(gate, submitting, lambda: Path(values_path).read_bytes()).landed(artifacts)
    except GateClosed as e:
        return Cancelled(message=str(e))
    except KilledTwice:
        return WholeModelResult(status=Status.CRASHED, depth=Stage.SPLIT, failed_stage=None,
                                message="killed the Dask worker running it, twice: the second time alone")
