"""The Parquet dataset: write a run incrementally (crash-safe, resumable, idempotent) and read it back.

A run is written by one RunWriter: `start` records the run, each `add_results` / `add_ops` batch
becomes one new part file (a crash loses at most the batch in flight), and `finish` compacts each
table's parts into one file per run and marks the run completed. Within a run a key (a result's
signature, an op's model and position, a model's name) has at most one row at every instant: a
batch that repeats a key first removes the older row, so re-running a run id never duplicates rows.
The files are a directory's or an object store's (storage/location.py): the same contract on both.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import date
from types import TracebackType
from typing import Any, Callable, Collection, Hashable, Iterable, Iterator

import pyarrow as pa
from filelock import FileLock, Timeout
import pyarrow.compute as pc

from opbyop.errors import StoreError
from opbyop.frontends.specs import recorded_name
from opbyop.records import ModelSummary, OpRecord, OpResult, RunInfo, RunStatus, Stage, Status, utcnow
from opbyop.shrink.result import ShrinkResult
from opbyop_storage import convert
from opbyop_storage.convert import ModelCounts, StoredModel
from opbyop_storage.files import Pieces, SkippedFile, Vanished, check_run_id, columns_schema, default_root
from opbyop_storage.location import DataFile, StoreFiles, StoreRoot, store_files
from opbyop_storage.schema import TABLES, schema_of

log = logging.getLogger("opbyop.storage")

RUN_PART = "part-000000.parquet"  # the name of a compacted run's single file per table
# A run's compaction holds about this much of a table at once (plus the part being read): a big run's
# ops table is 300 MB in Arrow at 177,000 rows (reading it whole to sort it took 700 MB at the run's end).
COMPACTION_CHUNK_BYTES = 32 << 20

# A reader that meets a writer's rename (a file gone, a run between the two renames of a compaction)
# lists the files again; renames take microseconds, so a few short waits cover them. A writer that
# died mid-swap leaves the run absent until recover(): the reader then goes on without it.
RELIST_ATTEMPTS = 20


def _relist_pause(attempt: int) -> None:
    time.sleep(min(0.002 * 2 ** attempt, 0.1))


@dataclass
class DatasetScan:
    """Every readable data file per table, and the files skipped because they are corrupt."""

    files: dict[str, list[DataFile]] = field(default_factory=dict)
    skipped: list[SkippedFile] = field(default_factory=list)
    versions: dict[str, set[int | None]] = field(default_factory=dict)  # schema versions met per table
    filesystem: Any = None  # pyarrow's FileSystem of files that are not local paths (an object store)

    @property
    def file_count(self) -> int:
        return sum(len(v) for v in self.files.values())


# Each table's key within a run: at most one row per key (and the sort order of a compacted file's pieces).
TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "results": ("signature",),
    "ops": ("model", "position"),
    "models": ("model",),
    "shrinks": ("signature", "dimension", "dtype", "size"),
    "runs": (),
}


def of_signatures(signatures: Collection[str] | None) -> pc.Expression | None:
    """The rows whose op is one of `signatures` (all of them when None), as a filter a read applies."""
    if signatures is None:
        return None
    return pc.field("signature").isin(pa.array(list(signatures), pa.string()))


def _row_key(table: str, row: dict[str, Any]) -> Hashable:
    return tuple(row[c] for c in TABLE_KEYS[table])


def _table_keys(table: str, data: pa.Table) -> list[Hashable]:
    return list(zip(*(data.column(c).to_pylist() for c in TABLE_KEYS[table])))


class ModelCounting:
    """Per model: occurrences by their unique op's depth and status, and those without a result.
    Fed a run's results first, then its ops, a part at a time: only the columns counted are kept."""

    def __init__(self) -> None:
        self._found: dict[str, tuple[Stage, Status]] = {}
        self.counts: dict[str, ModelCounts] = {}

    def add_results(self, results: pa.Table) -> None:
        self._found.update(
            (sig, (Stage(depth), Status(status)))
            for sig, depth, status in zip(results.column("signature").to_pylist(), results.column("depth").to_pylist(),
                                          results.column("status").to_pylist()))

    def add_ops(self, ops: pa.Table) -> None:
        for model, sig, split_error in zip(ops.column("model").to_pylist(), ops.column("signature").to_pylist(),
                                           ops.column("split_error").to_pylist()):
            c = self.counts.setdefault(model, ModelCounts())
            if split_error is not None:
                continue  # counted by ModelSummary.split_failures
            found = self._found.get(sig)
            if found is None:
                c.without_result += 1
                continue
            depth, status = found
            c.by_depth[depth] = c.by_depth.get(depth, 0) + 1
            c.by_status[status] = c.by_status.get(status, 0) + 1


