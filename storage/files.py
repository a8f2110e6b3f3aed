"""Where the dataset's files live, and how they are written without ever exposing a partial one.

Layout (Hive-style, readable by pyarrow, DuckDB and Spark alike):
    <root>/<table>/date=YYYY-MM-DD/run_id=<id>/part-<seq>-<uuid>.parquet
`date` is the run's start date (UTC). Anything whose name starts with '.' or '_' is work in progress
or debris from a crash and is never read: files are written under a hidden temporary name in their
final directory and renamed into place (os.replace is atomic within a file system), and directories
are built under a hidden name and renamed into place.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Iterable, Union

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from opbyop.atomic import atomic_path
from opbyop.errors import StoreError
from opbyop.workspace import Workspace
from opbyop_storage.schema import TABLES, VERSION_KEY, conform, schema_of

log = logging.getLogger("opbyop.storage")

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
PART_GLOB = "part-*.parquet"
DataFile = Union[Path, str]  # a local path, or an object's "bucket/key"
_STAGING = ".staging-"
_TRASH = ".trash-"


def check_run_id(run_id: str) -> str:
    if not RUN_ID.match(run_id):
        raise StoreError(f"run id {run_id!r} cannot name a partition directory",
                         "use 1-128 letters, digits, '.', '_' or '-' starting with a letter or digit "
                         "(e.g. nightly-20261122-0200)")
    return run_id


def default_root() -> Path | str:
    """OPBYOP_STORE, else the store of the workspace (OPBYOP_HOME, default ./.opbyop)."""
    return Workspace.default().store


def table_dir(root: Path, table: str) -> Path:
    if table not in TABLES:
        raise StoreError(f"unknown table {table!r}", f"use one of {', '.join(TABLES)}")
    return Path(root) / table


def run_dir(root: Path, table: str, day: date, run_id: str) -> Path:
    return table_dir(root, table) / f"date={day.isoformat()}" / f"run_id={check_run_id(run_id)}"


def visible(name: str) -> bool:
    return not name.startswith((".", "_"))


def run_dirs(root: Path, table: str, run_id: str | None = None) -> list[Path]:
    """The visible run directories of `table` (of one run id: normally one, in its start date)."""
    base = table_dir(root, table)
    if not base.is_dir():
        return []
    pattern = f"run_id={run_id}" if run_id is not None else "run_id=*"
    return sorted(d for d in base.glob(f"date=*/{pattern}") if d.is_dir())


def part_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob(PART_GLOB) if visible(p.name))


def data_files(root: Path, table: str, run_id: str | None = None) -> list[Path]:
    return [f for d in run_dirs(root, table, run_id) for f in part_files(d)]


def partition_date(directory: Path) -> date:
    return date.fromisoformat(directory.parent.name.removeprefix("date="))


@dataclass(frozen=True)
class Vanished:
    """A data file listed a moment ago and gone now: a writer replaced it (a batch rewritten, a run's
    parts compacted into one file). Not an error: list the files again."""

    path: Path


@dataclass(frozen=True)
class SkippedFile:
    """A data file that could not be read: reported with its path, never silently dropped."""

    path: Path
    error: str

    def __str__(self) -> str:
        return f"{self.path}: {self.error}"


READ_BATCH_ROWS = 8192  # a part read with a filter is held a batch of this many rows at a time


def columns_schema(table: str, columns: list[str] | None = None) -> pa.Schema:
    """The table's current schema, of `columns` only when given (what a read of them returns)."""
    schema = schema_of(table)
    return schema if columns is None else pa.schema([schema.field(c) for c in columns])


def part_rows(parquet: pq.ParquetFile, table: str, where: pc.Expression | None = None,
              columns: list[str] | None = None) -> pa.Table:
    """A part's rows in the table's current schema (of `columns` only, when given). With `where`
    only the rows it keeps: the part is read a batch at a time (every column, `where` may name any),
    so a run's compacted file is never whole in memory to give a few of its rows."""
    schema, wanted = schema_of(table), columns_schema(table, columns)
    if where is None:
        present = None if columns is None else [c for c in columns if c in parquet.schema_arrow.names]
        return conform(parquet.read(columns=present), wanted)  # an older file lacks newer columns: nulls
    kept = [conform(conform(pa.Table.from_batches([batch]), schema).filter(where), wanted)
            for batch in parquet.iter_batches(batch_size=READ_BATCH_ROWS)]
    return pa.concat_tables(kept) if kept else wanted.empty_table()


