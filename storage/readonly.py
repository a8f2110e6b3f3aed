"""Read-only SQL over the store: anyone's query, no way to write, read other files or load code.

Two locks, both DuckDB's own: the statement types are checked with DuckDB's parser (only queries
pass), and the connection is an in-memory one whose views are created first, after which external
access is switched off (except the store's directory, which the views read), and the configuration
is locked so that no statement can switch it back on.

And two limits: DuckDB's memory limit (set before the lock), and a time limit. A query runs in a
thread of its own while the calling thread waits, so that Ctrl-C (which Python only delivers to a
thread running Python code) and the deadline both reach it: either interrupts the connection.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb

from opbyop.errors import StoreError
from opbyop_storage.catalog import create_views
from opbyop_storage.dataset import DatasetScan, Store
from opbyop_storage.files import SkippedFile
from opbyop_storage.location import StoreRoot, is_object_url

ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
RESCANS = 5  # a query whose files a writer replaced meanwhile runs again over a new scan, so many times


# A file the views name is gone: DuckDB's own reader says IOException; an object read through a
# registered pyarrow dataset, pyarrow's error wrapped as InvalidInputException.
GONE_ERRORS = (duckdb.IOException, duckdb.InvalidInputException)


def _vanished(e: duckdb.Error) -> bool:
    """The error is about a file the views name that is gone (a writer's compaction replaced it)."""
    text = str(e)
    return any(m in text for m in ("No files found that match the pattern", "No such file", "Path does not exist"))
DEFAULT_TIMEOUT_S = 300.0  # for `opbyop sql` and `opbyop query`; the library's own queries have none


def default_memory_limit() -> str:
    """Half the machine's memory: a runaway query fails instead of starving everything else."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "4GB"
    return f"{max(total // 2 >> 20, 256)}MB"


class QueryInterrupted(StoreError):
    """The user interrupted a query (Ctrl-C)."""


class QueryTimeout(StoreError):
    """A query ran past its time limit."""


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

    def __init__(self, root: StoreRoot | None = None, scan: DatasetScan | None = None,
                 memory_limit: str | None = None, timeout: float | None = None):
        self.timeout = timeout  # seconds per query unless a query says otherwise; None: no limit
        store = Store(root)
        self.root = store.root
        self.scan = scan or store.scan()
        self.memory_limit = memory_limit or default_memory_limit()
        for attempt in range(RESCANS + 1):
            try:
                self.con = self._connect(self.scan)
                break
            except GONE_ERRORS as e:  # the views read each file's schema when they are made
                if attempt == RESCANS or not _vanished(e):
                    raise StoreError(f"the store's files cannot be read: {e}", "run the command again") from None
                self.scan = store.scan()

    def _connect(self, scan: DatasetScan) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect(":memory:")
        try:
            create_views(con, scan)
        except duckdb.Error:
            con.close()
            raise
        try:
            con.execute("SET memory_limit = $limit", {"limit": self.memory_limit})
        except duckdb.Error as e:
            con.close()
            raise StoreError(f"memory limit {self.memory_limit!r} is not a size DuckDB reads ({e})",
                             "give a size like 2GB or 512MB") from None
        if not is_object_url(self.root):  # an object store's files are read by pyarrow, not DuckDB
            allowed = str(self.root.resolve()).rstrip("/") + "/"
            con.execute(f"SET allowed_directories = ['{allowed.replace(chr(39), chr(39) * 2)}']")
        con.execute("SET enable_external_access = false")
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("SET autoload_known_extensions = false")
        con.execute("SET lock_configuration = true")
        return con

    def _rescan(self) -> None:
        """Views over the files as they are now: a writer replaced some since the last scan."""
        for attempt in range(RESCANS + 1):
            scan = Store(self.root).scan()
            try:
                con = self._connect(scan)
                break
            except GONE_ERRORS as e:
                if attempt == RESCANS or not _vanished(e):
                    raise
        self.con.close()
        self.con, self.scan = con, scan

    @property
    def skipped(self) -> list[SkippedFile]:
        return self.scan.skipped

    def query(self, sql: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> QueryResult:
        """Run a read-only query; `timeout` seconds (default: the connection's) and Ctrl-C interrupt it."""
        check_read_only(sql)
        timeout = self.timeout if timeout is None else timeout

        def execute() -> tuple[list[str], list[tuple[Any, ...]]]:
            cursor = self.con.execute(sql, params or {})
            return [d[0] for d in cursor.description or []], cursor.fetchall()

        try:
            for attempt in range(RESCANS + 1):
                try:
                    columns, rows = self._interruptible(execute, timeout)
                    break
                except GONE_ERRORS as e:
                    if attempt == RESCANS or not _vanished(e):
                        raise
                    self._rescan()  # a file the views name was replaced by its run's writer
        except duckdb.PermissionException as e:
            raise StoreError(f"refused by DuckDB: {e}",
                             "query the views (runs, ops, results, models, occurrences); "
                             "files and extensions are out of reach") from None
        except duckdb.OutOfMemoryException as e:
            first = str(e).strip().splitlines()[0]
            raise StoreError(f"the query needs more memory than its limit of {self.memory_limit} ({first})",
                             "narrow it (WHERE, LIMIT, fewer joins), or raise the limit (--memory-limit)") from None
        except duckdb.Error as e:
            raise StoreError(f"the query failed: {e}", "check table and column names with DESCRIBE <view>") from None
        return QueryResult(columns, rows, list(self.scan.skipped))

    def _interruptible(self, execute: Any, timeout: float | None) -> Any:
        """`execute()` in a thread of its own; this thread waits, and interrupts the connection on
        Ctrl-C (KeyboardInterrupt) or at the deadline."""
        outcome: dict[str, Any] = {}
        done = threading.Event()  # not thread.is_alive(): a join interrupted by Ctrl-C may report a live thread dead

        def target() -> None:
            try:
                outcome["value"] = execute()
            except BaseException as e:  # re-raised in the calling thread
                outcome["error"] = e
            finally:
                done.set()

        thread = threading.Thread(target=target, name="duckdb-query", daemon=True)
        deadline = time.monotonic() + timeout if timeout is not None and math.isfinite(timeout) else None
        try:
            thread.start()
            while not done.is_set():
                wait = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
                if wait <= 0:
                    self._stop(done)
                    raise QueryTimeout(f"the query ran longer than its limit of {timeout:g} s and was stopped",
                                       "narrow it (WHERE, LIMIT, fewer joins), or allow more time (--timeout)")
                done.wait(wait)
        except KeyboardInterrupt:
            self._stop(done)
            raise QueryInterrupted("the query was interrupted (Ctrl-C)", "nothing was changed; run it again "
                                   "when you want its answer") from None
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def _stop(self, done: threading.Event) -> None:
        """Interrupt until the query's thread is done (an interrupt that lands before the query
        starts is lost, so it is repeated)."""
        while not done.is_set():
            self.con.interrupt()
            try:
                done.wait(0.1)
            except KeyboardInterrupt:  # a second Ctrl-C: already stopping
                continue

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> StoreConnection:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def connect(root: Path | str | None = None, memory_limit: str | None = None) -> StoreConnection:
    return StoreConnection(root, memory_limit=memory_limit)


def run_sql(sql: str, root: Path | str | None = None, params: dict[str, Any] | None = None,
            timeout: float | None = None, memory_limit: str | None = None) -> QueryResult:
    """One read-only query over the store at `root`, within `timeout` seconds and `memory_limit`."""
    with StoreConnection(root, memory_limit=memory_limit) as con:
        return con.query(sql, params, timeout)
