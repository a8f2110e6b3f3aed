"""The nightly aggregation: the named SQL queries run for one run against its predecessor.

The previous run, unless given, is the last completed run of the same chip, compiler options and
models (comparing across chips or options would report the difference in settings as regressions,
across models every op of the other models as new or removed). Model by model, each model is
compared with the last comparable run that split that model (model_comparisons).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opbyop.errors import StoreError
from opbyop_storage.files import SkippedFile
from opbyop_storage.queries import get_query
from opbyop_storage.readonly import QueryResult, StoreConnection

DEFAULT_PARAMS: dict[str, Any] = {"n": 30, "limit": 50}


def run_query(con: StoreConnection, name: str, **params: Any) -> QueryResult:
    """Named query `name` with its parameters (n and limit have defaults)."""
    query = get_query(name)
    if "runs" in query.params and params.get("runs") is None and params.get("run_id"):
        window = run_query(con, "window_runs", run_id=params["run_id"], n=params.get("n", DEFAULT_PARAMS["n"]))
        params = {**params, "runs": window.column("run_id")}
    values = {p: params.get(p, DEFAULT_PARAMS.get(p)) for p in query.params}
    missing = [p for p, v in values.items() if v is None]
    if missing:
        raise StoreError(f"query {name!r} needs {', '.join(missing)}",
                         f"pass {', '.join(f'{p}=...' for p in missing)}")
    return con.query(query.sql, values)


def previous_run_id(con: StoreConnection, run_id: str) -> str | None:
    rows = run_query(con, "previous_run", run_id=run_id).rows
    return rows[0][0] if rows else None


def _empty() -> QueryResult:
    return QueryResult([], [])


@dataclass
class NightlySummary:
    """Every aggregation of one run (and of its comparison with the previous one)."""

    run_id: str
    previous_run_id: str | None
    depth_histogram: QueryResult
    blockers: QueryResult
    top_blockers: QueryResult
    op_pass_rate: QueryResult
    kind_depth_matrix: QueryResult
    regressions: QueryResult
    progressions: QueryResult
    new_ops: QueryResult
    removed_ops: QueryResult
    trend: QueryResult
    model_trend: QueryResult
    top_failures: QueryResult
    skipped: list[SkippedFile] = field(default_factory=list)


@dataclass
class ModelComparison:
    """One model of a run against the last comparable run that had it (None: the first such run)."""

    model: str
    previous_run_id: str | None
    depth_histogram: list[dict[str, Any]]
    regressions: list[dict[str, Any]] = field(default_factory=list)
    progressions: list[dict[str, Any]] = field(default_factory=list)
    new_ops: list[dict[str, Any]] = field(default_factory=list)
    removed_ops: list[dict[str, Any]] = field(default_factory=list)


CHANGE_KINDS = {"regression": "regressions", "progression": "progressions", "new": "new_ops", "removed": "removed_ops"}


def model_comparisons(con: StoreConnection, run_id: str) -> list[ModelComparison]:
    """Every model of `run_id` (that split) with its depth histogram and its changes against its own
    previous comparable run: one query per distinct previous run, not per model."""
    histogram = run_query(con, "depth_histogram", run_id=run_id).records()
    previous = {r["model"]: r["previous_run_id"] for r in run_query(con, "previous_model_runs", run_id=run_id).records()}
    out = {model: ModelComparison(model, prev, [h for h in histogram if h["model"] == model])
           for model, prev in previous.items()}
    for prev in sorted({p for p in previous.values() if p}):
        models = sorted(m for m, p in previous.items() if p == prev)
        for row in run_query(con, "model_changes", run_id=run_id, prev_run_id=prev, models=models).records():
            getattr(out[row["model"]], CHANGE_KINDS[row.pop("change")]).append(row)
    return [out[m] for m in sorted(out)]


def model_comparisons_for(root: Path | str | None, run_id: str) -> list[ModelComparison]:
    with StoreConnection(root) as con:
        return model_comparisons(con, run_id)


def nightly(con: StoreConnection, run_id: str, previous: str | None = None, n: int = 30,
            limit: int = 50) -> NightlySummary:
    prev = previous or previous_run_id(con, run_id)

    def against_previous(name: str) -> QueryResult:
        return run_query(con, name, run_id=run_id, prev_run_id=prev) if prev else _empty()

    return NightlySummary(
        run_id=run_id, previous_run_id=prev,
        depth_histogram=run_query(con, "depth_histogram", run_id=run_id),
        blockers=run_query(con, "blockers", run_id=run_id),
        top_blockers=run_query(con, "top_blockers", run_id=run_id, limit=limit),
        op_pass_rate=run_query(con, "op_pass_rate", run_id=run_id, n=n),
        kind_depth_matrix=run_query(con, "kind_depth_matrix", run_id=run_id),
        regressions=against_previous("regressions"), progressions=against_previous("progressions"),
        new_ops=against_previous("new_ops"), removed_ops=against_previous("removed_ops"),
        trend=run_query(con, "trend", run_id=run_id, n=n),
        model_trend=run_query(con, "model_trend", run_id=run_id, n=n),
        top_failures=run_query(con, "top_failures", run_id=run_id, limit=limit),
        skipped=list(con.skipped),
    )


def nightly_for(root: Path | str | None, run_id: str, previous: str | None = None, n: int = 30,
                limit: int = 50) -> NightlySummary:
    with StoreConnection(root) as con:
        return nightly(con, run_id, previous, n, limit)