def read_part(path: Path, table: str, where: pc.Expression | None = None,
              columns: list[str] | None = None) -> pa.Table | SkippedFile | Vanished:
    """One part file's rows (part_rows), or why it could not be read.

    ParquetFile reads the file alone: pq.read_table would also add the Hive path's columns.
    """
    try:
        return part_rows(pq.ParquetFile(path), table, where, columns)
    except FileNotFoundError:
        return Vanished(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        if not path.exists():  # pyarrow's own error for a file removed while it was opened
            return Vanished(path)
        log.warning("skipping unreadable Parquet file %s: %s", path, e)
        return SkippedFile(path, f"{type(e).__name__}: {str(e).strip()}")


_footers: dict[tuple[str, int, int], int | None] = {}  # (path, size, mtime) -> schema version


def read_footer(path: Path) -> int | None | SkippedFile | Vanished:
    """The file's schema version (None if untagged) if its footer parses, else why not.
    Cached by path, size and mtime: a scan of a long history reads each footer once per process."""
    try:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        if key not in _footers:
            version = (pq.read_metadata(path).metadata or {}).get(VERSION_KEY)
            _footers[key] = int(version) if version is not None else None
        return _footers[key]
    except FileNotFoundError:
        return Vanished(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        if not path.exists():
            return Vanished(path)
        log.warning("skipping unreadable Parquet file %s: %s", path, e)
        return SkippedFile(path, f"{type(e).__name__}: {str(e).strip()}")


def _hidden_sibling(path: Path, kind: str) -> Path:
    return path.with_name(f".{path.name}{kind}{os.getpid()}-{uuid.uuid4().hex[:8]}")


DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def mount_point(path: Path) -> Path:
    """The file system `path` is on (its mount point)."""
    path = next((p for p in (Path(path), *Path(path).parents) if p.exists()), Path("/")).resolve()
    while not os.path.ismount(path) and path.parent != path:
        path = path.parent
    return path


@dataclass(frozen=True)
class Pieces:
    """A table written piece by piece (each piece its own row groups): only the piece being written is
    in memory, however big the table."""

    schema: pa.Schema
    tables: Iterable[pa.Table]


def write_parquet(data: pa.Table | Pieces, sink: object) -> None:
    """`data` as Parquet into `sink` (an open binary file or stream)."""
    if isinstance(data, pa.Table):
        pq.write_table(data, sink, compression="zstd")
        return
    with pq.ParquetWriter(sink, data.schema, compression="zstd") as writer:
        for piece in data.tables:
            writer.write_table(piece)
            del piece  # not held while the next one is made


def write_parquet_atomic(table: pa.Table | Pieces, path: Path) -> Path:
    """Write `table` to `path`: all of it or nothing is ever visible under that name. A full disk
    is a StoreError naming the file system (the partial file is removed)."""
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            write_parquet(table, f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as e:
        if _disk_full(e):
            mount = mount_point(path)
            raise StoreError(f"the disk is full: cannot write {path.name} to the store on {mount}",
                             f"free space on {mount}, then resume: what was stored is kept") from None
        raise
    return path


def _disk_full(e: BaseException) -> bool:
    """ENOSPC and friends, whether as OSError or wrapped by pyarrow (ArrowIOError's message)."""
    if isinstance(e, OSError) and e.errno in DISK_FULL:
        return True
    return isinstance(e, (OSError, pa.ArrowException)) and any(
        os.strerror(code) in str(e) for code in DISK_FULL)


def new_part_name(directory: Path) -> str:
    """part-<seq>-<uuid>.parquet, seq one above the directory's highest (keeps batch order visible)."""
    seqs = [int(p.name.split("-")[1]) for p in directory.glob(PART_GLOB) if p.name.split("-")[1].isdigit()]
    return f"part-{max(seqs, default=-1) + 1:06d}-{uuid.uuid4().hex[:8]}.parquet"


def staging_dir(live: Path) -> Path:
    """A hidden directory next to `live` to build its new content in."""
    d = _hidden_sibling(live, _STAGING)
    d.mkdir(parents=True)
    return d


def swap_in(staging: Path, live: Path) -> None:
    """Make the fully written `staging` directory the `live` one.

    Two renames: for the instant between them the run is absent (never half-present or doubled);
    recover() finishes the swap if the process dies in between.
    """
    trash = None
    if live.exists():
        trash = _hidden_sibling(live, _TRASH)
        os.rename(live, trash)
    os.rename(staging, live)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


def remove_dir(live: Path) -> None:
    """Remove a run directory: hidden first (one rename), then deleted."""
    if live.exists():
        trash = _hidden_sibling(live, _TRASH)
        os.rename(live, trash)
        shutil.rmtree(trash, ignore_errors=True)


def mid_swap(root: Path, table: str | None = None, run_id: str | None = None) -> bool:
    """True while a writer is between the two renames of swap_in: a complete staging directory and no
    live one (the run is absent for that instant). Also true for a writer that died there, until
    recover() runs: callers wait a bounded time."""
    tables = [table] if table is not None else list(TABLES)
    pattern = f".run_id={run_id if run_id is not None else '*'}{_STAGING}*"
    for t in tables:
        base = Path(root) / t
        if not base.is_dir():
            continue
        for staging in base.glob(f"date=*/{pattern}"):
            live = staging.with_name(staging.name[1:].split(_STAGING, 1)[0])
            if not live.exists():
                return True
    return False


def recover(partition: Path, run_id: str) -> None:
    """Clean up after a crash of a writer of `run_id` in one date partition.

    A staging directory whose live directory is missing was complete (the live one is only moved
    away after staging is fully written): put it in place. Other debris of this run is deleted.
    """
    live = partition / f"run_id={run_id}"
    for prefix in (f".{live.name}{_STAGING}", f".{live.name}{_TRASH}"):
        for entry in sorted(partition.glob(f"{prefix}*")):
            if prefix.endswith(_STAGING) and not live.exists():
                os.rename(entry, live)
                log.warning("finished an interrupted swap: %s -> %s", entry, live)
            else:
                shutil.rmtree(entry, ignore_errors=True)
    for entry in live.glob(".*.tmp-*"):  # temp files of interrupted writes
        entry.unlink(missing_ok=True)