def count_models(ops: pa.Table, results: pa.Table) -> dict[str, ModelCounts]:
    """Per model: occurrences by their unique op's depth and status, and those without a result."""
    counting = ModelCounting()
    counting.add_results(results)
    counting.add_ops(ops)
    return counting.counts


class Store:
    """A Parquet dataset rooted at `root` (default: $OPBYOP_STORE, else $OPBYOP_HOME/store (default ./.opbyop/store))."""

    def __init__(self, root: StoreRoot | None = None):
        self.files = store_files(root if root is not None else default_root())
        self.root = self.files.root  # a directory (Path), or an object-store URL (str)
        self.skipped: list[SkippedFile] = []  # corrupt files met by this Store's reads, with their paths

    # ------------------------------------------------------------------ reading
    def scan(self) -> DatasetScan:
        """All data files, with their footers checked: corrupt ones are listed apart, with their paths.
        A listing that a writer changed while it was read (a file replaced, a run mid-compaction) is
        taken again: the scan is of one moment when every file it names was there."""
        for attempt in range(RELIST_ATTEMPTS):
            scan, vanished = self._scan_once()
            if not vanished and not self.files.mid_swap():
                break
            _relist_pause(attempt)
        self._note(scan.skipped)
        return scan

    def _scan_once(self) -> tuple[DatasetScan, bool]:
        scan, vanished = DatasetScan(filesystem=self.files.filesystem), False
        listing = self.files.listing()
        for table in TABLES:
            good, versions = [], set()
            paths = listing.get(table, [])
            for path, footer in zip(paths, self.files.read_footers(paths)):
                if isinstance(footer, Vanished):
                    vanished = True
                elif isinstance(footer, SkippedFile):
                    scan.skipped.append(footer)
                else:
                    good.append(path)
                    versions.add(footer)
            scan.files[table], scan.versions[table] = good, versions
        return scan, vanished

    def _note(self, skipped: Iterable[SkippedFile]) -> None:
        for s in skipped:
            if s.path not in {k.path for k in self.skipped}:
                self.skipped.append(s)

    def _read_files(self, table: str, paths: Iterable[DataFile]) -> pa.Table:
        return self._read_parts(table, paths)[0]

    def _read_parts(self, table: str, paths: Iterable[DataFile], where: pc.Expression | None = None,
                    columns: list[str] | None = None) -> tuple[pa.Table, bool]:
        """The files' rows (files.part_rows), and whether any file vanished while they were read."""
        parts, skipped, vanished = [], [], False
        for path in paths:
            got = self.files.read_part(path, table, where, columns)
            if isinstance(got, Vanished):
                vanished = True
            else:
                (skipped if isinstance(got, SkippedFile) else parts).append(got)
        self._note(skipped)
        return (pa.concat_tables(parts) if parts else columns_schema(table, columns).empty_table()), vanished

    def read_table(self, table: str, run_id: str | None = None, where: pc.Expression | None = None,
                   columns: list[str] | None = None) -> pa.Table:
        """One table (of one run, or all), in the current schema; corrupt files skipped and noted.
        Files a writer replaced while they were read are listed and read again. With `where` and
        `columns`, the rows it keeps and those columns only (files.part_rows): a big run's tables
        are not read whole for a few of their rows."""
        if run_id is not None:
            check_run_id(run_id)
        for attempt in range(RELIST_ATTEMPTS):
            data, vanished = self._read_parts(table, self.files.data_files(table, run_id), where, columns)
            if not vanished and not self.files.mid_swap(table, run_id):
                break
            _relist_pause(attempt)
        return data

    def runs(self) -> list[RunInfo]:
        """Every run, oldest first."""
        runs = [convert.run_from_row(r) for r in self.read_table("runs").to_pylist()]
        return sorted(runs, key=lambda r: (r.started_at, r.run_id))

    def run(self, run_id: str) -> RunInfo:
        rows = self.read_table("runs", run_id).to_pylist()
        if not rows:
            corrupt = self.unreadable(run_id, tables=("runs",))
            if corrupt:
                raise StoreError(f"run {run_id!r} cannot be read: its runs file is corrupt ({corrupt[0]})",
                                 resume_fix(run_id))
            raise StoreError(f"run {run_id!r} is not in the store at {self.root}",
                             "list the runs with `opbyop runs`, or pass --store / set OPBYOP_STORE")
        return convert.run_from_row(rows[0])

    def unreadable(self, run_id: str, tables: Collection[str] = TABLES) -> list[SkippedFile]:
        """The data files of `run_id` whose footer does not parse (corrupt or truncated)."""
        check_run_id(run_id)
        paths = [path for t in tables for path in self.files.data_files(t, run_id)]
        # a Vanished file was replaced, not corrupt
        found = [f for f in self.files.read_footers(paths) if isinstance(f, SkippedFile)]
        self._note(found)
        return found

    def check_readable(self, run_id: str) -> RunInfo:
        """The run, if every file of it can be read; else a StoreError naming the corrupt files: an
        answer computed without them would be wrong (e.g. '0 checked' for an unreadable results file)."""
        run = self.run(run_id)
        corrupt = self.unreadable(run_id)
        if corrupt:
            raise StoreError(f"run {run_id!r} has {len(corrupt)} corrupt file(s): "
                             + "; ".join(str(c) for c in corrupt), resume_fix(run_id))
        return run

    def has_run(self, run_id: str) -> bool:
        return self.files.run_day(check_run_id(run_id), "runs") is not None

    def results(self, run_id: str, signatures: Collection[str] | None = None) -> list[OpResult]:
        """The run's results (of `signatures` only, when given: a big run's rows are not all read into
        records)."""
        data = self.read_table("results", run_id, of_signatures(signatures))
        return [convert.result_from_row(r) for r in data.to_pylist()]

    def ops(self, run_id: str, model: str | None = None, signatures: Collection[str] | None = None) -> list[OpRecord]:
        """The run's op records by model and position (a big run's compacted file is sorted piece by
        piece, so the order is made here)."""
        where = of_signatures(signatures)
        if model is not None:
            where = (pc.field("model") == model) if where is None else where & (pc.field("model") == model)
        data = self.read_table("ops", run_id, where)
        return [convert.op_from_row(r) for r in _sorted("ops", data).to_pylist()]

    def models(self, run_id: str) -> list[StoredModel]:
        return [convert.model_from_row(r) for r in self.read_table("models", run_id).to_pylist()]

    def model_named(self, run_id: str, typed: str) -> str:
        """The model of `run_id` a user means by `typed`: its recorded name, or any form that records
        as it (a factory's package.module:name, a file's path: opbyop.frontends.specs.recorded_name)."""
        recorded = sorted({m.summary.model for m in self.models(run_id)})
        for candidate in (typed, recorded_name(typed)):
            if candidate in recorded:
                return candidate
        raise StoreError(f"run {run_id} has no model {typed!r}",
                         f"its models: {', '.join(recorded) or 'none'} (a factory's package.module:name and a "
                         "file's path are accepted too)")

    def shrinks(self, run_id: str, signature: str | None = None) -> list[dict[str, Any]]:
        """The rows of the shrinks table (one per variant tried) of a run, optionally of one op."""
        data = self.read_table("shrinks", run_id)
        if signature is not None:
            data = data.filter(pc.equal(data.column("signature"), signature))
        return data.to_pylist()

    def write_shrinks(self, run_id: str, results: list[ShrinkResult]) -> list[DataFile]:
        """Store shrinks under a run already in the store (its lock held while writing): one file per
        op, replacing that op's earlier shrink in this run."""
        with RunWriter(self) as w:
            w.lock(run_id)
            day = self.files.run_day(check_run_id(run_id), "runs")
            if day is None:
                raise StoreError(f"run {run_id!r} is not in the store at {self.root}",
                                 "list the runs with `opbyop runs`, or pass another --run")
            return [_write_shrink(self.files, day, run_id, r) for r in results]

    def completed_signatures(self, run_id: str, exclude: Collection[Status] = ()) -> set[str]:
        """Signatures that already have a result in `run_id` (optionally not counting some statuses):
        what a resumed run can skip."""
        data = self.read_table("results", check_run_id(run_id))
        excluded = {s.value for s in exclude}
        return {sig for sig, status in zip(data.column("signature").to_pylist(), data.column("status").to_pylist())
                if status not in excluded}

    # ------------------------------------------------------------------ writing
    def writer(self, compaction_chunk_bytes: int = COMPACTION_CHUNK_BYTES) -> RunWriter:
        return RunWriter(self, compaction_chunk_bytes)

    def write_run(self, run: RunInfo, ops: list[OpRecord], results: list[OpResult],
                  models: list[ModelSummary]) -> RunInfo:
        """Write (or re-write) a whole run at once: each table's run directory is built hidden and
        renamed into place, replacing whatever that run id held before."""
        with RunWriter(self) as w:
            w.lock(run.run_id)
            day = convert.utc(run.started_at).date()
            self._remove_run_dirs(run.run_id, keep_day=day)
            ops_t = convert.to_table("ops", _dedupe("ops", [convert.op_row(run.run_id, r) for r in ops]))
            res_t = convert.to_table("results",
                                     _dedupe("results", [convert.result_row(run.run_id, r) for r in results]))
            counts = count_models(ops_t, res_t)
            models_t = convert.to_table("models", _dedupe("models", [
                convert.model_row(run.run_id, m, counts.get(m.model, ModelCounts())) for m in models]))
            for table, data in (("results", res_t), ("ops", ops_t), ("models", models_t),
                                ("runs", convert.to_table("runs", [convert.run_row(run)]))):
                _replace_run_dir(self.files, table, day, run.run_id, data)
        return run

    def update_run(self, run: RunInfo) -> None:
        """Rewrite the row of a run already stored (e.g. phases measured after it was finished), under
        the run's lock; its results, ops and models are untouched."""
        with RunWriter(self) as w:
            w.lock(run.run_id)
            day = self.files.run_day(check_run_id(run.run_id), "runs")
            if day is None:
                raise StoreError(f"run {run.run_id!r} is not in the store at {self.root}", "write the run first")
            self.files.put_part("runs", day, run.run_id, RUN_PART, convert.to_table("runs", [convert.run_row(run)]))

    def delete_run(self, run_id: str) -> None:
        self._remove_run_dirs(check_run_id(run_id))

    def _remove_run_dirs(self, run_id: str, keep_day: date | None = None) -> None:
        self.files.remove_run(run_id, keep_day)


