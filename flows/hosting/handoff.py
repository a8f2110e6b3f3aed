"""What a caller in the same process (the CLI) hands to the flow it runs, beside the parameters:
when the run started, the phases it measured before the flow (its server and cluster start-up), the
caller's split thread (where the CLI asks for the models while the server starts, and every run it
makes takes them: opbyop.run.models), the cluster process it started for the run (a run that loses
it starts it again: flows/hosting/run_cluster.py), and an event that asks the flow to stop (Ctrl-C).
A context variable: set in the thread that calls the flow, unseen by any other run."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Iterator

from opbyop_flows.hosting.cluster_process import ClusterProcess
from opbyop.run.models import Splits


@dataclass
class Handoff:
    started: float = field(default_factory=time.monotonic)  # time.monotonic() at the run's start
    phases: dict[str, float] = field(default_factory=dict)  # the time line's steps before the flow, and what ran beside
    flow_called: float | None = None  # time.monotonic() when the caller called the flow: where its steps end
    stop: threading.Event = field(default_factory=threading.Event)
    splits: Splits | None = None  # the models split once for every run that asks (default: this handoff's own)
    cluster: ClusterProcess | None = None  # the caller's cluster process, if it started one

    def __post_init__(self) -> None:
        if self.splits is None:
            self.splits = Splits(stop=self.stop)  # a stop request leaves the models not yet started

    def beside(self) -> Handoff:
        """A handoff for another run of the same caller (a target of the nightly, a build of a group):
        the same stop request, split thread and cluster, its own time line."""
        return Handoff(stop=self.stop, splits=self.splits, cluster=self.cluster)


_HANDOFF: ContextVar[Handoff | None] = ContextVar("opbyop_handoff", default=None)


def current() -> Handoff | None:
    return _HANDOFF.get()


@contextmanager
def handing_off(handoff: Handoff) -> Iterator[Handoff]:
    token = _HANDOFF.set(handoff)
    try:
        yield handoff
    finally:
        _HANDOFF.reset(token)
