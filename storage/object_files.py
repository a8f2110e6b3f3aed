"""The store on S3-compatible object storage (`s3://bucket/prefix`), through pyarrow's S3FileSystem.

The endpoint and credentials come from the environment as pyarrow and boto read them
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION); the bucket must exist.

Objects cannot be renamed, so a batch is committed in two steps: its Parquet file is uploaded under a
name no one has used (`<name>.<uuid>.parquet` in the run's Hive directory), then the run's manifest
(`<prefix>/_manifests/<run_id>.json`: the run's date and, per table, which objects are its files) is
replaced by one PUT, which S3 makes visible whole or not at all (a manifest carries its checksum: a
read that straddles a replacement is read again). Readers read manifests, never list
data directories: a writer killed before its PUT leaves an object nobody reads, which the run's next
writer deletes. Compaction is the same: one new object, one manifest PUT, then the old objects go.
One writer per run at a time, enforced by a lock file on the writing host (the flow's process writes
the store; workers on other hosts send it their results). While it holds that lock, the writer is
the only one who changes the run's manifest: it keeps the manifest it last read or wrote instead of
reading it again for every batch (never across a release of the lock: another writer may come next).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from filelock import FileLock
from pyarrow import fs as pafs

from opbyop.errors import StoreError
from opbyop.workspace import Workspace
from opbyop_storage.files import DataFile, Pieces, SkippedFile, Vanished, check_run_id, part_rows, write_parquet
from opbyop_storage.schema import TABLES, VERSION_KEY

log = logging.getLogger("opbyop.storage")

MANIFESTS = "_manifests"  # '_' names are never data: DuckDB's and pyarrow's Hive readers skip them
MANIFEST_READS = 8  # reads of a manifest that keep meeting its writer's replacements before giving up
REQUESTS_IN_FLIGHT = 16  # manifests and footers are small reads whose time is the round trip: overlap them

# Objects are never rewritten (a new version gets a new name): a footer read once holds for every
# reader of this process, like opbyop_storage.files' cache of local footers.
_footers: dict[str, int | None] = {}


def _encode_manifest(manifest: dict[str, Any]) -> bytes:
    """The manifest's JSON, then a line with its sha256."""
    body = json.dumps(manifest, sort_keys=True).encode()
    return body + b"\n" + hashlib.sha256(body).hexdigest().encode() + b"\n"


def _decode_manifest(data: bytes) -> dict[str, Any] | None:
    """The manifest, or None when `data` is not one whole version of it. pyarrow reads an object
    as its size (a HEAD), then its bytes (ranged GETs): a PUT in between gives a mix of two versions."""
    body, _, digest = data.rstrip(b"\n").rpartition(b"\n")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        return None
    return json.loads(body)


