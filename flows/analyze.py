"""The `analyze` flow: models -> single ops -> one task per unique op on Dask -> the result store;
under several compiler builds (config.compilers), one run per build, compared op by op.

This module declares the flow (its parameters are the Prefect UI's form); flows/engine/analyze_run.py
carries the run out. A run started without a run id gets one derived from its flow run, so Prefect's
Retry of that flow run resumes it.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.context import get_run_context
from prefect.task_runners import ThreadPoolTaskRunner

from opbyop_flows.engine.analyze_run import AnalyzeRun
from opbyop_flows.engine.group_run import run_group
from opbyop_flows.engine.run_ids import new_run_id, run_id_for  # noqa: F401  (new_run_id: part of this module's API)
from opbyop_flows.engine.summary import RunFailed, RunSummary  # noqa: F401  (the results a caller reads)
from opbyop_flows.hosting import handoff as handoffs
from opbyop_flows.hosting.crashed import label_flow_run, sweep
from opbyop.config import AnalysisConfig, ShrinkOption
from opbyop.jaxenv import prepare_jax
from opbyop.run.plan import host_devices

TASK_THREADS = 16  # Prefect task threads: each mostly waits on Dask, a few keep the workers fed


def claim_flow_run(logger) -> None:  # noqa: ANN001
    """Label this flow run with its process (so a later run can tell it was killed), and mark
    this host's runs whose process is gone as Crashed. Best effort: never stops the run."""
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            label_flow_run(client, get_run_context().flow_run.id)
            for crashed in sweep(client):
                logger.warning("flow run %s was left Running by a killed process: marked Crashed", crashed)
    except Exception as e:  # an API that refuses labels must not cost the run
        logger.warning("could not check for crashed flow runs: %s: %s", type(e).__name__, e)


@flow(name="analyze", task_runner=ThreadPoolTaskRunner(max_workers=TASK_THREADS), persist_result=False)
def analyze(config: AnalysisConfig = AnalysisConfig(), run_id: str | None = None, shrink: ShrinkOption = ShrinkOption()):
    """Analyse models op by op on a Dask cluster and store every op's result."""
    # this process exports JAX models on the CPU and computes sharded ops' upstream values on a host
    # mesh; compilers live in the workers
    prepare_jax(host_devices=host_devices(config))
    logger = get_run_logger()
    run_id = run_id or run_id_for(get_run_context().flow_run)
    claim_flow_run(logger)
    caller = handoffs.current()  # the CLI's or a service's; a run from the UI or a deployment makes its own
    handoff = caller or handoffs.Handoff()
    try:
        configs = config.per_compiler()
        if len(configs) > 1:  # one run per compiler build, compared op by op
            return run_group(configs, run_id, shrink, handoff, logger)
        run = AnalyzeRun(config=config, run_id=run_id, shrink=shrink, handoff=handoff, logger=logger)
        return run.execute()
    finally:
        if caller is None:  # its split thread ends with the flow run (a worker process serves many)
            handoff.splits.close()
