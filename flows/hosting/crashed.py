"""Flow runs whose process is gone are marked Crashed.

Prefect leaves a flow run whose process was killed with SIGKILL Running for good, with its task runs,
unless a Prefect worker ran it (the process worker reports the exit). Two remedies:
- every analyze / nightly run labels itself with its host, pid and the pid's start time; at the start
  of every run (and by `python -m opbyop_flows.hosting.crashed`), this host's Running runs of those flows whose
  process is gone are set to Crashed, with their Running task runs (`sweep`);
- on a long-lived server, Prefect's zombie detection (`python -m opbyop_flows.hosting.crashed --automation`): an
  automation marks Crashed a flow run that stopped sending heartbeats (one every 30 s,
  flows/hosting/settings.py) for 90 s.
"""

from __future__ import annotations

import argparse
import os
import socket
from datetime import timedelta
from uuid import UUID

import psutil

FLOWS = ("analyze", "nightly")
HOST, PID, PID_START = "opbyop.host", "opbyop.pid", "opbyop.pid-start"
AUTOMATION = "opbyop: crash zombie flow runs"


def process_labels() -> dict[str, str]:
    return {HOST: socket.gethostname(), PID: str(os.getpid()),
            PID_START: f"{psutil.Process().create_time():.2f}"}


def label_flow_run(client, flow_run_id: UUID) -> None:  # noqa: ANN001  (a sync Prefect client)
    client.update_flow_run_labels(flow_run_id, process_labels())


def process_gone(labels: dict) -> bool:
    """True when the labels name a process of this host that no longer exists (a pid reused since by
    another process counts as gone: its start time differs)."""
    if labels.get(HOST) != socket.gethostname() or PID not in labels:
        return False  # another machine's, or not ours: not ours to judge
    try:
        started = psutil.Process(int(labels[PID])).create_time()
    except (psutil.NoSuchProcess, ValueError):
        return True
    return abs(started - float(labels.get(PID_START, started))) > 1.0


def sweep(client) -> list[UUID]:  # noqa: ANN001  (a sync Prefect client)
    """Mark this host's Running analyze/nightly runs whose process is gone as Crashed (their Running
    task runs too); returns their ids."""
    from prefect.client.schemas.filters import (FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterId,
                                                FlowRunFilterState, FlowRunFilterStateType, TaskRunFilter,
                                                TaskRunFilterState, TaskRunFilterStateType)
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    running = client.read_flow_runs(
        flow_filter=FlowFilter(name=FlowFilterName(any_=list(FLOWS))),
        flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING]))))
    crashed = []
    for run in running:
        if not process_gone(dict(run.labels or {})):
            continue
        message = (f"its process (pid {run.labels.get(PID)} on {run.labels.get(HOST)}) is gone: killed without "
                   f"a chance to report; re-run it with the same run id to complete it")
        client.set_flow_run_state(run.id, Crashed(message=message), force=True)
        tasks = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])),
            task_run_filter=TaskRunFilter(state=TaskRunFilterState(type=TaskRunFilterStateType(any_=[StateType.RUNNING]))))
        for task_run in tasks:
            client.set_task_run_state(task_run.id, Crashed(message="its flow run's process is gone"), force=True)
        crashed.append(run.id)
    return crashed


def create_automation() -> str:
    """Prefect's zombie-flow automation (docs: 'How to detect and respond to zombie flows'); kept if
    it exists. Returns what was done."""
    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    try:
        Automation.read(name=AUTOMATION)
        return f"automation {AUTOMATION!r} exists"
    except ValueError:
        pass
    Automation(
        name=AUTOMATION,
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", "prefect.flow-run.Completed", "prefect.flow-run.Failed",
                    "prefect.flow-run.Cancelled", "prefect.flow-run.Crashed"},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            for_each={"prefect.resource.id"}, posture=Posture.Proactive, threshold=1,
            within=timedelta(seconds=90)),
        actions=[ChangeFlowRunState(state=StateType.CRASHED,
                                    message="no heartbeat for 90 s: its process was killed or its machine lost")],
    ).create()
    return f"automation {AUTOMATION!r} created"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="mark flow runs whose process is gone as Crashed")
    parser.add_argument("--automation", action="store_true", help="also create the heartbeat automation")
    args = parser.parse_args(argv)
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        for run_id in sweep(client):
            print(f"flow run {run_id}: marked Crashed (its process is gone)")
    if args.automation:
        print(create_automation())


if __name__ == "__main__":
    main()