def s3_filesystem() -> pafs.S3FileSystem:
    """pyarrow's S3 client for the endpoint and region in the environment (credentials: pyarrow's
    default chain, which reads AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    kwargs: dict[str, Any] = {"endpoint_override": endpoint}
    if region:
        kwargs["region"] = region
    if endpoint and endpoint.startswith("http://"):
        kwargs["scheme"] = "http"
    return pafs.S3FileSystem(**kwargs)


class ObjectFiles:
    """A store under `s3://bucket/prefix`; data files are "bucket/key" strings."""

    def __init__(self, url: str, filesystem: pafs.FileSystem | None = None):
        self.root = url
        self.base = url.removeprefix("s3://").rstrip("/")
        if not self.base:
            raise StoreError(f"the store URL {url!r} names no bucket", "use s3://bucket or s3://bucket/prefix")
        self.filesystem = filesystem or s3_filesystem()
        self._locks: dict[str, FileLock] = {}  # run id -> the last lock lock() gave out for it
        self._kept: dict[str, dict[str, Any] | None] = {}  # run id -> its manifest, while that lock is held

    # ------------------------------------------------------------------ manifests
    def _manifest_path(self, run_id: str) -> str:
        return f"{self.base}/{MANIFESTS}/{check_run_id(run_id)}.json"

    def manifest(self, run_id: str) -> dict[str, Any] | None:
        """{"run_id", "date", "tables": {table: {name: object}}}, or None for a run not in the store."""
        holding = self._holding(run_id)
        if holding and run_id in self._kept:
            return copy.deepcopy(self._kept[run_id])
        manifest = self._read_manifest(run_id)
        if holding:
            self._kept[run_id] = copy.deepcopy(manifest)
        return manifest

    def _holding(self, run_id: str) -> bool:
        """Whether this process holds the run's lock: then no one else changes its manifest."""
        lock = self._locks.get(run_id)
        return lock is not None and lock.is_locked

    def _read_manifest(self, run_id: str) -> dict[str, Any] | None:
        path = self._manifest_path(run_id)
        for attempt in range(MANIFEST_READS):
            try:
                with self.filesystem.open_input_stream(path) as f:
                    manifest = _decode_manifest(f.read())
            except FileNotFoundError:
                return None
            except OSError as e:
                raise self._unreachable(e) from None
            if manifest is not None:
                return manifest
            time.sleep(min(0.005 * 2 ** attempt, 0.2))  # read while its writer replaced it: read again
        raise StoreError(f"the manifest s3://{path} does not match its checksum after {MANIFEST_READS} reads",
                         f"run the command again; if this persists, resume run {run_id!r} to rewrite it")

    def _put_manifest(self, run_id: str, manifest: dict[str, Any]) -> None:
        self._kept.pop(run_id, None)  # a PUT that fails may or may not have replaced it
        with self.filesystem.open_output_stream(self._manifest_path(run_id)) as f:
            f.write(_encode_manifest(manifest))
        if self._holding(run_id):
            self._kept[run_id] = copy.deepcopy(manifest)

    def _manifests(self) -> list[dict[str, Any]]:
        try:
            infos = self.filesystem.get_file_info(pafs.FileSelector(f"{self.base}/{MANIFESTS}", allow_not_found=True))
        except OSError as e:
            raise self._unreachable(e) from None
        bucket = self.base.split("/")[0]
        if not infos and self.filesystem.get_file_info(bucket).type == pafs.FileType.NotFound:  # not an empty store
            raise self._unreachable(OSError(f"bucket {bucket!r} not found"))
        run_ids = [i.base_name.removesuffix(".json") for i in sorted(infos, key=lambda i: i.path)
                   if i.type == pafs.FileType.File and i.base_name.endswith(".json")]
        with ThreadPoolExecutor(REQUESTS_IN_FLIGHT) as pool:
            return [m for m in pool.map(self.manifest, run_ids) if m is not None]  # None: deleted since listed

    def _unreachable(self, e: OSError) -> StoreError:
        return StoreError(f"the object store {self.root} cannot be read: {e}",
                          "check AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and that the bucket "
                          f"{self.base.split('/')[0]!r} exists")

    def _dir(self, table: str, day: date, run_id: str) -> str:
        if table not in TABLES:
            raise StoreError(f"unknown table {table!r}", f"use one of {', '.join(TABLES)}")
        return f"{self.base}/{table}/date={day.isoformat()}/run_id={check_run_id(run_id)}"

    def _objects(self, m: dict[str, Any], table: str) -> list[str]:
        day = date.fromisoformat(m["date"])
        names = m["tables"].get(table, {})
        return [f"{self._dir(table, day, m['run_id'])}/{names[n]}" for n in sorted(names)]

    # ------------------------------------------------------------------ reading
    def data_files(self, table: str, run_id: str | None = None) -> list[DataFile]:
        if run_id is not None:
            m = self.manifest(run_id)
            return list(self._objects(m, table)) if m else []
        return [f for m in self._manifests() for f in self._objects(m, table)]

    def listing(self) -> dict[str, list[DataFile]]:
        manifests = self._manifests()
        return {t: [f for m in manifests for f in self._objects(m, t)] for t in TABLES}

    def read_footers(self, paths: list[DataFile]) -> list[int | None | SkippedFile | Vanished]:
        with ThreadPoolExecutor(REQUESTS_IN_FLIGHT) as pool:
            return list(pool.map(self.read_footer, paths))

    def read_footer(self, path: DataFile) -> int | None | SkippedFile | Vanished:
        key = str(path)  # an object's name carries a uuid of its own: no other object has it
        if key in _footers:
            return _footers[key]
        try:
            with self.filesystem.open_input_file(str(path)) as f:
                version = (pq.read_metadata(f).metadata or {}).get(VERSION_KEY)
        except FileNotFoundError:
            return Vanished(Path(path))
        except (pa.ArrowException, OSError, ValueError) as e:
            return self._unreadable(str(path), e)
        _footers[key] = int(version) if version is not None else None
        return _footers[key]

    def read_part(self, path: DataFile, table: str, where: pc.Expression | None = None,
                  columns: list[str] | None = None) -> pa.Table | SkippedFile | Vanished:
        key = str(path)
        try:
            with self.filesystem.open_input_file(key) as f:
                return part_rows(pq.ParquetFile(f), table, where, columns)
        except FileNotFoundError:
            return Vanished(Path(key))
        except (pa.ArrowException, OSError, ValueError) as e:
            return self._unreadable(key, e)

    def _unreadable(self, key: str, e: Exception) -> SkippedFile | Vanished:
        if self.filesystem.get_file_info(key).type == pafs.FileType.NotFound:  # replaced by its run's writer
            return Vanished(Path(key))
        log.warning("skipping unreadable Parquet object s3://%s: %s", key, e)
        return SkippedFile(Path(key), f"{type(e).__name__}: {str(e).strip()}")

    def mid_swap(self, table: str | None = None, run_id: str | None = None) -> bool:
        return False  # a manifest is replaced whole: there is no moment between two renames

    def run_day(self, run_id: str, table: str | None = None) -> date | None:
        m = self.manifest(run_id)
        if m is None or (table is not None and not m["tables"].get(table)):
            return None
        return date.fromisoformat(m["date"])

    # ------------------------------------------------------------------ writing
    def lock(self, run_id: str) -> FileLock:
        """A lock on the writing host: object storage has no lock of its own that pyarrow reaches."""
        store = hashlib.sha256(self.root.encode()).hexdigest()[:12]
        path = Workspace.default().root / ".locks" / f"s3-{store}-{check_run_id(run_id)}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        # held by the process, whichever thread writes; each acquisition starts from the stored manifest
        lock = FileLock(path, thread_local=False, on_acquired=lambda _fd: self._kept.pop(run_id, None))
        self._locks[run_id] = lock
        return lock

    def _commit(self, run_id: str, day: date, table: str, change: dict[str, str | None]) -> None:
        """Point the run's manifest at new objects (name -> object; None drops the name), then delete
        the objects it no longer names."""
        m = self.manifest(run_id) or {"run_id": run_id, "date": day.isoformat(), "tables": {}}
        if m["date"] != day.isoformat():
            raise StoreError(f"run {run_id!r} is stored under {m['date']}, not {day}", "resume the run as stored")
        names = m["tables"].setdefault(table, {})
        old = [names.get(n) for n in change]
        for name, obj in change.items():
            if obj is None:
                names.pop(name, None)
            else:
                names[name] = obj
        self._put_manifest(run_id, m)
        directory = self._dir(table, day, run_id)
        for obj in old:
            if obj is not None and obj not in names.values():
                self._delete(f"{directory}/{obj}")

    def _delete(self, key: str) -> None:
        try:
            self.filesystem.delete_file(key)
        except FileNotFoundError:
            pass

    def _upload(self, table: str, day: date, run_id: str, name: str, data: pa.Table | Pieces) -> str:
        """`data` as a new object for `name`; returns the object's name within the run's directory."""
        obj = f"{name.removesuffix('.parquet')}.{uuid.uuid4().hex[:12]}.parquet"
        try:
            with self.filesystem.open_output_stream(f"{self._dir(table, day, run_id)}/{obj}") as f:
                write_parquet(data, f)
        except OSError as e:
            raise StoreError(f"cannot write {name} of run {run_id!r} to {self.root}: {e}",
                             "check the object store is reachable and writable, then resume: what was "
                             "committed is kept") from None
        return obj

    def recover(self, day: date, run_id: str) -> None:
        """Delete the run's objects that its manifest does not name (uploads of a killed writer)."""
        m = self.manifest(run_id)
        for table in TABLES:
            directory = self._dir(table, day, run_id)
            named = set((m or {}).get("tables", {}).get(table, {}).values()) if m and m["date"] == day.isoformat() \
                else set()
            for info in self.filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True)):
                if info.type == pafs.FileType.File and info.base_name not in named:
                    log.warning("deleting an object no manifest names (a killed writer's): s3://%s", info.path)
                    self._delete(info.path)

    def part_files(self, table: str, day: date, run_id: str) -> list[DataFile]:
        m = self.manifest(run_id)
        return list(self._objects(m, table)) if m and m["date"] == day.isoformat() else []

    def add_part(self, table: str, day: date, run_id: str, data: pa.Table) -> DataFile:
        m = self.manifest(run_id)
        names = (m or {}).get("tables", {}).get(table, {})
        seqs = [int(seq) for n in names if (seq := n.removesuffix(".parquet").split("-")[1]).isdigit()]
        name = f"part-{max(seqs, default=-1) + 1:06d}.parquet"
        return self.put_part(table, day, run_id, name, data)

    def put_part(self, table: str, day: date, run_id: str, name: str, data: pa.Table) -> DataFile:
        obj = self._upload(table, day, run_id, name, data)
        self._commit(run_id, day, table, {name: obj})
        return f"{self._dir(table, day, run_id)}/{obj}"

    def _locate(self, path: DataFile) -> tuple[str, date, str, str]:
        """(table, day, run_id, name) of one of the store's objects."""
        rel = str(path).removeprefix(self.base + "/")
        table, day_part, run_part, obj = rel.split("/")
        run_id = run_part.removeprefix("run_id=")
        m = self.manifest(run_id) or {"tables": {}}
        name = next((n for n, o in m["tables"].get(table, {}).items() if o == obj), None)
        if name is None:
            raise StoreError(f"s3://{path} is not one of run {run_id!r}'s files", "list the run's files again")
        return table, date.fromisoformat(day_part.removeprefix("date=")), run_id, name

    def rewrite_part(self, path: DataFile, data: pa.Table | None) -> DataFile | None:
        table, day, run_id, name = self._locate(path)
        if data is None or not data.num_rows:
            self._commit(run_id, day, table, {name: None})
            return None
        return self.put_part(table, day, run_id, name, data)

    def replace_run(self, table: str, day: date, run_id: str, name: str, data: pa.Table | Pieces) -> None:
        obj = self._upload(table, day, run_id, name, data)
        m = self.manifest(run_id) or {}
        dropped = {n: None for n in (m.get("tables", {}).get(table, {}) if m.get("date") == day.isoformat() else {})}
        self._commit(run_id, day, table, {**dropped, name: obj})

    def remove_run(self, run_id: str, keep_day: date | None = None) -> None:
        """The manifest goes first (the run vanishes whole), then its objects."""
        m = self.manifest(run_id)
        if m is None or (keep_day is not None and m["date"] == keep_day.isoformat()):
            return
        self._kept.pop(run_id, None)
        self._delete(self._manifest_path(run_id))
        day = date.fromisoformat(m["date"])
        for table in TABLES:
            directory = self._dir(table, day, run_id)
            for info in self.filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True)):
                if info.type == pafs.FileType.File:
                    self._delete(info.path)

    # ------------------------------------------------------------------ beside the data
    def upload(self, local: Path, name: str) -> str:
        """Copy a local file (the report, the catalog, an image) to `<store>/<name>`; returns its URL.
        One PUT replaces the object whole. Names under a table's directory are refused: they are data."""
        if name.split("/", 1)[0] in TABLES or name.startswith(MANIFESTS):
            raise StoreError(f"{name!r} would be read as the store's data", "upload it under another name")
        try:
            self._put(local, name)
        except OSError as e:
            raise StoreError(f"cannot upload {local} to {self.root}/{name}: {e}",
                             "check the object store is reachable and writable") from None
        return f"{self.root}/{name}"

    def _put(self, local: Path, name: str) -> None:
        with open(local, "rb") as src, self.filesystem.open_output_stream(f"{self.base}/{name}") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
