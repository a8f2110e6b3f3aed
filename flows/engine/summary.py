"""What an analyze run tells its caller at the end: the summary (also the data of its Prefect state).

Apart from the flow, so a caller that only reads it (the CLI talking to `opbyop serve`) does not
import Prefect.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class RunSummary(BaseModel):
    run_id: str
    models: list[str]
    ops_total: int
    ops_unique: int
    reused: int
    statuses: dict[str, int]
    failures: dict[str, int] = Field(default_factory=dict)  # failed stage -> unique ops
    model_errors: dict[str, str] = Field(default_factory=dict)
    whole: dict[str, str] = Field(default_factory=dict)  # model -> whole-model status
    phases: dict[str, float] = Field(default_factory=dict)  # phase -> seconds
    error: str | None = None  # why the run stopped before its end
    report: str | None = None  # path of the HTML report
    compiler: str = ""  # the compiler build under test (its label)
    cluster_lost: int = 0  # times the run's Dask cluster was lost
    cluster_restarts: int = 0  # times it was started again (one opbyop started: flows/hosting/run_cluster.py)
    redone: int = 0  # ops handed out again on the restarted cluster
    wholes_redone: int = 0  # whole models handed out again there
    group: list[RunSummary] = Field(default_factory=list)  # the runs before it in its group (one per compiler)
    comparisons: list[dict[str, Any]] = Field(default_factory=list)  # each run of the group against the one before

    def line(self) -> str:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.statuses.items(), key=lambda kv: -kv[1]))
        failed = "; ".join(f"{n} failed at {s}" for s, n in self.failures.items())
        errors = f"; {len(self.model_errors)} models could not be split" if self.model_errors else ""
        stopped = f"; stopped: {self.error}" if self.error else ""
        return (f"run {self.run_id}: {self.ops_unique} unique ops of {self.ops_total} ({self.reused} reused): "
                f"{counts or 'nothing analysed'}" + (f" ({failed})" if failed else "") + errors + self._restarts()
                + stopped)

    def _restarts(self) -> str:
        """'; the Dask cluster was lost once and restarted once: 12 ops and 1 whole model redone'."""
        if not self.cluster_lost:
            return ""
        if not self.cluster_restarts:
            return f"; the Dask cluster was lost {_times(self.cluster_lost)}, not restarted"
        wholes = f" and {self.wholes_redone} whole model{'s' * (self.wholes_redone != 1)}" if self.wholes_redone else ""
        return (f"; the Dask cluster was lost {_times(self.cluster_lost)} and restarted "
                f"{_times(self.cluster_restarts)}: {self.redone} op{'s' * (self.redone != 1)}{wholes} redone")


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


class RunFailed(Exception):
    """The data of a Failed analyze state: what Prefect raises when that state's result is asked for,
    carrying the run's summary for callers that read it (never a bare model Prefect cannot raise)."""

    def __init__(self, summary: RunSummary):
        super().__init__(summary.line())
        self.summary = summary


def summary_of(data: object) -> RunSummary | None:
    """The summary an analyze state's result carries: the summary itself, or a RunFailed's."""
    summary = data.summary if isinstance(data, RunFailed) else data
    return summary if isinstance(summary, RunSummary) else None
