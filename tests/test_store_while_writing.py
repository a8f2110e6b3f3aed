"""The store stays readable while a run is written: a reader never sees a file vanish from under it
(the writer's batches are rewritten and its parts compacted by renames), never warns about a run's
own compaction, and never counts a run's rows twice or half."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from store_samples import SAMPLE_OPS, result, run_info, summary

from opbyop.records import Status
from opbyop_storage.dataset import Store
from opbyop_storage.readonly import StoreConnection
from opbyop_storage.run_progress import RunSignatures

BATCHES = 10
RUNS = 10


def _write_runs(root: Path, stop: threading.Event, failures: list[BaseException]) -> None:
    """Run after run: results in batches (one batch re-writing the results of an earlier one), ops,
    then the compaction of each table into one file."""
    try:
        start = datetime(2026, 11, 20, 2, 0, tzinfo=timezone.utc)
        ops = list(SAMPLE_OPS.values())
        for k in range(RUNS):
            if stop.is_set():
                return
            run = run_info(f"w{k}", start + timedelta(hours=k), ["mlp"])
            with Store(root).writer() as w:
                w.start(run)
                for b in range(BATCHES):
                    batch = [result(op, Status.SUCCESS) for op in ops[b % len(ops):][:2]]
                    w.add_results(batch)
                w.finish(run, [summary("mlp", [])])
    except BaseException as e:  # reported by the test
        failures.append(e)


@pytest.mark.slow
def test_a_reader_querying_in_a_loop_never_sees_a_run_being_compacted(store_root: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="opbyop.storage")
    stop, failures = threading.Event(), []
    writer = threading.Thread(target=_write_runs, args=(store_root, stop, failures), daemon=True)
    problems: list[str] = []
    reads = 0
    writer.start()
    deadline = time.monotonic() + 120
    try:
        while writer.is_alive() and time.monotonic() < deadline:
            store = Store(store_root)
            completed = {r.run_id for r in store.runs() if r.status == "completed"}  # final before the scan
            scan = store.scan()
            if scan.skipped:
                problems.append(f"scan skipped {scan.skipped}")
            try:
                with StoreConnection(store_root, scan=scan) as con:
                    rows = con.query("SELECT run_id, count(*) AS n, count(DISTINCT signature) AS keys "
                                     "FROM results GROUP BY run_id").rows
                for run_id, n, keys in rows:
                    if n != keys:
                        problems.append(f"run {run_id}: {n} rows for {keys} signatures")
                    if run_id in completed and n != len(SAMPLE_OPS):
                        problems.append(f"completed run {run_id} shows {n} results")
                    store.check_readable(run_id)
                    store.results(run_id)
            except Exception as e:
                problems.append(f"{type(e).__name__}: {e}")
            reads += 1
    finally:
        stop.set()
        writer.join(timeout=60)
    assert not failures, failures
    print(f"{reads} reads while {RUNS} runs were written")
    assert reads > 5
    warnings = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert not problems and not warnings, (problems[:5], warnings[:5])


def test_a_runs_progress_reads_each_part_once_and_follows_rewrites_and_compaction(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    ops = list(SAMPLE_OPS.values())
    run = run_info("p1", datetime(2026, 11, 20, 2, 0, tzinfo=timezone.utc), ["mlp"])
    done = RunSignatures(store, "results", "p1")
    with store.writer() as w:
        w.start(run)
        assert done() == set()
        w.add_results([result(op, Status.SUCCESS) for op in ops[:2]])
        w.add_results([result(op, Status.SUCCESS) for op in ops[2:4]])
        assert len(done()) == 4 and len(done.parts) == 2
        read = dict(done.parts)
        done()
        assert all(done.parts[p] is read[p] for p in read)  # a part read before is not read again
        w.add_results([result(ops[0], Status.COMPILE_FAILED)])  # rewrites the part that held it
        assert done() == {op.signature for op in ops[:4]}
        w.finish(run, [summary("mlp", [])])  # compaction: one file
    assert done() == {op.signature for op in ops[:4]} and len(done.parts) == 1
