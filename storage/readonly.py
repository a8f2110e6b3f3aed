"""Read-only SQL over the store: anyone's query, no way to write, read other files or load code.

Two locks, both DuckDB's own: the statement types are checked with DuckDB's parser (only queries
pass), and the connection is an in-memory one whose views are created first, after which external
access is switched off (except the store's directory, which the views read), and the configuration
is locked so that no statement can switch it back on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb

from opbyop.errors import StoreError
from storage.catalog import create_views
from storage.dataset import DatasetScan, Store
from storage.files import SkippedFile

ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


def check_read_only(sql: str) -> None:
    """Raise StoreError unless every statement in `sql` only reads (SELECT, WITH, FROM, DESCRIBE,
    SHOW, SUMMARIZE, EXPLAIN)."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise StoreError(f"the SQL does not parse: {e}", "fix the syntax at the position shown") from None
    if not statements:
        raise StoreError("no SQL statement given", 'pass a query, e.g. "SELECT * FROM runs"')
    for st in statements:
        if st.type not in ALLOWED:
            kind = st.type.name.replace("_", " ")
            first = st.query.strip().split(None, 1)[0].upper() if st.query.strip() else kind
            raise StoreError(
                f"refused: {first} ({kind} statement) is not allowed: this SQL interface is read-only "
                "(no writes, no file or extension access, no settings)",
                "use a query (SELECT / WITH / FROM / DESCRIBE / SHOW / SUMMARIZE / EXPLAIN) over the views "
                "runs, ops, results, models, occurrences, stages, statuses")


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    skipped: list[SkippedFile] = field(default_factory=list)  # corrupt files left out of the views

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]

    def column(self, name: str) -> list[Any]:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]


class StoreConnection:
    """An in-memory DuckDB connection with the store's views, locked down to reading."""

    def __init__(self, root: Path | str | None = None, scan: DatasetScan | None = None):
        store = Store(root)
        self.root = store.root
        self.scan = scan or store.scan()
        self.con = duckdb.connect(":memory:")
        create_views(self.con, self.scan)
        allowed = str(self.root.resolve()).rstrip("/") + "/"
        self.con.execute(f"SET allowed_directories = ['{allowed.replace(chr(39), chr(39) * 2)}']")
        self.con.execute("SET enable_external_access = false")
        self.con.execute("SET autoinstall_known_extensions = false")
        self.con.execute("SET autoload_known_extensions = false")
        self.con.execute("SET lock_configuration = true")

    @property
    def skipped(self) -> list[SkippedFile]:
        return self.scan.skipped

    def query(self, sql: str, params: dict[str, Any] | None = None) -> QueryResult:
        check_read_only(sql)
        try:
            cursor = self.con.execute(sql, params or {})
        except duckdb.PermissionException as e:
            raise StoreError(f"refused by DuckDB: {e}",
                             "query the views (runs, ops, results, models, occurrences); "
                             "files and extensions are out of reach") from None
        except duckdb.Error as e:
            raise StoreError(f"the query failed: {e}", "check table and column names with DESCRIBE <view>") from None
        columns = [d[0] for d in cursor.description or []]
        return QueryResult(columns, cursor.fetchall(), list(self.scan.skipped))

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> StoreConnection:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def connect(root: Path | str | None = None) -> StoreConnection:
    return StoreConnection(root)


def run_sql(sql: str, root: Path | str | None = None, params: dict[str, Any] | None = None) -> QueryResult:
    """One read-only query over the store at `root`."""
    with StoreConnection(root) as con:
        return con.query(sql, params)
