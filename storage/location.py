"""Where the store's files are: a local directory, or a prefix on S3-compatible object storage.

Every reader and writer of the dataset goes through a StoreFiles: the files of a table (of a run),
their footers and rows, and the few ways a writer changes a run's files. Two kinds of storage, one
contract: a reader never sees half a batch or half a compaction, and a killed writer leaves nothing
half-visible.
- LocalFiles: a directory; a file is written under a hidden name and renamed into place, a run's
  compacted directory is built hidden and swapped in (storage/files.py).
- ObjectFiles (storage/object_files.py): `s3://bucket/prefix`; objects cannot be renamed, so each
  file is written once under a unique name and a run's small manifest object, replaced whole by one
  PUT, says which of them are the run's (a file no manifest names is never read).
"""

from __future__ import annotations

import shutil
from datetime import date
from pathlib import Path
from typing import Any, Protocol, Union

import pyarrow as pa
import pyarrow.compute as pc
from filelock import FileLock

from opbyop_storage import files
from opbyop_storage.files import DataFile, Pieces, SkippedFile, Vanished
from opbyop_storage.object_files import ObjectFiles
from opbyop_storage.schema import TABLES

OBJECT_SCHEMES = ("s3://",)
StoreRoot = Union[Path, str]  # a directory, or an object-store URL such as s3://bucket/prefix


def is_object_url(root: StoreRoot | None) -> bool:
    return isinstance(root, str) and root.startswith(OBJECT_SCHEMES)


def parse_root(root: StoreRoot) -> StoreRoot:
    """An object-store URL stays a string; anything else is a local directory."""
    text = str(root)
    if text.startswith(OBJECT_SCHEMES):
        return text.rstrip("/")
    if text.startswith("s3:/") and not text.startswith("s3://"):  # a URL that went through Path()
        return "s3://" + text.removeprefix("s3:/").rstrip("/")
    return Path(root)


class StoreFiles(Protocol):
    """The dataset's files, however they are stored. A DataFile is what data_files returns."""

    root: StoreRoot
    filesystem: Any  # pyarrow's FileSystem for DataFiles that are not local paths, else None

    def data_files(self, table: str, run_id: str | None = None) -> list[DataFile]: ...

    def listing(self) -> dict[str, list[DataFile]]: ...  # every table's files, from one look at the store

    def read_footer(self, path: DataFile) -> int | None | SkippedFile | Vanished: ...

    def read_footers(self, paths: list[DataFile]) -> list[int | None | SkippedFile | Vanished]: ...

    def read_part(self, path: DataFile, table: str, where: pc.Expression | None = None,
                  columns: list[str] | None = None) -> pa.Table | SkippedFile | Vanished: ...

    def mid_swap(self, table: str | None = None, run_id: str | None = None) -> bool: ...

    def run_day(self, run_id: str, table: str | None = None) -> date | None: ...

    def lock(self, run_id: str) -> FileLock: ...

    def recover(self, day: date, run_id: str) -> None: ...

    def part_files(self, table: str, day: date, run_id: str) -> list[DataFile]: ...

    def add_part(self, table: str, day: date, run_id: str, data: pa.Table) -> DataFile: ...

    def put_part(self, table: str, day: date, run_id: str, name: str, data: pa.Table) -> DataFile: ...

    def rewrite_part(self, path: DataFile, data: pa.Table | None) -> DataFile | None: ...

    def replace_run(self, table: str, day: date, run_id: str, name: str, data: pa.Table | Pieces) -> None: ...

    def remove_run(self, run_id: str, keep_day: date | None = None) -> None: ...


class LocalFiles:
    """A directory: files renamed into place (storage/files.py)."""

    filesystem = None

    def __init__(self, root: Path):
        self.root = Path(root)

    def data_files(self, table: str, run_id: str | None = None) -> list[DataFile]:
        return list(files.data_files(self.root, table, run_id))

    def listing(self) -> dict[str, list[DataFile]]:
        return {t: self.data_files(t) for t in TABLES}

    def read_footer(self, path: DataFile) -> int | None | SkippedFile | Vanished:
        return files.read_footer(Path(path))

    def read_footers(self, paths: list[DataFile]) -> list[int | None | SkippedFile | Vanished]:
        return [self.read_footer(p) for p in paths]

    def read_part(self, path: DataFile, table: str, where: pc.Expression | None = None,
                  columns: list[str] | None = None) -> pa.Table | SkippedFile | Vanished:
        return files.read_part(Path(path), table, where, columns)

    def mid_swap(self, table: str | None = None, run_id: str | None = None) -> bool:
        return files.mid_swap(self.root, table, run_id)

    def run_day(self, run_id: str, table: str | None = None) -> date | None:
        for t in [table] if table is not None else list(TABLES):
            dirs = files.run_dirs(self.root, t, files.check_run_id(run_id))
            if dirs:
                return files.partition_date(dirs[0])
        return None

    def lock(self, run_id: str) -> FileLock:
        path = self.root / ".locks" / f"{files.check_run_id(run_id)}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(path)

    def recover(self, day: date, run_id: str) -> None:
        for table in TABLES:
            files.recover(files.run_dir(self.root, table, day, run_id).parent, run_id)

    def part_files(self, table: str, day: date, run_id: str) -> list[DataFile]:
        return list(files.part_files(files.run_dir(self.root, table, day, run_id)))

    def add_part(self, table: str, day: date, run_id: str, data: pa.Table) -> DataFile:
        directory = files.run_dir(self.root, table, day, run_id)
        return files.write_parquet_atomic(data, directory / files.new_part_name(directory))

    def put_part(self, table: str, day: date, run_id: str, name: str, data: pa.Table) -> DataFile:
        return files.write_parquet_atomic(data, files.run_dir(self.root, table, day, run_id) / name)

    def rewrite_part(self, path: DataFile, data: pa.Table | None) -> DataFile | None:
        """The part now holds `data` (returned: where it is now); None (or no rows) removes it."""
        if data is None or not data.num_rows:
            Path(path).unlink(missing_ok=True)
            return None
        return files.write_parquet_atomic(data, Path(path))

    def replace_run(self, table: str, day: date, run_id: str, name: str, data: pa.Table | Pieces) -> None:
        """The run's directory of `table` now holds exactly `data`, in one file; built hidden, then
        renamed into place."""
        live = files.run_dir(self.root, table, day, run_id)
        staging = files.staging_dir(live)
        try:
            files.write_parquet_atomic(data, staging / name)
        except BaseException:  # pieces are read while written: a failure leaves no staging behind
            shutil.rmtree(staging, ignore_errors=True)
            raise
        files.swap_in(staging, live)

    def remove_run(self, run_id: str, keep_day: date | None = None) -> None:
        for table in ("runs", "models", "ops", "results", "shrinks"):  # the run row first: it vanishes as a whole
            for d in files.run_dirs(self.root, table, run_id):
                if keep_day is None or files.partition_date(d) != keep_day:
                    files.remove_dir(d)


def store_files(root: StoreRoot) -> StoreFiles:
    """The StoreFiles for a directory or an object-store URL."""
    parsed = parse_root(root)
    if is_object_url(parsed):
        return ObjectFiles(parsed)
    return LocalFiles(parsed)
