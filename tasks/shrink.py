"""Shrink the failing ops of a run (opbyop.shrink), one Prefect task per op, after the fan-out.

Each task runs the search in a flow thread; every variant goes to the cluster's warm op workers like
any op (opbyop_tasks.ops.run_isolated), so the search costs the cluster what its variants cost. Results go
to the store's `shrinks` table of the run.
"""

from __future__ import annotations

import uuid

from distributed import Client, default_client
from prefect import task
from prefect.cache_policies import NONE

from opbyop.records import OpResult, Status, UniqueOp, utcnow
from opbyop.stage_call import StageCall
from opbyop.shrink.result import Outcome, ShrinkResult, outcome_of
from opbyop.shrink.search import Shrinker
from opbyop.worker import dask as on_dask
from opbyop.config import AnalysisSettings, ShrinkOption
from opbyop.workspace import OpIndex, Workspace
from opbyop.worker.wire import Parcel, pack
from opbyop_tasks.gate import ClusterGate
from opbyop_tasks.ops import KilledTwice, run_shipping


@task(name="shrink-op", task_run_name="shrink-{label}", cache_policy=NONE, persist_result=False)
def shrink_op(op: UniqueOp, baseline: OpResult, label: str, chip: str, settings: AnalysisSettings, timeout: float,
              budget_s: float, plugin: str, gate: ClusterGate) -> ShrinkResult:
    workspace = Workspace.default()

    def analyse(variant: UniqueOp) -> OpResult:
        def submitting(inputs: Parcel | None):  # noqa: ANN202
            def submit(client: Client):
                return client.submit(on_dask.analyze_op_shipped, plugin, variant, chip, settings, timeout,
                                     tag=gate.tag, inputs=inputs, pure=False,
                                     key=f"shrink-{variant.signature[:16]}-{uuid.uuid4().hex[:8]}")
            return submit

        call = StageCall.of(lambda: run_shipping(gate, submitting, lambda: pack(
            workspace.artifacts, variant.input_values.values())).landed(workspace.artifacts), catch=(KilledTwice,))
        if call.ok:
            return call.value
        return OpResult.failure(variant.signature, variant.op_name, Status.CRASHED,
                                "killed the Dask worker running it, twice", started_at=call.started_at,
                                ended_at=utcnow())

    return Shrinker(analyse, workspace.artifacts, workspace.ops.put, budget_s).shrink(op, baseline)


def failing(results: dict[str, OpResult], ops: list[UniqueOp], limit: int) -> list[tuple[UniqueOp, OpResult]]:
    """The ops whose result is a failing verdict, most occurrences first."""
    chosen = [(op, results[op.signature]) for op in ops if op.signature in results
              and outcome_of(results[op.signature].status, results[op.signature].depth) is Outcome.FAIL]
    return sorted(chosen, key=lambda pair: -len(pair[0].occurrences))[:limit]


def shrink_failing_ops(option: ShrinkOption, results: dict[str, OpResult], ops: list[UniqueOp], index: OpIndex,
                       chip: str, settings: AnalysisSettings, timeout: float, plugin: str, writer, logger  # noqa: ANN001
                       ) -> list[ShrinkResult]:
    """Shrink the run's failing ops (at most option.max_ops) and store what each search found. Each op
    is searched from its whole form in `index` (the run keeps its ops settled: pipeline.settled_op)."""
    gate = ClusterGate(default_client(), plugin)
    futures = []
    for op, result in failing(results, ops, option.max_ops):
        kept = StageCall.of(lambda: index.get(op.signature))  # noqa: B023  (called at once)
        if not kept.ok:  # one op the index cannot give back never loses the others' searches
            logger.warning("cannot shrink %s: the op index has no readable copy of it: %s", op.signature[:10],
                           kept.brief)
            continue
        futures.append(shrink_op.submit(kept.value, result, f"{op.op_name.removeprefix('stablehlo.')}-"
                                        f"{op.signature[:10]}", chip, settings, timeout, option.seconds_per_op,
                                        plugin, gate))
    found: list[ShrinkResult] = []
    for future in futures:
        try:
            found.append(future.result())
        except Exception as e:  # one op's search failing never loses the others'
            logger.warning("a shrink failed: %s: %s", type(e).__name__, e)
    if found:
        writer.add_shrinks(found)
    logger.info("shrank %d failing ops: %d variants in %.1f s", len(found), sum(r.analysed for r in found),
                sum(r.seconds for r in found))
    return found
