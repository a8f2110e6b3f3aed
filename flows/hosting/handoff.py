"""What a caller in the same process (the CLI) hands to the flow it runs, beside the parameters:
when the run started, the phases it measured before the flow (its server and cluster start-up), the
models it already started to split (while the server starts), and an event that asks the flow to
stop (Ctrl-C). A context variable: set in the thread that calls the flow, unseen by any other run."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from opbyop.config import ExportBudget, load_zoo
from opbyop.frontends.loader import expand_specs, warm_exports
from opbyop.jaxenv import prepare_jax


@dataclass
class Handoff:
    started: float = field(default_factory=time.monotonic)  # time.monotonic() at the run's start
    phases: dict[str, float] = field(default_factory=dict)  # the time line's steps before the flow, and what ran beside
    flow_called: float | None = None  # time.monotonic() when the caller called the flow: where its steps end
    stop: threading.Event = field(default_factory=threading.Event)
    splits: dict[tuple[str, int], Future] = field(default_factory=dict)  # (spec, seed) -> SplitOutcome

    def start_splits(self, specs: Sequence[str], seed: int, host_devices: int | None = None,
                     budget: ExportBudget | None = None) -> None:
        """Split the models one after another in a thread of their own (torch.export is not
        thread-safe: this thread is the only one that exports); the flow's split tasks take the
        outcomes from here. A model already being split ahead is not split again. Once the run is asked
        to stop, the models not yet started are not split (an export can take minutes; nothing of it
        would be used)."""
        zoo = load_zoo()
        futures = {(spec, seed): Future() for spec in dict.fromkeys(expand_specs(specs))
                   if (spec, seed) not in self.splits}  # a model split ahead once, whoever asks first
        if not futures:
            return
        warm_exports([spec for spec, _ in futures], zoo, seed)  # while the server and cluster start
        self.splits.update(futures)

        def work() -> None:
            prepare_jax(host_devices=host_devices)  # before anything in this process imports JAX
            from opbyop_tasks.models import SplitOutcome, split_outcome  # prefect: loaded only when used

            for (spec, _), future in futures.items():
                if not future.set_running_or_notify_cancel():
                    continue
                if self.stop.is_set():
                    future.set_result(SplitOutcome(None, None, "not split: the run was stopped before this model"))
                    continue
                try:
                    future.set_result(split_outcome(spec, zoo, seed, budget))
                except BaseException as e:  # the flow's task reports it
                    future.set_exception(e)

        threading.Thread(target=work, name="split-ahead", daemon=True).start()


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
