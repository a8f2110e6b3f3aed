"""The Parquet dataset: round trips, explicit schemas, idempotent and crash-safe writes, corrupt files."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import store_samples as samples

from opbyop.errors import StoreError
from opbyop.records import OpResult, Stage, Status, TtsimOutcome, TtsimRun
from opbyop_storage import files, schema
from opbyop_storage.cache import lookup_cached
from opbyop_storage.dataset import Store, of_signatures
from opbyop_storage.files import data_files, run_dirs
from opbyop_storage.readonly import run_sql


def _files(root: Path, table: str, run_id: str) -> list[Path]:
    return data_files(root, table, run_id)


# ----------------------------------------------------------------------------- round trips

def test_every_table_round_trips(history_store: Store) -> None:
    for night in samples.history():
        run_id = night.run.run_id
        assert history_store.run(run_id) == night.run
        assert sorted(history_store.results(run_id), key=lambda r: r.signature) == \
            sorted(night.results, key=lambda r: r.signature)
        stored_ops = history_store.ops(run_id)
        expected_ops = [o.model_copy(update={"module_text": None}) for o in night.ops]  # text lives in artifacts
        key = lambda o: (o.model, o.position)  # noqa: E731
        assert sorted(stored_ops, key=key) == sorted(expected_ops, key=key)
        stored_models = {m.summary.model: m for m in history_store.models(run_id)}
        assert {m.model: m for m in night.models} == {k: v.summary for k, v in stored_models.items()}
    assert [r.run_id for r in history_store.runs()] == ["n0", "n1", "n2"]


def test_edge_values_round_trip(store_root: Path) -> None:
    """Crashed without any compile outcome, unknown artifact kinds, infinite errors, naive times."""
    t = datetime(2026, 11, 5, 1, 2, 3, 456789)  # naive: taken as UTC
    crashed = OpResult(signature=samples.ADD.signature, op_name="stablehlo.add", status=Status.CRASHED,
                       depth=Stage.SPLIT, failed_stage=Stage.STABLEHLO, message="worker died: signal 11",
                       started_at=t, ended_at=t + timedelta(seconds=1))
    odd = samples.result(samples.DOT, Status.GOLDEN_FAILED, message="mismatch").model_copy(deep=True)
    odd.compile.artifacts["mlir_debug"] = "ab" * 32
    odd.golden.max_rel_error = math.inf
    odd.golden.pcc = None
    skipped = samples.result(samples.TANH, Status.SKIPPED, message="device run not requested")
    run = samples.run_info("edge", t, ["mlp"])
    store = Store(store_root)
    store.write_run(run, [], [crashed, odd, skipped], [])
    back = {r.signature: r for r in store.results("edge")}
    assert back[crashed.signature].compile is None and back[crashed.signature].device is None
    assert back[crashed.signature].started_at == t.replace(tzinfo=timezone.utc)
    assert back[odd.signature] == odd
    assert back[skipped.signature] == skipped and back[skipped.signature].device is None


def test_a_run_on_ttsim_round_trips_with_what_tt_metal_allocated(store_root: Path) -> None:
    on_ttsim = samples.result(samples.DOT, Status.SUCCESS).model_copy(deep=True)
    on_ttsim.device_backend = "ttsim"
    on_ttsim.ttsim = TtsimRun(outcome=TtsimOutcome.RAN, seconds=1.5, runner_seconds=0.2, agreement="bit_equal",
                              peak_l1_bytes=16384, peak_cb_bytes=14336, peak_dram_bytes=49152)
    store = Store(store_root)
    store.write_run(samples.run_info("on-ttsim", datetime(2026, 11, 5, tzinfo=timezone.utc), ["mlp"]), [], [on_ttsim], [])
    (back,) = store.results("on-ttsim")
    assert back == on_ttsim and back.ttsim.peak_cb_bytes == 14336
    stored = run_sql("SELECT ttsim_peak_l1_bytes, ttsim_peak_cb_bytes, ttsim_peak_dram_bytes FROM results", store_root)
    assert stored.rows == [(16384, 14336, 49152)]  # queryable beside the model's figures


def test_files_carry_the_explicit_schema_and_version(history_store: Store) -> None:
    for table in schema.TABLES:
        for path in _files(history_store.root, table, "n1"):
            file_schema = pq.read_schema(path)
            assert file_schema.remove_metadata() == schema.TABLES[table].remove_metadata()
            assert file_schema.metadata[schema.VERSION_KEY] == str(schema.SCHEMA_VERSION).encode()


def test_artifact_columns_cover_the_compilers_kinds() -> None:
    from opbyop.compiler.stages import ARTIFACT_KINDS
    assert set(ARTIFACT_KINDS) == set(schema.ARTIFACT_KINDS), "bump SCHEMA_VERSION and add the new kind's column"


def test_hive_layout_by_run_start_date(history_store: Store) -> None:
    dirs = run_dirs(history_store.root, "results", "n2")
    assert [d.relative_to(history_store.root).as_posix() for d in dirs] == ["results/date=2026-11-03/run_id=n2"]
    stored = run_sql("SELECT DISTINCT date, run_id FROM results ORDER BY run_id", history_store.root)
    assert [(str(d), r) for d, r in stored.rows] == [("2026-11-01", "n0"), ("2026-11-02", "n1"), ("2026-11-03", "n2")]


def test_model_counts_are_computed_from_ops_and_results(history_store: Store) -> None:
    models = {m.summary.model: m.counts for m in history_store.models("n1")}
    # mlp: dot x2 stopped at TTIR, add x3 and tanh x1 passed
    assert models["mlp"].by_depth == {Stage.TTIR: 2, Stage.GOLDEN: 4}
    assert models["mlp"].by_status == {Status.COMPILE_FAILED: 2, Status.SUCCESS: 4}
    # cnn: conv x2 at FLATBUFFER, add at GOLDEN, reduce at DEVICE_RUN, sort at TTIR; the while loop failed to split
    assert models["cnn"].by_depth == {Stage.FLATBUFFER: 2, Stage.GOLDEN: 1, Stage.DEVICE_RUN: 1, Stage.TTIR: 1}
    assert history_store.models("n1")[0].summary.split_failures + history_store.models("n1")[1].summary.split_failures == 1


def test_bad_run_id_is_refused_with_a_fix(store_root: Path) -> None:
    run = samples.run_info("2026-11-22T02:00", datetime(2026, 11, 22, tzinfo=timezone.utc), [])
    with pytest.raises(StoreError, match="letters, digits"):
        Store(store_root).write_run(run, [], [], [])


# ----------------------------------------------------------------------------- idempotence

def test_rewriting_a_run_id_replaces_its_rows(store_root: Path) -> None:
    store = Store(store_root)
    n1 = samples.night("n1", 2, samples.NIGHT1)
    store.write_run(n1.run, n1.ops, n1.results, n1.models)
    store.write_run(n1.run, n1.ops, n1.results, n1.models)
    assert len(store.results("n1")) == len(n1.results)
    assert len(store.ops("n1")) == len(n1.ops)
    assert run_sql("SELECT count(*) FROM runs", store_root).rows == [(1,)]
    assert run_sql("SELECT count(*) FROM results", store_root).rows == [(len(n1.results),)]
    # again, one day later: the old date partition goes away, nothing doubles
    moved = n1.run.model_copy(update={"started_at": n1.run.started_at + timedelta(days=1)})
    store.write_run(moved, n1.ops, n1.results[:2], n1.models)
    assert [d.parent.name for d in run_dirs(store_root, "results", "n1")] == ["date=2026-11-03"]
    assert run_sql("SELECT count(*) FROM results", store_root).rows == [(2,)]
    assert all(len(os.listdir(d)) == 1 for t in schema.TABLES for d in run_dirs(store_root, t, "n1"))


def test_writer_replaces_a_signature_instead_of_duplicating_it(store_root: Path) -> None:
    store = Store(store_root)
    n1 = samples.night("n1", 2, samples.NIGHT1)
    with store.writer() as w:
        w.start(n1.run)
        w.add_ops(n1.ops)
        w.add_results(n1.results[:3])
        redo = n1.results[0].model_copy(update={"message": "redone", "worker": "w9"})
        w.add_results([redo, *n1.results[3:]])
        assert len(store.results("n1")) == len(n1.results)  # before compaction too
        w.finish(n1.run, n1.models)
    results = {r.signature: r for r in store.results("n1")}
    assert len(results) == len(n1.results) and len(store.results("n1")) == len(n1.results)
    assert results[redo.signature].message == "redone"
    assert store.run("n1").status == "completed"
    assert [len(_files(store_root, t, "n1")) for t in ("runs", "ops", "results", "models")] == [1, 1, 1, 1]


def test_a_compaction_writes_a_big_run_piece_by_piece_and_keeps_every_row_and_count(store_root: Path) -> None:
    store = Store(store_root)
    n1 = samples.night("n1", 2, samples.NIGHT1)
    with store.writer(compaction_chunk_bytes=1) as w:  # every part its own piece
        w.start(n1.run)
        for op in reversed(n1.ops):
            w.add_ops([op])
        for r in n1.results:
            w.add_results([r])
        w.finish(n1.run, n1.models)
    ops_file = pq.ParquetFile(_files(store_root, "ops", "n1")[0])
    assert len(_files(store_root, "ops", "n1")) == 1 and ops_file.metadata.num_row_groups == len(n1.ops)
    # the file is sorted piece by piece; the store reads the run's ops back by model and position
    assert [(o.model, o.position) for o in store.ops("n1")] == sorted((o.model, o.position) for o in n1.ops)
    assert len(store.results("n1")) == len(n1.results)
    whole = Store(store_root / "whole")  # the same run written in one go: the same counts
    whole.write_run(n1.run, n1.ops, n1.results, n1.models)
    assert {m.summary.model: m.counts for m in store.models("n1")} == \
        {m.summary.model: m.counts for m in whole.models("n1")}
    with store.writer() as w:  # a piece big enough for the run: sorted whole, as before
        w.start(n1.run)
        w.finish(n1.run, n1.models)
    keys = [(o.model, o.position) for o in store.ops("n1")]
    assert keys == sorted(keys) and pq.ParquetFile(_files(store_root, "ops", "n1")[0]).metadata.num_row_groups == 1


def test_a_read_of_some_ops_gives_what_the_whole_table_filtered_gives(store_root: Path, monkeypatch) -> None:
    store = Store(store_root)
    n1 = samples.night("n1", 2, samples.NIGHT1)
    with store.writer(compaction_chunk_bytes=1) as w:  # a compacted file of many row groups
        w.start(n1.run)
        for op in n1.ops:
            w.add_ops([op])
        w.add_results(n1.results)
        w.finish(n1.run, n1.models)
    monkeypatch.setattr(files, "READ_BATCH_ROWS", 2)  # a filtered read goes batch by batch: many of them here
    wanted = sorted({o.signature for o in n1.ops if o.signature})[::2]
    every = store.ops("n1")
    assert [(o.model, o.position) for o in store.ops("n1", signatures=wanted)] == \
        [(o.model, o.position) for o in every if o.signature in wanted]
    model = every[0].model
    assert [(o.model, o.position) for o in store.ops("n1", model=model, signatures=wanted)] == \
        [(o.model, o.position) for o in every if o.signature in wanted and o.model == model]
    assert {r.signature for r in store.results("n1", wanted)} == set(wanted) and store.results("n1", []) == []
    one = store.read_table("results", "n1", where=of_signatures(wanted[:1]), columns=["status"])  # where names another
    assert one.column_names == ["status"] and one.num_rows == 1
    # a few columns, from a file written before one of them existed: it reads as nulls
    path = _files(store_root, "results", "n1")[0]
    pq.write_table(pq.read_table(path, partitioning=None).drop_columns(["placements"]), path)
    some = store.read_table("results", "n1", columns=["signature", "placements"])
    assert some.column_names == ["signature", "placements"] and some.column("placements").null_count == len(n1.results)


def test_one_writer_per_run_id(store_root: Path) -> None:
    store = Store(store_root)
    run = samples.night("n1", 2, samples.NIGHT1).run
    with store.writer() as first:
        first.start(run)
        with pytest.raises(StoreError, match="being written by another process"):
            store.writer().start(run)


# ----------------------------------------------------------------------------- crashes

CRASHING_WRITER = textwrap.dedent("""
    import os, signal, sys
    import pyarrow.parquet as pq
    import opbyop_storage.files
    from opbyop_storage.dataset import Store, of_signatures
    from tests import store_samples as samples

    night = samples.night("n1", 2, samples.NIGHT1)
    w = Store(sys.argv[1]).writer()
    w.start(night.run)
    w.add_ops(night.ops)
    for r in night.results[:2]:
        w.add_results([r])

    real_write = pq.write_table

    def dying_write(table, where, **kw):  # the process is killed halfway through writing batch 3
        real_write(table, where, **kw)
        where.seek(0); where.truncate(100); where.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    opbyop_storage.files.pq.write_table = dying_write
    w.add_results([night.results[2]])
