"""Two runs of the same ops side by side, typically two compiler builds (or two nights), and the
history of an op across the runs of a group (one run per compiler, `opbyop analyze --compiler A
--compiler B`).

The SQL is in storage/sql/compare.sql and compiler_history.sql (also `opbyop query compare ...`);
this module adds the run's compilers, the counts and the ops whose compile time moved most.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from opbyop.errors import StoreError
from opbyop_storage.aggregate import run_query
from opbyop_storage.readonly import StoreConnection

CHANGES = ("regression", "progression", "message", "no_verdict", "same")

_RUN_SQL = """
SELECT run_id, started_at, group_id, compiler_spec, compiler_package, compiler_version, compiler_library_sha256,
       compiler_key, plugin_version
FROM runs WHERE run_id = $run_id
"""
_GROUP_SQL = "SELECT run_id FROM runs WHERE group_id = $group_id ORDER BY started_at, run_id"
_ONLY_SQL = """
SELECT count(*) FILTER (WHERE p.signature IS NULL) AS only_run, count(*) FILTER (WHERE c.signature IS NULL) AS only_previous
FROM (SELECT signature FROM results WHERE run_id = $run_id) c
FULL JOIN (SELECT signature FROM results WHERE run_id = $prev_run_id) p ON p.signature = c.signature
"""


def compiler_label(run: dict[str, Any]) -> str:
    """How a run's compiler is named: package and version, what was asked for, and the library's digest."""
    version = run.get("compiler_version") or run.get("plugin_version") or ""
    name = f"{run.get('compiler_package') or 'jax-tt-plugin'} {version}".strip() if version else "a PJRT library"
    spec = run.get("compiler_spec") or ""
    asked = f" [{spec}]" if spec and spec != f"{run.get('compiler_package')}=={version}" else ""
    digest = (run.get("compiler_library_sha256") or "")[:12]
    return f"{name}{asked}" + (f" ({digest})" if digest else "")


@dataclass
class RunComparison:
    """`run_id` beside `previous_run_id`: each op both analysed, classified (compare.sql)."""

    run_id: str
    previous_run_id: str
    compiler: str
    previous_compiler: str
    rows: list[dict[str, Any]]
    only_run: int = 0  # ops analysed in run_id only
    only_previous: int = 0

    @property
    def counts(self) -> dict[str, int]:
        found = Counter(r["change"] for r in self.rows)
        return {change: found.get(change, 0) for change in CHANGES}

    def of(self, change: str) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["change"] == change]

    def compile_time_changes(self, n: int = 10) -> list[dict[str, Any]]:
        """The ops whose compile time moved most (either way), where both compiled."""
        timed = [r for r in self.rows if r.get("compile_s_change") is not None]
        return sorted(timed, key=lambda r: -abs(r["compile_s_change"]))[:n]

    def line(self) -> str:
        c = self.counts
        return (f"{self.previous_compiler} -> {self.compiler}: {c['regression']} regressions, {c['progression']} "
                f"progressions, {c['message']} changed messages, {c['same']} the same, {c['no_verdict']} without a "
                f"verdict; {self.only_previous} ops only in {self.previous_run_id}, {self.only_run} only in {self.run_id}")

    def summary(self) -> dict[str, Any]:
        """Counts and names, as plain data (a Prefect artifact, a flow's result)."""
        return {"run_id": self.run_id, "previous_run_id": self.previous_run_id, "compiler": self.compiler,
                "previous_compiler": self.previous_compiler, **self.counts, "only_run": self.only_run,
                "only_previous": self.only_previous}


@dataclass
class GroupComparison:
    """The runs of a group in the order they ran, each step compared, and every op's history."""

    group_id: str
    run_ids: list[str]
    compilers: list[str]
    steps: list[RunComparison] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)  # compiler_history.sql


def _run(con: StoreConnection, run_id: str) -> dict[str, Any]:
    rows = con.query(_RUN_SQL, {"run_id": run_id}).records()
    if not rows:
        raise StoreError(f"no run {run_id!r} in the store", "list them with `opbyop runs`")
    return rows[0]


def compare_runs(con: StoreConnection, run_id: str, previous_run_id: str) -> RunComparison:
    """`run_id` against `previous_run_id`, op by op."""
    run, previous = _run(con, run_id), _run(con, previous_run_id)
    rows = run_query(con, "compare", run_id=run_id, prev_run_id=previous_run_id).records()
    only = con.query(_ONLY_SQL, {"run_id": run_id, "prev_run_id": previous_run_id}).records()[0]
    return RunComparison(run_id=run_id, previous_run_id=previous_run_id, compiler=compiler_label(run),
                         previous_compiler=compiler_label(previous), rows=rows, only_run=only["only_run"],
                         only_previous=only["only_previous"])


def group_of(con: StoreConnection, run_id: str) -> str:
    """The group a run was started in ("" alone)."""
    return _run(con, run_id).get("group_id") or ""


def compare_group(con: StoreConnection, group_id: str) -> GroupComparison:
    """Each run of the group against the one before it, and each op's history across them."""
    run_ids = [r["run_id"] for r in con.query(_GROUP_SQL, {"group_id": group_id}).records()]
    if not run_ids:
        raise StoreError(f"no runs of group {group_id!r} in the store",
                         "a group is the run id given to `opbyop analyze --compiler A --compiler B` (`opbyop runs`)")
    compilers = [compiler_label(_run(con, r)) for r in run_ids]
    steps = [compare_runs(con, after, before) for before, after in zip(run_ids, run_ids[1:])]
    history = run_query(con, "compiler_history", group_id=group_id).records()
    return GroupComparison(group_id=group_id, run_ids=run_ids, compilers=compilers, steps=steps, history=history)
