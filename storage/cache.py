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

from opbyop.records import RETRYABLE, Fault, OpResult, Status
from opbyop_storage import convert
from opbyop_storage.catalog import create_views
from opbyop_storage.schema import schema_of

if TYPE_CHECKING:
    from opbyop_storage.dataset import Store

RUNS_SQL = """
SELECT run_id FROM runs
WHERE compiler_key = $compiler AND chip = $chip AND options_key = $options_key AND run_id <> $exclude_run
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

REUSABLE = [s.value for s in Status if s not in RETRYABLE and s.fault is not Fault.OPBYOP]

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


def lookup_cached(store: Store, signatures: Iterable[str], compiler: str, chip: str, options_key: str,
                  exclude_run: str | None = None) -> dict[str, tuple[str, OpResult]]:
    """signature -> (run id that produced it, the most recent reusable result).

    Most recent: from the latest run (by start time) of that compiler build (its key), chip and options
    that holds a result for the op other than a crash or a timeout."""
    wanted = sorted(set(signatures))
    if not wanted or not compiler:
        return {}
    con = duckdb.connect(":memory:")
    try:
        create_views(con, store.scan())
        runs = [r for (r,) in con.execute(RUNS_SQL, {"compiler": compiler, "chip": chip,
                                                      "options_key": options_key,
                                                      "exclude_run": exclude_run or ""}).fetchall()]
        latest = _latest(con, runs, wanted)
        if not latest:
            return {}
        pairs = sorted(latest.items())
        table = con.sql(ROWS_SQL, params={"runs": sorted(set(latest.values())),
                                          "pair_runs": [r for _, r in pairs],
                                          "pair_signatures": [s for s, _ in pairs]}).to_arrow_table()
    finally:
        con.close()
    out: dict[str, tuple[str, OpResult]] = {}
    rows = _as_results_table(table).to_pylist()
    for origin, row in zip(table.column("origin_run").to_pylist(), rows):
        out[row["signature"]] = (origin, convert.result_from_row(row))
    return out


def _as_results_table(table: pa.Table) -> pa.Table:
    schema = schema_of("results")
    return pa.Table.from_arrays([table.column(f.name).cast(f.type) for f in schema], schema=schema)