""")


def test_crash_mid_write_leaves_no_partial_file_and_the_next_run_completes_it(store_root: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(store_root)], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    results_dir = run_dirs(store_root, "results", "n1")[0]
    leftovers = [p.name for p in results_dir.iterdir() if p.name.startswith(".")]
    assert leftovers and all(".partial" in n for n in leftovers)  # the batch in flight, under a hidden name

    store = Store(store_root)
    night = samples.night("n1", 2, samples.NIGHT1)
    assert {r.signature for r in store.results("n1")} == {r.signature for r in night.results[:2]}
    assert store.skipped == []  # the half-written file is never read
    assert store.run("n1").status == "running"
    assert run_sql("SELECT count(*) FROM results WHERE run_id = 'n1'", store_root).rows == [(2,)]

    with store.writer() as w:  # the same run id again: resumes
        w.start(night.run)
        done = w.completed_signatures()
        assert done == {r.signature for r in night.results[:2]}
        w.add_results([r for r in night.results if r.signature not in done])
        w.finish(night.run, night.models)
    assert not [p for p in results_dir.parent.rglob(".*")]
    assert sorted(r.signature for r in store.results("n1")) == sorted(r.signature for r in night.results)
    assert store.run("n1").status == "completed"
    assert store.run("n1").started_at == night.run.started_at


def test_crash_between_the_renames_of_a_compaction_is_finished_on_restart(store_root: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import opbyop_storage.files as files

    store = Store(store_root)
    night = samples.night("n1", 2, samples.NIGHT1)
    w = store.writer()
    w.start(night.run)
    w.add_ops(night.ops)
    w.add_results(night.results)
    real_rename, calls = os.rename, []

    def rename_then_die(src, dst):  # the first rename (live -> trash) happens, then the process "dies"
        calls.append(src)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        real_rename(src, dst)

    monkeypatch.setattr(files.os, "rename", rename_then_die)
    with pytest.raises(KeyboardInterrupt):
        w.finish(night.run, night.models)
    monkeypatch.setattr(files.os, "rename", real_rename)
    w.close()
    assert run_dirs(store_root, "results", "n1") == []  # absent for now, never half-present

    with store.writer() as again:
        again.start(night.run)
        assert again.completed_signatures() == {r.signature for r in night.results}
        again.finish(night.run, night.models)
    assert len(store.results("n1")) == len(night.results)


# ----------------------------------------------------------------------------- corrupt files

def test_corrupt_file_is_reported_with_its_path_skipped_and_counted(history_store: Store) -> None:
    root = history_store.root
    victim = _files(root, "results", "n1")[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])  # truncated: footer gone
    garbage = _files(root, "ops", "n2")[0].parent / "part-000007-deadbeef.parquet"
    garbage.write_bytes(b"PAR1 this is not parquet at all")

    store = Store(root)
    assert store.results("n1") == []
    assert [s.path for s in store.skipped] == [victim]
    assert len(store.ops("n2")) == len(samples.night("n2", 3, samples.NIGHT2, zoo_night=2).ops)  # other part fine
    assert {s.path for s in store.skipped} == {victim, garbage}
    scan = store.scan()
    assert {s.path for s in scan.skipped} == {victim, garbage}
    assert all(str(s.path) in str(s) for s in scan.skipped)

    result = run_sql("SELECT run_id, count(*) FROM results GROUP BY run_id ORDER BY run_id", root)
    assert result.rows == [("n0", 6), ("n2", 6)]  # the totals leave it out ...
    assert {s.path for s in result.skipped} == {victim, garbage}  # ... and say so


def test_every_field_of_a_ttsim_run_has_its_column_and_comes_back():
    from opbyop_storage.convert import _ttsim_columns, _ttsim_from

    # a new field needs its column (or columns kept apart), or a line saying why it has none
    homes = [set(schema.TTSIM_COLUMNS), set(schema.TTSIM_STORED_APART), set(schema.TTSIM_NOT_STORED)]
    assert set().union(*homes) == set(TtsimRun.model_fields)
    assert sum(len(h) for h in homes) == len(TtsimRun.model_fields)  # each in one home
    run = TtsimRun(outcome=TtsimOutcome.RAN, message="m", op="ttnn.add", seconds=1.5, runner_seconds=1.0,
                   agreement="within_ulps", max_ulps=float("inf"), max_error=2e-9, difference="rounding", pcc=0.99,
                   peak_l1_bytes=1, peak_cb_bytes=2,
                   peak_dram_bytes=3, report="digest", report_error="words")
    assert _ttsim_from(_ttsim_columns(run, "whole_"), "whole_") == run


def test_a_model_is_found_by_every_name_a_user_types_for_it(store_root) -> None:
    store = Store(store_root)
    started = datetime(2026, 11, 29, tzinfo=timezone.utc)
    models = [samples.summary("mymodels.build", []), samples.summary("f64_scale", [], frontend="stablehlo")]
    store.write_run(samples.run_info("names", started, ["mymodels:build", "data/f64_scale.mlir"]), [], [], models)
    assert store.model_named("names", "mymodels:build") == store.model_named("names", "mymodels.build") == "mymodels.build"
    assert store.model_named("names", "tests/data/f64_scale.mlir") == "f64_scale"
    with pytest.raises(StoreError, match="has no model 'gpt2'") as refused:
        store.model_named("names", "gpt2")
    assert "mymodels.build" in refused.value.fix and "package.module:name" in refused.value.fix


def _downgrade_models_to_version_8(root: Path, run_id: str) -> None:
    """Rewrite a run's models files as schema version 8 wrote them: no trace on ttsim's values."""
    for path in _files(root, "models", run_id):
        table = pq.read_table(path, partitioning=None)
        table = table.drop_columns([f.name for f in schema.trace_fields(schema.TRACE_PREFIXES["ttsim"])])
        pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}), schema.VERSION_KEY: b"8"}), path)


def test_models_written_before_the_trace_on_ttsim_was_stored_still_read(history_store: Store) -> None:
    traced = TtsimRun(outcome=TtsimOutcome.RAN, pcc=0.999, accuracy_trace=samples._trace())
    n3 = samples.night("n3", 4, samples.NIGHT2, zoo_night=2)
    n3.models[0].whole.ttsim = traced
    history_store.write_run(n3.run, n3.ops, n3.results, n3.models)
    traces = "SELECT run_id, backend, count(*) FROM accuracy_traces GROUP BY ALL ORDER BY ALL"
    assert run_sql(traces, history_store.root).rows == [
        ("n0", "model", 6), ("n1", "model", 6), ("n2", "model", 6), ("n3", "model", 6), ("n3", "ttsim", 6)]
    # the older runs' files were written before the columns: beside n3's, and then alone
    for run_id in ("n0", "n1", "n2"):
        _downgrade_models_to_version_8(history_store.root, run_id)
    assert run_sql(traces, history_store.root).rows[-1] == ("n3", "ttsim", 6)
    _downgrade_models_to_version_8(history_store.root, "n3")
    store = Store(history_store.root)
    whole = {m.summary.model: m.summary.whole for m in store.models("n3")}["mlp"]
    assert whole.ttsim.pcc == 0.999 and whole.ttsim.accuracy_trace is None and whole.accuracy_trace is not None
    assert run_sql(traces, history_store.root).rows == [
        ("n0", "model", 6), ("n1", "model", 6), ("n2", "model", 6), ("n3", "model", 6)]


def _downgrade_runs_to_version_11(root: Path) -> None:
    """Rewrite every run's runs file as schema version 11 wrote it: no verdict_code."""
    for run_id in ("n0", "n1", "n2"):
        for path in _files(root, "runs", run_id):
            table = pq.read_table(path, partitioning=None).drop_columns(["verdict_code"])
            pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}), schema.VERSION_KEY: b"11"}),
                           path)


def test_a_store_written_before_a_column_was_added_reads_it_as_null_and_its_runs_are_not_reused(
        history_store: Store) -> None:
    _downgrade_runs_to_version_11(history_store.root)
    assert run_sql("SELECT count(*), count(verdict_code) FROM runs", history_store.root).rows == [(3, 0)]
    sigs = [samples.DOT.signature]
    release = samples.compiler("0.1.3").key
    assert lookup_cached(history_store, sigs, release, "p150", "opts-a", samples.CODE) == {}  # made by unknown code
    assert lookup_cached(history_store, sigs, release, "p150", "opts-a", "")  # the query itself runs
