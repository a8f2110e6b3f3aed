"""The `corpus` flow: the single-op corpus through the analyze fan-out (one Prefect task per op on
Dask), its results in the store as the pseudo-model `corpus` (flows/engine/corpus_run.py)."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.context import get_run_context
from prefect.task_runners import ThreadPoolTaskRunner

from opbyop_flows.analyze import TASK_THREADS, claim_flow_run
from opbyop_flows.engine.corpus_run import CorpusRun
from opbyop_flows.engine.run_ids import run_id_for
from opbyop_flows.hosting import handoff as handoffs
from opbyop.boards import DEFAULT_CHIP
from opbyop.config import AnalysisConfig, ClusterConfig, CompilerOptions, ShrinkOption
from opbyop.corpus.ops import CorpusSelection


@flow(name="corpus", task_runner=ThreadPoolTaskRunner(max_workers=TASK_THREADS), persist_result=False)
def corpus(selection: CorpusSelection = CorpusSelection(), chip: str = DEFAULT_CHIP,
           compiler: CompilerOptions = CompilerOptions(), op_timeout_s: float = 120.0, reuse_cached: bool = True,
           cluster: ClusterConfig = ClusterConfig(), run_id: str | None = None, compile_only: bool = False):
    """Analyse the selected corpus cases on `chip`, one task per unique op, and store every result.
    A selection with a mesh runs its multichip cases on `chip`'s board with that mesh."""
    logger = get_run_logger()
    run_id = run_id or run_id_for(get_run_context().flow_run)
    claim_flow_run(logger)
    config = AnalysisConfig(models=[], chip=chip, compiler=compiler, mesh=selection.mesh, op_timeout_s=op_timeout_s,
                            reuse_cached=reuse_cached, whole_model=False, cluster=cluster)
    run = CorpusRun(config=config, run_id=run_id, shrink=ShrinkOption(), logger=logger,
                    handoff=handoffs.current() or handoffs.Handoff(), selection=selection, compile_only=compile_only)
    return run.execute()
