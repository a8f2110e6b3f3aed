"""Run ids: the store's key of a run, and what a resume or a retry finds the run by."""

from __future__ import annotations

from datetime import datetime, timezone

from opbyop.run.plan import new_run_id  # noqa: F401  (one home: a CLI run's ids are the same kind)


def run_id_for(flow_run) -> str:  # noqa: ANN001  (prefect's FlowRun)
    """The run id of a flow run started without one: from its creation time and its id, which a
    retry of that flow run keeps, so the retry resumes the same run in the store."""
    created = flow_run.created or flow_run.expected_start_time or datetime.now(timezone.utc)
    return f"{created.astimezone(timezone.utc):%Y%m%dT%H%M%S}-{flow_run.id.hex[:6]}"


def group_run_ids(run_id: str, compilers: int) -> list[str]:
    """The run ids of a run analysed under `compilers` compiler builds: the id itself for one, else
    one id per build (`<run_id>-c1` ...), the group's id being `run_id`: a retry finds every one."""
    return [run_id] if compilers == 1 else [f"{run_id}-c{i}" for i in range(1, compilers + 1)]
