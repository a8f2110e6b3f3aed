"""Results to reuse: an op analysed before by the same compiler build, chip and options.

The compiler is its key (records.CompilerIdentity.key: the loaded library's digest and the jax that
drove it), never its version string: a local build that says 0.1.3 is not the release 0.1.3.

Only outcomes that judge the op are reused (REUSABLE): never a crash or a timeout (they say more
about the machine at the time than about the op), nor opbyop's own gaps and errors or the
infrastructure's (not_simulated, simulator_error, analyzer_error, infra_error: a newer opbyop may do better). The
run id returned is where the result was first produced (a reused result points at its origin, not
at the run that copied it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import duckdb
import pyarrow as pa

from opbyop.records import RETRYABLE, Fault, OpResult, Status, WholeModelResult
from opbyop_storage import convert
from opbyop_storage.catalog import create_views
from opbyop_storage.schema import conform, schema_of

if TYPE_CHECKING:
    from opbyop_storage.dataset import Store

RUNS_SQL = """
SELECT run_id FROM runs
WHERE compiler_key = $compiler AND chip = $chip AND options_key = $options_key AND run_id <> $exclude_run
  AND coalesce(verdict_code, '') = $verdict_code
ORDER BY started_at DESC, run_id DESC
"""

# Narrow columns only, in a constant list of runs (so only their partitions are read).
FIND_SQL = """
SELECT signature, run_id, ended_at FROM results
WHERE list_contains($runs, run_id) AND signature IN (SELECT unnest($signatures))
  AND status IN (SELECT unnest($reusable))
"""

ROWS_SQL = """
SELECT r.* EXCLUDE (date), coalesce(r.reused_from, r.run_id) AS origin_run
FROM results r
SEMI JOIN (SELECT unnest($pair_runs) AS run_id, unnest($pair_signatures) AS signature) p
    ON p.run_id = r.run_id AND p.signature = r.signature
