"""DuckDB views over the Parquet dataset, in a connection or in a .duckdb catalog file for BI tools.

Views name the data files explicitly (the ones whose footer reads; corrupt ones are reported and
left out) rather than a glob: one corrupt file must not break every query. A catalog file is
therefore a snapshot of the file list: the nightly flow rebuilds it after each run. Each view has
every column of the current schema: one that no file has yet (a store written before it was added)
reads as null.
Tables: runs, ops, results, models (+ the Hive column `date`); helpers: stages (stage, rank),
statuses (status, fault, verdict: whether pass rates count it, no_program, description),
model_verdicts (models with ops_judged / ops_not_judged: its status columns summed by verdict),
occurrences (ops joined with their result), accuracy_traces (each op of the whole models' accuracy
traces, `backend` naming whose values: model or ttsim) and accuracy_trace (the model's alone), and the
macro message_pattern(m). The helpers are built from records.Status, so no SQL file lists statuses by hand.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import duckdb
import pyarrow as pa

from opbyop.atomic import atomic_path
from opbyop.records import LEGACY_RECLASSIFICATION, Stage, Status
from opbyop_storage.dataset import DatasetScan, Store
from opbyop_storage.location import DataFile, StoreRoot, is_object_url
from opbyop_storage.message_pattern import macro_sql
from opbyop_storage.object_views import register_objects
from opbyop_storage.schema import SCHEMA_VERSION, TABLES, TRACE_PREFIXES, schema_of

log = logging.getLogger("opbyop.storage")

CATALOG_NAME = "opbyop.duckdb"

OCCURRENCES_SQL = """
CREATE OR REPLACE VIEW occurrences AS
SELECT o.run_id, o.date, o.model, o.position, o.op_name, o.signature, o.framework_op, o.module_path,
       o.split_error, r.status, r.fault, r.depth, s.rank AS depth_rank, r.failed_stage, r.message
FROM ops o
LEFT JOIN results r ON r.run_id = o.run_id AND r.signature = o.signature
LEFT JOIN stages s ON s.stage = r.depth
"""


# The whole models' accuracy traces, one row per op compared (schema.TRACE_PREFIXES: the models table's
# `<prefix>trace` unnested), `backend` naming whose values were traced: the device model's (`model`)
# or ttsim's (`ttsim`). `accuracy_trace` is the model's alone, in the columns it always had.
def _trace_select(backend: str, prefix: str) -> str:
    return (f"SELECT m.run_id, m.date, m.model, {_sql_str(backend)} AS backend, t.position, t.op_name, t.ttnn_op, "
            f"t.pcc, t.max_abs_error, t.added_loss, t.below_threshold, t.position = m.{prefix}trace_first_below "
            f"AS first_below, t.location, m.{prefix}trace_threshold AS pcc_threshold "
            f"FROM models m, unnest(m.{prefix}trace) AS u(t) WHERE m.{prefix}trace IS NOT NULL")


EMPTY_TRACE_SQL = """SELECT NULL::VARCHAR AS run_id, NULL::DATE AS date, NULL::VARCHAR AS model,
       NULL::VARCHAR AS backend, NULL::BIGINT AS position, NULL::VARCHAR AS op_name, NULL::VARCHAR AS ttnn_op,
       NULL::DOUBLE AS pcc, NULL::DOUBLE AS max_abs_error, NULL::DOUBLE AS added_loss,
       NULL::BOOLEAN AS below_threshold, NULL::BOOLEAN AS first_below, NULL::VARCHAR AS location,
       NULL::DOUBLE AS pcc_threshold