def _write_shrink(files: StoreFiles, day: date, run_id: str, result: ShrinkResult) -> DataFile:
    """One op's shrink rows as the run's part file for that op (atomically replaced)."""
    data = convert.to_table("shrinks", _dedupe("shrinks", convert.shrink_rows(run_id, result)))
    return files.put_part("shrinks", day, run_id, f"part-shrink-{result.signature[:32]}.parquet", data)


def resume_fix(run_id: str) -> str:
    return (f"resume the run to rewrite its files: opbyop analyze MODELS --run-id {run_id} (the ops whose results "
            "were lost are analysed again)")


def _dedupe(table: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last row of each key."""
    return list({_row_key(table, r): r for r in rows}.values())


def _sort_keys(table: str) -> list[tuple[str, str]]:
    return [(c, "ascending") for c in TABLE_KEYS[table]]


def _sorted(table: str, data: pa.Table) -> pa.Table:
    return data.sort_by(_sort_keys(table)) if _sort_keys(table) and data.num_rows else data


def _replace_run_dir(files: StoreFiles, table: str, day: date, run_id: str, data: pa.Table | Pieces) -> None:
    """The run's files of `table` are now exactly `data`, in one file, swapped in whole."""
    files.replace_run(table, day, run_id, RUN_PART, data if isinstance(data, Pieces) else _sorted(table, data))


class RunWriter:
    """Writes one run incrementally. One writer per run id at a time (enforced by a file lock).

        with store.writer() as w:
            run = w.start(run)                       # resumes what an interrupted writer left
            todo = [op for op in ops if op.signature not in w.completed_signatures()]
            w.add_ops(records); w.add_results(batch) ...
            w.finish(run, models)
    """

    def __init__(self, store: Store, compaction_chunk_bytes: int = COMPACTION_CHUNK_BYTES):
        self.store = store
        self.compaction_chunk_bytes = compaction_chunk_bytes
        self.run: RunInfo | None = None
        self.day: date | None = None
        self._lock_file: FileLock | None = None
        self._index: dict[str, dict[Hashable, DataFile]] = {}

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def lock(self, run_id: str) -> None:
        if self._lock_file is not None:
            return
        lock = self.store.files.lock(run_id)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise StoreError(f"run {run_id!r} is being written by another process (lock {lock.lock_file})",
                             "wait for that run to finish, or use another run id") from None
        self._lock_file = lock

    def close(self) -> None:
        if self._lock_file is not None:
            self._lock_file.release()
            self._lock_file = None

    def _parts(self, table: str) -> list[DataFile]:
        assert self.run is not None and self.day is not None, "call start(run) first"
        return self.store.files.part_files(table, self.day, self.run.run_id)

    def start(self, run: RunInfo, *, replace: bool = False) -> RunInfo:
        """Begin (or resume) writing `run`; returns the run as stored.

        Resuming keeps every result and op already written under this run id, and the run's first
        start time (its date partition); replace=True drops them and starts afresh.
        """
        self.lock(run.run_id)
        existing = self.store.files.run_day(run.run_id)
        if replace:
            self.store._remove_run_dirs(run.run_id)
            existing = None
        run = run.model_copy(update={"status": RunStatus.RUNNING, "ended_at": None})
        if existing is not None:
            self.day = existing
            if self.store.has_run(run.run_id) and not self.store.unreadable(run.run_id, tables=("runs",)):
                run = run.model_copy(update={"started_at": self.store.run(run.run_id).started_at})
            # else its runs file is corrupt: rewritten below, from `run` (the date partition is kept)
        else:
            self.day = convert.utc(run.started_at).date()
        self.run = run
        self.store.files.recover(self.day, run.run_id)
        self._index = {t: self._load_index(t) for t in ("results", "ops")}
        self._put_run_row(run)
        return run

    def _put_run_row(self, run: RunInfo) -> None:
        assert self.day is not None, "call start(run) first"
        self.store.files.put_part("runs", self.day, run.run_id, RUN_PART, convert.to_table("runs", [convert.run_row(run)]))

    def _load_index(self, table: str) -> dict[Hashable, DataFile]:
        index: dict[Hashable, DataFile] = {}
        for path in self._parts(table):
            got = self.store.files.read_part(path, table)
            if isinstance(got, Vanished):  # only this run's writer (the lock holder) replaces its files
                continue
            if isinstance(got, SkippedFile):
                self.store._note([got])  # its rows are lost: those ops are not 'completed' and get redone
                continue
            index.update(dict.fromkeys(_table_keys(table, got), path))
        return index

    def completed_signatures(self, exclude: Collection[Status] = ()) -> set[str]:
        assert self.run is not None, "call start(run) first"
        return self.store.completed_signatures(self.run.run_id, exclude)

    def add_results(self, results: list[OpResult]) -> DataFile | None:
        """One batch of results -> one new part file, written atomically. A result for a signature
        this run already holds replaces the older one."""
        assert self.run is not None, "call start(run) first"
        return self._add("results", [convert.result_row(self.run.run_id, r) for r in results])

    def add_ops(self, records: list[OpRecord]) -> DataFile | None:
        assert self.run is not None, "call start(run) first"
        return self._add("ops", [convert.op_row(self.run.run_id, r) for r in records])

    def add_shrinks(self, results: list[ShrinkResult]) -> list[DataFile]:
        """Shrinks of this run's failing ops (Store.write_shrinks, under this writer's lock)."""
        assert self.run is not None and self.day is not None, "call start(run) first"
        return [_write_shrink(self.store.files, self.day, self.run.run_id, r) for r in results]

    def _add(self, table: str, rows: list[dict[str, Any]]) -> DataFile | None:
        rows = _dedupe(table, rows)
        if not rows:
            return None
        keys = [_row_key(table, r) for r in rows]
        index = self._index[table]
        superseded = {k for k in keys if k in index}
        # Older rows go first: a crash in between loses a result that is being redone anyway,
        # whereas the other order could leave two rows for one key.
        for part in sorted({index[k] for k in superseded}, key=str):
            self._rewrite_without(table, part, superseded)
        assert self.run is not None and self.day is not None
        path = self.store.files.add_part(table, self.day, self.run.run_id, convert.to_table(table, rows))
        index.update(dict.fromkeys(keys, path))
        return path

    def _compacted(self, table: str, seen: Callable[[pa.Table], None]) -> Pieces:
        """The run's parts of `table` as the pieces of its compacted file, each piece about
        compaction_chunk_bytes sorted by the table's key (a run that fits one piece is sorted whole);
        `seen` is shown every part as it is read. A part is read when its piece is written."""
        def pieces() -> Iterator[pa.Table]:
            buffer: list[pa.Table] = []
            held = 0
            for path in self._parts(table):
                got = self.store.files.read_part(path, table)
                if isinstance(got, Vanished):  # only this run's writer (the lock holder) replaces its files
                    continue
                if isinstance(got, SkippedFile):
                    self.store._note([got])
                    continue
                seen(got)
                buffer.append(got)
                held += got.nbytes
                if held >= self.compaction_chunk_bytes:
                    piece = _sorted(table, pa.concat_tables(buffer))
                    buffer, held, got = [], 0, None  # the parts go before the piece is written
                    yield piece
                    del piece
            if buffer:
                yield _sorted(table, pa.concat_tables(buffer))
        return Pieces(schema_of(table), pieces())

    def _rewrite_without(self, table: str, part: DataFile, keys: set[Hashable]) -> None:
        got = self.store.files.read_part(part, table)
        if isinstance(got, Vanished):
            return
        if isinstance(got, SkippedFile):
            self.store._note([got])
            self.store.files.rewrite_part(part, None)
            return
        keep = pa.array([k not in keys for k in _table_keys(table, got)], pa.bool_())
        moved = self.store.files.rewrite_part(part, got.filter(keep))  # an object store names it anew
        if moved is not None and moved != part:
            index = self._index[table]
            index.update({k: moved for k, p in index.items() if p == part})

    def finish(self, run: RunInfo | None, models: list[ModelSummary],
               status: RunStatus = RunStatus.COMPLETED) -> RunInfo:
        """Compact each table to one file for this run, write the models (with their counts computed
        from this run's ops and results), then mark the run `status` (last: 'completed' means all of
        it is in place)."""
        assert self.run is not None, "call start(run) first"
        run = (run or self.run).model_copy(update={
            "status": status, "started_at": self.run.started_at,
            "ended_at": (run.ended_at if run and run.ended_at else None) or utcnow()})
        assert self.day is not None
        counting = ModelCounting()  # results first: an op's count needs its result
        _replace_run_dir(self.store.files, "results", self.day, run.run_id,
                         self._compacted("results", counting.add_results))
        _replace_run_dir(self.store.files, "ops", self.day, run.run_id, self._compacted("ops", counting.add_ops))
        models_t = convert.to_table("models", _dedupe("models", [
            convert.model_row(run.run_id, m, counting.counts.get(m.model, ModelCounts())) for m in models]))
        _replace_run_dir(self.store.files, "models", self.day, run.run_id, models_t)
        self._put_run_row(run)
        # finished: the lock is let go of and nothing more is added; a writer that starts the run
        # again loads its index then (reading the compacted tables again here cost a big run's
        # whole ops table, 300 MB in memory at 177,000 rows, for nothing)
        self._index = {t: {} for t in ("results", "ops")}
        self.run = run
        self.close()
        return run