WHERE list_contains($runs, r.run_id)
"""

# The newest models row of those runs with a reusable whole-model result for one key
WHOLE_SQL = """
SELECT m.*, coalesce(m.whole_reused_from, m.run_id) AS origin_run FROM models m
JOIN runs r USING (run_id)
WHERE list_contains($runs, m.run_id) AND m.whole_key = $key AND m.whole_status IN (SELECT unnest($reusable))
ORDER BY r.started_at DESC, m.run_id DESC
LIMIT 1
"""

REUSABLE = [s.value for s in Status if s not in RETRYABLE and s.fault is not Fault.OPBYOP]

# One run's results, read whole: a run asks model by model, and each query over the run's files costs
# about 0.3 s whatever it fetches (324 models: 90 s), while a run of 17,673 results reads whole in 0.2 s
RUN_ROWS_SQL = """
SELECT r.* EXCLUDE (date), coalesce(r.reused_from, r.run_id) AS origin_run FROM results r WHERE r.run_id = $run
"""
RUN_ROWS_BYTES = 256 * 1024 * 1024  # runs read whole and kept, at most (beyond: their rows fetched per ask)

FIRST_CHUNK = 8  # runs searched at first, newest first (most ops are found in the latest few); doubling


def _latest(con: duckdb.DuckDBPyConnection, runs: list[str], wanted: list[str]) -> dict[str, str]:
    """signature -> the newest run (by start) holding a reusable result for it."""
    found: dict[str, str] = {}
    order = {run: i for i, run in enumerate(runs)}
    remaining = list(wanted)
    start, size = 0, FIRST_CHUNK
    while remaining and start < len(runs):
        chunk, start, size = runs[start:start + size], start + size, size * 2
        best: dict[str, tuple[int, object, str]] = {}
        for sig, run, ended in con.execute(FIND_SQL, {"runs": chunk, "signatures": remaining,
                                                     "reusable": REUSABLE}).fetchall():
            key = (-order[run], ended, run)
            if sig not in best or key > best[sig]:
                best[sig] = key
        found.update({sig: key[2] for sig, key in best.items()})
        remaining = [s for s in remaining if s not in best]
    return found


class CachedResults:
    """The reusable results of earlier runs of one compiler build, chip and options, made by the same
    opbyop code (`verdict_code`: opbyop.run.verdict_code), looked up op by op (a run asks model by
    model): the store is scanned and its matching runs found once, when opened."""

    def __init__(self, store: Store, compiler: str, chip: str, options_key: str, verdict_code: str,
                 exclude_run: str | None = None):
        self.store, self.exclude_run = store, exclude_run or ""
        self.key = {"compiler": compiler, "chip": chip, "options_key": options_key, "verdict_code": verdict_code,
                    "exclude_run": self.exclude_run}
        self.con: duckdb.DuckDBPyConnection | None = None
        self.runs: list[str] = []
        self._run_rows: dict[str, tuple[pa.Table, dict[str, int]] | None] = {}  # None: too large to keep
        if compiler:
            self._open()

    def _open(self) -> None:
        """The store as it is now, without the files of the run that asks (it rewrites them as it goes)."""
        self.close()
        scan = self.store.scan()
        if self.exclude_run:
            own = f"run_id={self.exclude_run}"
            scan.files = {table: [f for f in files if own not in str(f)] for table, files in scan.files.items()}
        self.con = duckdb.connect(":memory:")
        create_views(self.con, scan)
        self.runs = [r for (r,) in self.con.execute(RUNS_SQL, self.key).fetchall()]
        self._run_rows = {}

    def lookup(self, signatures: Iterable[str]) -> dict[str, tuple[str, OpResult]]:
        """signature -> (run id that produced it, the most recent reusable result).

        Most recent: from the latest run (by start time) of that compiler build (its key), chip and
        options that holds a result for the op other than a crash or a timeout."""
        wanted = sorted(set(signatures))
        if not wanted or not self.runs or self.con is None:
            return {}
        try:
            return self._lookup(wanted)
        except duckdb.IOException:  # a file compacted away since the store was scanned: scanned again
            self._open()
            return self._lookup(wanted)

    def _lookup(self, wanted: list[str]) -> dict[str, tuple[str, OpResult]]:
        assert self.con is not None
        latest = _latest(self.con, self.runs, wanted)
        if not latest:
            return {}
        by_run: dict[str, list[str]] = {}
        for signature, run in sorted(latest.items()):
            by_run.setdefault(run, []).append(signature)
        out: dict[str, tuple[str, OpResult]] = {}
        for run, signatures in by_run.items():
            kept = self._rows_of(run)
            if kept is not None:  # the run's rows, read whole before: the asked ones taken
                table, position = kept
                table = table.take([position[s] for s in signatures])
            else:
                table = self.con.sql(ROWS_SQL, params={"runs": [run], "pair_runs": [run] * len(signatures),
                                                       "pair_signatures": signatures}).to_arrow_table()
            rows = _as_results_table(table).to_pylist()
            for origin, row in zip(table.column("origin_run").to_pylist(), rows):
                out[row["signature"]] = (origin, convert.result_from_row(row))
        return out

    def _rows_of(self, run: str) -> tuple[pa.Table, dict[str, int]] | None:
        """`run`'s results read whole once (signature -> its last row), while the runs kept hold at most
        RUN_ROWS_BYTES; None for a run beyond that (its rows are fetched per ask)."""
        assert self.con is not None
        if run not in self._run_rows:
            held = sum(kept[0].nbytes for kept in self._run_rows.values() if kept is not None)
            table = self.con.sql(RUN_ROWS_SQL, params={"run": run}).to_arrow_table()
            if held + table.nbytes > RUN_ROWS_BYTES:
                self._run_rows[run] = None
            else:
                position = {signature: i for i, signature in enumerate(table.column("signature").to_pylist())}
                self._run_rows[run] = (table, position)
        return self._run_rows[run]

    def whole(self, key: str) -> tuple[str, WholeModelResult] | None:
        """(run id that produced it, the most recent reusable whole-model result for `key`), or None."""
        if not self.runs or self.con is None:
            return None
        try:
            table = self.con.sql(WHOLE_SQL, params={"runs": self.runs, "key": key,
                                                    "reusable": REUSABLE}).to_arrow_table()
        except duckdb.IOException:  # a file compacted away since the store was scanned: scanned again
            self._open()
            return self.whole(key) if self.runs else None
        if not table.num_rows:
            return None
        origin = table.column("origin_run")[0].as_py()
        row = conform(table, schema_of("models")).to_pylist()[0]
        stored = convert.model_from_row(row)
        return (origin, stored.summary.whole) if stored.summary.whole is not None else None

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None


def lookup_cached(store: Store, signatures: Iterable[str], compiler: str, chip: str, options_key: str,
                  verdict_code: str, exclude_run: str | None = None) -> dict[str, tuple[str, OpResult]]:
    """CachedResults.lookup, once."""
    cache = CachedResults(store, compiler, chip, options_key, verdict_code, exclude_run)
    try:
        return cache.lookup(signatures)
    finally:
        cache.close()


def _as_results_table(table: pa.Table) -> pa.Table:
    schema = schema_of("results")
    return pa.Table.from_arrays([table.column(f.name).cast(f.type) for f in schema], schema=schema)
