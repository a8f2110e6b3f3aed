"""Results to reuse: an op analysed before with the same compiler version, chip and options.

Crashed and timed-out attempts are never reused (they say more about the machine at the time than
about the op). The run id returned is where the result was first produced (a reused result
points at its origin, not at the run that copied it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import duckdb
import pyarrow as pa

from opbyop.records import OpResult
from storage import convert
from storage.catalog import create_views
from storage.schema import schema_of

if TYPE_CHECKING:
    from storage.dataset import Store

LOOKUP_SQL = """
WITH wanted AS (SELECT unnest($signatures) AS signature),
good_runs AS (
    SELECT run_id, started_at FROM runs
    WHERE plugin_version = $plugin_version AND chip = $chip AND options_key = $options_key
      AND run_id <> $exclude_run
)
SELECT r.* EXCLUDE (date), coalesce(r.reused_from, r.run_id) AS origin_run
FROM results r
JOIN good_runs g ON g.run_id = r.run_id
SEMI JOIN wanted w ON w.signature = r.signature
WHERE r.status NOT IN ('crashed', 'timeout')
QUALIFY row_number() OVER (PARTITION BY r.signature ORDER BY r.ended_at DESC, g.started_at DESC) = 1
"""


def lookup_cached(store: Store, signatures: Iterable[str], plugin_version: str, chip: str, options_key: str,
                  exclude_run: str | None = None) -> dict[str, tuple[str, OpResult]]:
    """signature -> (run id that produced it, the most recent reusable result)."""
    wanted = sorted(set(signatures))
    if not wanted:
        return {}
    con = duckdb.connect(":memory:")
    try:
        create_views(con, store.scan())
        table = con.sql(LOOKUP_SQL, params={
            "signatures": wanted, "plugin_version": plugin_version, "chip": chip,
            "options_key": options_key, "exclude_run": exclude_run or "",
        }).to_arrow_table()
    finally:
        con.close()
    origins = table.column("origin_run").to_pylist()
    rows = _as_results_table(table).to_pylist()
    return {row["signature"]: (origin, convert.result_from_row(row)) for origin, row in zip(origins, rows)}


def _as_results_table(table: pa.Table) -> pa.Table:
    schema = schema_of("results")
    return pa.Table.from_arrays([table.column(f.name).cast(f.type) for f in schema], schema=schema)
