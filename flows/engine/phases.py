"""Where a run's wall time goes: its time line (RunInfo.phases), every second of it on one step.

The time line is the run's own path from start to end: one step at a time, each charged with the wall
time the run spent in it or waiting for it, so the steps add up to `total`. What runs beside the path
(the Prefect server, the cluster and the exports start at once; the whole model runs beside the op
fan-out) is kept too, with its own wall time, as `<name> (beside)`: those overlap the path.
  imports            the command's own start: Python, its imports, starting what runs beside (CLI runs)
  server, cluster    waiting for the Prefect server / the Dask cluster to answer (CLI runs)
  compiler           the compiler build under test prepared: the first time on a machine it is fetched,
                     unpacked and started once; after that its record is read
  descriptor         the chip's system descriptor: made the first time (the plugin's mock start, a
                     derivation, a check by compiling), read from the cache after that
  plugin assets      the plugin's first start ever on this machine: its runtime unpacked (~417 MB)
  lock wait          waiting for the plugin's start-up lock another process held (one start at a time)
  flow start         Prefect creating the flow run, from the call to the flow's first line
  export             waiting for the next model's export to StableHLO and its split into ops (the
                     ops of the models before it run meanwhile); each model's own export time is
                     `export <model> (beside)`
  split              a model's ops deduplicated against the models before it, the values of its
                     constant-fed arguments computed
  warm-up            the op workers (compiler, XLA:CPU, device) started on the Dask workers, when
                     the first ops are handed out
  fan-out            from the last model handed out to the last result back (and the whole models,
                     when they end later); `ops (beside)` is the ops' whole span; `cluster restart
                     (beside)`: a lost cluster started again and its op workers warmed, inside the
                     step that noticed it
  store, report      writing the store; the aggregation, HTML report and artifacts
  other              what no step claimed: a step missing from this list shows here
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

BESIDE = " (beside)"  # the suffix of a phase that ran beside the time line (its seconds overlap it)
OTHER = "other"
# The order steps are shown in when read back; a step that did not happen is left out.
ORDER = ("imports", "server", "cluster", "compiler", "descriptor", "plugin assets", "lock wait", "flow start", "export", "split", "store",
         "warm-up", "fan-out", "whole model", "shrink", "report", OTHER, "total")


class PhaseClock:
    def __init__(self, before: dict[str, float] | None = None, started: float | None = None,
                 since: float | None = None):
        """`before`: phases measured before the flow started (by the CLI); `started`: the
        time.monotonic() the run's total counts from (default: now); `since`: where the time line
        stands (the end of `before`'s steps; default: `started`)."""
        self._seconds: dict[str, float] = dict(before or {})
        self._started = time.monotonic() if started is None else started
        self._cursor = self._started if since is None else since
        self._lock = threading.Lock()

    def add(self, phase: str, seconds: float) -> None:
        """Seconds of something that ran beside the time line (stored as `phase (beside)`)."""
        self._charge(phase + BESIDE, seconds)

    def _charge(self, name: str, seconds: float) -> None:
        with self._lock:
            self._seconds[name] = self._seconds.get(name, 0.0) + max(0.0, seconds)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """A step of the time line: the run's own thread is in it (or waiting for it) until it ends.
        The time since the previous step, if any, is `other`."""
        start = time.monotonic()
        self._charge(OTHER, start - self._cursor)
        try:
            yield
        finally:
            end = time.monotonic()
            self._charge(name, end - start)
            self._cursor = end

    def mark(self, name: str) -> None:
        """The time line's step that ends now: the time since the previous step is `name`'s."""
        now = time.monotonic()
        self._charge(name, now - self._cursor)
        self._cursor = now

    def reassign(self, step: str, parts: dict[str, float]) -> None:
        """Seconds of `step` that were in fact these other steps (a lock wait inside the descriptor's
        step ...): moved to them, never more than the step has."""
        with self._lock:
            for name, seconds in parts.items():
                moved = min(max(0.0, seconds), self._seconds.get(step, 0.0))
                self._seconds[step] = self._seconds.get(step, 0.0) - moved
                self._seconds[name] = self._seconds.get(name, 0.0) + moved

    def as_dict(self) -> dict[str, float]:
        """The time line's steps, what ran beside it, and the total; the steps add up to the total."""
        now = time.monotonic()
        with self._lock:
            seconds = dict(self._seconds)
        seconds[OTHER] = seconds.get(OTHER, 0.0) + max(0.0, now - self._cursor)
        seconds["total"] = now - self._started
        return {name: round(value, 3) for name, value in sorted(seconds.items(), key=lambda kv: _rank(kv[0]))}


def _rank(name: str) -> tuple[int, int, str]:
    base = name.removesuffix(BESIDE)
    head = next((i for i, step in enumerate(ORDER) if base == step or base.startswith(step + " ")), len(ORDER) - 2)
    return (name.endswith(BESIDE), head, name)


def time_line(phases: dict[str, float]) -> dict[str, float]:
    """The steps of the time line alone (they add up to `total`), without what ran beside it."""
    return {name: s for name, s in phases.items() if not name.endswith(BESIDE) and name != "total"}


def format_phases(phases: dict[str, float]) -> str:
    """'server 8.1 s, descriptor 2.4 s, ... total 14.2 s; beside: export mlp 9.0 s, ...'."""
    steps = [f"{name} {seconds:.1f} s" for name, seconds in phases.items() if not name.endswith(BESIDE)]
    beside = [f"{name.removesuffix(BESIDE)} {seconds:.1f} s" for name, seconds in phases.items() if name.endswith(BESIDE)]
    return ", ".join(steps) + (f"; beside: {', '.join(beside)}" if beside else "")
