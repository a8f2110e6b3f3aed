"""One analyze flow run under several compiler builds: the models split once (the handoff's split
thread), then one run per build (each its own run in the store, `<run_id>-c1` ...; the group's id is
the flow's run id) on one cluster, whose op workers are each build's own, then every run compared with the one before it
(opbyop_storage.compare: regressions, progressions, changed messages; `opbyop compare --group` shows more).
"""

from __future__ import annotations

import logging
from contextlib import ExitStack

from prefect.artifacts import create_table_artifact
from prefect.states import Completed, Failed, State

from opbyop_flows.engine.analyze_run import AnalyzeRun
from opbyop_flows.engine.run_ids import group_run_ids
from opbyop_flows.engine.summary import RunFailed, RunSummary, summary_of
from opbyop_flows.hosting.handoff import Handoff
from opbyop_flows.hosting.run_cluster import RunCluster
from opbyop.config import AnalysisConfig, ShrinkOption
from opbyop.errors import OpbyopError
from opbyop.workspace import Workspace
from opbyop_storage.compare import compare_runs
from opbyop_storage.readonly import StoreConnection


def run_group(configs: list[AnalysisConfig], run_id: str, shrink: ShrinkOption | None, handoff: Handoff,
              logger: logging.Logger | logging.LoggerAdapter) -> State:
    """Each configuration (one compiler build each) analysed in turn; the last run's summary carries
    the others and the comparisons."""
    ids = group_run_ids(run_id, len(configs))
    workspace = Workspace.default()
    summaries: list[RunSummary] = []
    stored: list[str] = []  # the runs made, in order (a build that cannot be prepared makes none)
    refused: list[str] = []
    failed = False
    with ExitStack() as stack:
        try:  # one cluster for every build: its start-up is paid once
            cluster = stack.enter_context(RunCluster(configs[0].cluster, handoff.cluster))
        except OpbyopError as e:
            logger.warning("no shared cluster (%s): each run starts its own", e)
            cluster = None
        stack.enter_context(handoff.splits.kept())  # every build's run takes the same splits
        for i, (config, one_id) in enumerate(zip(configs, ids)):
            # the first run takes the caller's start-up phases; every run the same splits (made once)
            own = handoff if i == 0 else handoff.beside()
            try:
                run = AnalyzeRun(config=config, run_id=one_id, shrink=shrink, handoff=own, logger=logger,
                                 workspace=workspace, group_id=run_id, cluster=cluster)
            except OpbyopError as e:  # a build that cannot be prepared: said, and the other builds run
                logger.error("%s: %s", config.compiler_spec, e)
                refused.append(f"{config.compiler_spec}: {e}")
                continue
            state = run.execute()
            summary = summary_of(state.result(raise_on_failure=False))
            if summary is None or state.is_cancelled():
                return state  # stopped: the runs so far are stored, a retry of the flow run resumes them
            summaries.append(summary)
            stored.append(one_id)
            failed = failed or not state.is_completed()
    if not summaries:
        return Failed(message="no compiler build could be prepared: " + "; ".join(refused))
    comparisons = compared(workspace, stored, logger)
    last = summaries[-1].model_copy(update={"group": summaries[:-1], "comparisons": comparisons})
    line = "; ".join([c["line"] for c in comparisons] + refused)
    if failed or refused:
        return Failed(message=line or last.line(), data=RunFailed(last))
    return Completed(message=line or last.line(), data=last)


def compared(workspace: Workspace, ids: list[str], logger: logging.Logger | logging.LoggerAdapter) -> list[dict]:
    """Each run against the one before it (counts), logged and kept as a Prefect table artifact."""
    out = []
    with StoreConnection(workspace.store) as con:
        for before, after in zip(ids, ids[1:]):
            step = compare_runs(con, after, before)
            logger.info("%s", step.line())
            out.append({**step.summary(), "line": step.line()})
    if out:
        create_table_artifact(table=[{k: v for k, v in c.items() if k != "line"} for c in out],
                              key="compiler-comparison", description="each compiler build against the one before it "
                              "(opbyop compare --group for every op)")
    return out