WHERE false"""


def create_trace_views(con: duckdb.DuckDBPyConnection) -> None:
    """`accuracy_traces` (every backend's, over an existing `models` table or view) and `accuracy_trace`
    (the model's). A trace whose columns the files predate has no rows (only older files: none at all)."""
    columns = {row[0] for row in con.execute("DESCRIBE models").fetchall()}
    selects = [_trace_select(backend, prefix) for backend, prefix in TRACE_PREFIXES.items()
               if f"{prefix}trace" in columns]
    con.execute("CREATE OR REPLACE VIEW accuracy_traces AS " + ("\nUNION ALL\n".join(selects) or EMPTY_TRACE_SQL))
    con.execute("CREATE OR REPLACE VIEW accuracy_trace AS SELECT * EXCLUDE (backend) FROM accuracy_traces "
                "WHERE backend = 'model'")


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _empty_with_date(table: str) -> pa.Table:
    """A typed empty table, Hive `date` column included, for a table that has no files yet."""
    schema = schema_of(table).append(pa.field("date", pa.date32()))
    return schema.empty_table()


def _conformed(con: duckdb.DuckDBPyConnection, table: str, columns: str, source: str) -> str:
    """SELECT `columns` FROM `source`, with every column of the current schema that no file has (a
    store written before it was added) as a typed null: queries of today's columns run on any store."""
    select = f"SELECT {columns} FROM {source}"
    present = {row[0] for row in con.execute(f"DESCRIBE {select}").fetchall()}
    missing = [f for f in schema_of(table) if f.name not in present]
    if not missing:
        return select
    types = con.from_arrow(pa.schema(missing).empty_table()).types  # DuckDB's names of the Arrow types
    nulls = ", ".join(f'CAST(NULL AS {kind}) AS "{f.name}"' for f, kind in zip(missing, types))
    return f"SELECT *, {nulls} FROM ({select})"


def _fault_sql(status_sql: str) -> str:
    cases = " ".join(f"WHEN {_sql_str(s.value)} THEN {_sql_str(s.fault.value)}" for s in Status)
    return f"CASE {status_sql} {cases} END"


def legacy_status_sql() -> str:
    """records.legacy_status over a row's `status` and `message`, in SQL."""
    cases = " ".join(f"WHEN status = {_sql_str(written.value)} AND starts_with(message, {_sql_str(opening)}) "
                     f"THEN {_sql_str(today.value)}" for written, opening, today in LEGACY_RECLASSIFICATION)
    return f"CASE {cases} ELSE status END"


def _columns(table: str, scan: DatasetScan) -> str:
    """`*`, except that results of schema version 1 get today's status and fault (records.legacy_status)."""
    versions = scan.versions.get(table, set())
    if table != "results" or not versions & {1, None}:  # None: a file from before versions were written
        return "*"
    legacy = legacy_status_sql()
    return f"* REPLACE (({legacy}) AS status, coalesce(fault, {_fault_sql('(' + legacy + ')')}) AS fault)"


def _status_sum(statuses: list[Status], columns: set[str]) -> str:
    """The models' status count columns of `statuses` added up; a column older files lack counts 0."""
    terms = [f'coalesce("status_{s.value}", 0)' for s in statuses if f"status_{s.value}" in columns]
    return " + ".join(terms) or "0"


def create_status_views(con: duckdb.DuckDBPyConnection) -> None:
    """`statuses` and `model_verdicts`, from the Status enum (over an existing `models` table or view)."""
    statuses = ", ".join(f"({_sql_str(s.value)}, {_sql_str(s.fault.value)}, {str(s.is_verdict).lower()}, "
                         f"{str(s.facts.no_program).lower()}, {_sql_str(s.description)})" for s in Status)
    con.execute(f"CREATE OR REPLACE VIEW statuses AS SELECT * FROM (VALUES {statuses}) "
                "AS t(status, fault, verdict, no_program, description)")
    columns = {row[0] for row in con.execute("DESCRIBE models").fetchall()}
    judged = _status_sum([s for s in Status if s.is_verdict], columns)
    not_judged = _status_sum([s for s in Status if s.is_failure and not s.is_verdict], columns)
    con.execute(f"CREATE OR REPLACE VIEW model_verdicts AS SELECT *, {judged} AS ops_judged, "
                f"{not_judged} AS ops_not_judged FROM models")


def create_views(con: duckdb.DuckDBPyConnection, scan: DatasetScan, materialize: bool = False) -> None:
    """One view per table over its readable files, plus the helper views and macros. Files on an
    object store are read through pyarrow datasets registered in the connection (DuckDB's own S3
    reader is an extension it would download); `materialize` copies their rows into tables instead,
    for a catalog file that must work in another process."""
    for table in TABLES:
        files = scan.files.get(table, [])
        con.execute(f"DROP VIEW IF EXISTS {table}")
        con.execute(f"DROP TABLE IF EXISTS {table}")
        if files and scan.filesystem is not None:
            source = register_objects(con, table, files, scan.filesystem)
            kind = "TABLE" if materialize else "VIEW"
            con.execute(f"CREATE {kind} {table} AS {_conformed(con, table, _columns(table, scan), source)}")
        elif files:
            listing = ", ".join(_sql_str(str(Path(f).resolve())) for f in files)
            # union_by_name reads every file's footer on every query (60 ms per table at a year of
            # nights): only worth it when the files hold different schema versions
            union = "true" if scan.versions.get(table, set()) != {SCHEMA_VERSION} else "false"
            source = f"read_parquet([{listing}], hive_partitioning = true, union_by_name = {union})"
            con.execute(f"CREATE VIEW {table} AS {_conformed(con, table, _columns(table, scan), source)}")
        else:  # read_parquet of no files is an error; an empty typed table keeps queries valid
            empty = _empty_with_date(table)  # noqa: F841 (read by DuckDB's replacement scan)
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM empty")
    con.execute("SET parquet_metadata_cache = true")  # footers read once per connection
    stages = ", ".join(f"({_sql_str(s.value)}, {s.rank})" for s in Stage)
    con.execute(f"CREATE OR REPLACE VIEW stages AS SELECT * FROM (VALUES {stages}) AS t(stage, rank)")
    create_status_views(con)
    con.execute(OCCURRENCES_SQL)
    create_trace_views(con)
    con.execute(macro_sql())


def build_catalog(root: StoreRoot, out: Path | str | None = None) -> DataFile:
    """Write a .duckdb file with the views (default <root>/opbyop.duckdb), atomically replaced.

    On an object store the catalog holds the rows themselves (a snapshot: no credentials or S3
    extension needed to open it) and is uploaded as <store>/opbyop.duckdb unless `out` is given.
    Open it with the DuckDB CLI (`duckdb -readonly <file>`) or Superset via duckdb-engine
    (duckdb:///<file>?access_mode=read_only).
    """
    store = Store(root)
    scan = store.scan()
    for s in scan.skipped:
        log.warning("catalog leaves out a corrupt file: %s", s)
    on_objects = is_object_url(store.root)
    if out is None and on_objects:  # built here, then uploaded beside the data
        with tempfile.TemporaryDirectory(prefix="opbyop-catalog-") as tmp_dir:
            local = _write_catalog(Path(tmp_dir) / CATALOG_NAME, scan, materialize=True)
            return store.files.upload(local, CATALOG_NAME)
    target = Path(out) if out is not None else Path(store.root) / CATALOG_NAME
    return _write_catalog(target, scan, materialize=on_objects)


def _write_catalog(target: Path, scan: DatasetScan, materialize: bool) -> Path:
    with atomic_path(target) as tmp:
        con = duckdb.connect(str(tmp))
        try:
            create_views(con, scan, materialize)
            con.execute("CHECKPOINT")
        finally:
            con.close()
            Path(f"{tmp}.wal").unlink(missing_ok=True)
    return target
