"""Where a run's wall time goes: named phases with their seconds (RunInfo.phases).

Phases may overlap (the whole model runs beside the op fan-out; the CLI starts the server, the
cluster and the export at the same time): each phase is its own wall time, and `total` is the run's.
  server, cluster    until the Prefect server / the Dask cluster answered (CLI runs)
  export             each model loaded, exported to StableHLO and split into ops (the split itself
                     is the small part of it)
  split              the ops deduplicated across models, constant-fed arguments' values computed
  warm-up            the op workers (compiler, XLA:CPU, device) started on the Dask workers
  fan-out            from the first op handed to the cluster to the last result back
  whole model        from the same start to the last whole-model result (beside the fan-out)
  store, report      writing the store; the aggregation, HTML report and artifacts
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

# The order they are shown in; a phase that did not happen is left out.
ORDER = ("server", "cluster", "export", "split", "warm-up", "fan-out", "whole model", "store", "report", "total")


class PhaseClock:
    def __init__(self, before: dict[str, float] | None = None, started: float | None = None):
        """`before`: phases measured before the flow started (by the CLI); `started`: the
        time.monotonic() the run's total counts from (default: now)."""
        self._seconds: dict[str, float] = dict(before or {})
        self._started = time.monotonic() if started is None else started
        self._lock = threading.Lock()

    def add(self, phase: str, seconds: float) -> None:
        with self._lock:
            self._seconds[phase] = self._seconds.get(phase, 0.0) + max(0.0, seconds)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - start)

    def as_dict(self) -> dict[str, float]:
        with self._lock:
            seconds = {**self._seconds, "total": time.monotonic() - self._started}
        known = [p for p in ORDER if p in seconds]
        return {p: round(seconds[p], 3) for p in known + sorted(set(seconds) - set(known))}


def format_phases(phases: dict[str, float]) -> str:
    """'server 8.1 s, cluster 2.4 s, ... total 14.2 s'."""
    return ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items())
