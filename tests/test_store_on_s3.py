"""The store on S3-compatible object storage (moto's server on 127.0.0.1): the same Store API, SQL
and catalog as a local directory, batches committed through a manifest, a killed writer harmless."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import duckdb
import pytest
import store_samples as samples
from object_store import S3Server
from pyarrow import fs as pafs

from opbyop.errors import StoreError
from opbyop_storage.catalog import build_catalog
from opbyop_storage.dataset import Store
from opbyop_storage.object_files import MANIFESTS, ObjectFiles
from opbyop_storage.readonly import StoreConnection, run_sql

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
VIEWS = ("runs", "ops", "results", "models", "occurrences", "accuracy_trace")


def _write_history(store: Store) -> None:
    for night in samples.history():
        store.write_run(night.run, night.ops, night.results, night.models)


def _all_rows(root: Path | str, view: str) -> list[tuple]:
    result = run_sql(f"SELECT * FROM {view}", root)
    return sorted(result.rows, key=repr)


def _objects(url: str) -> list[str]:
    files = ObjectFiles(url)
    infos = files.filesystem.get_file_info(pafs.FileSelector(files.base, recursive=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File)


def test_a_history_on_s3_reads_back_and_queries_row_for_row_like_a_local_store(s3_url: str, tmp_path: Path) -> None:
    local, remote = Store(tmp_path / "local"), Store(s3_url)
    _write_history(local)
    _write_history(remote)
    assert remote.root == s3_url
    for night in samples.history():
        run_id = night.run.run_id
        assert remote.run(run_id) == local.run(run_id)
        assert sorted(remote.results(run_id), key=lambda r: r.signature) == \
            sorted(local.results(run_id), key=lambda r: r.signature)
        assert remote.models(run_id) == local.models(run_id)
    for view in VIEWS:
        assert _all_rows(s3_url, view) == _all_rows(local.root, view), view
    described = run_sql("DESCRIBE results", s3_url).rows
    assert described == run_sql("DESCRIBE results", local.root).rows  # same column types, Hive `date` included


def test_a_run_written_in_batches_on_s3_ends_as_one_object_per_table_and_nothing_else(s3_url: str) -> None:
    store, night = Store(s3_url), samples.history()[1]
    with store.writer() as w:
        w.start(night.run)
        w.add_ops(night.ops)
        w.add_results(night.results[:4])
        w.add_results(night.results[2:])  # two results again: they replace the first batch's rows
        assert len(store.results(night.run.run_id)) == len(night.results)
        w.finish(night.run, night.models)
    files = ObjectFiles(s3_url)
    manifest = files.manifest(night.run.run_id)
    assert {t: len(names) for t, names in manifest["tables"].items()} == {"runs": 1, "ops": 1, "results": 1,
                                                                          "models": 1}
    named = {f for t in manifest["tables"] for f in files.data_files(t, night.run.run_id)}
    assert set(_objects(s3_url)) == named | {f"{files.base}/{MANIFESTS}/{night.run.run_id}.json"}
    assert sorted(store.results(night.run.run_id), key=lambda r: r.signature) == \
        sorted(night.results, key=lambda r: r.signature)


def test_a_run_s_writer_on_s3_reads_its_manifest_once_per_start_and_keeps_what_it_wrote(
        s3_server: S3Server, s3_url: str) -> None:
    store, night = Store(s3_url), samples.history()[1]
    manifest = f"{s3_url}/{MANIFESTS}/{night.run.run_id}.json"

    def reads() -> int:  # each read of an object is a HEAD (its size), then a GET of its bytes
        return s3_server.requests("HEAD", manifest)

    with store.writer() as w:
        w.start(night.run)
        assert reads() == 1  # not there yet: the run is new
        w.add_ops(night.ops)
        for i in range(0, len(night.results), 2):
            w.add_results(night.results[i:i + 2])
        w.finish(night.run, night.models)
        assert reads() == 1  # every batch and the compaction: from what the writer last wrote
    assert len(Store(s3_url).results(night.run.run_id)) == len(night.results)  # another reader reads it
    assert reads() == 2
    with Store(s3_url).writer() as other:  # another writer, once the first let go, changes the run ...
        other.start(night.run)
        other.add_results(night.results[:1])
    before = reads()
    with store.writer() as w:  # ... and the first one's next start reads the manifest that one wrote
        w.start(night.run)
        assert reads() == before + 1
        w.add_results(night.results[1:2])
        w.finish(night.run, night.models)
        assert reads() == before + 1
    assert sorted(Store(s3_url).results(night.run.run_id), key=lambda r: r.signature) == \
        sorted(night.results, key=lambda r: r.signature)


KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys
    from tests import store_samples as samples
    from opbyop_storage.dataset import Store
    from opbyop_storage.object_files import ObjectFiles

    url, kill_at = sys.argv[1], sys.argv[2]
    commit, commits = ObjectFiles._commit, []

    def killing_commit(self, run_id, day, table, change):
        # SIGKILL after the object is uploaded and before the manifest names it
        if table == "results":
            commits.append(change)
            compaction = any(v is None for v in change.values())
            if (kill_at == "batch" and len(commits) == 3) or (kill_at == "compaction" and compaction):
                os.kill(os.getpid(), signal.SIGKILL)
        return commit(self, run_id, day, table, change)

    ObjectFiles._commit = killing_commit
    night = samples.history()[1]
    with Store(url).writer() as w:
        w.start(night.run)
        w.add_ops(night.ops)
        for i in range(0, len(night.results), 2):
            w.add_results(night.results[i:i + 2])
        w.finish(night.run, night.models)
""")


@pytest.mark.parametrize("kill_at, visible", [("batch", 4), ("compaction", 6)])
def test_a_writer_killed_mid_batch_leaves_readers_whole_batches_and_its_resume_cleans_up(
        s3_url: str, kill_at: str, visible: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", KILLED_WRITER, s3_url, kill_at], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    night = samples.history()[1]
    run_id = night.run.run_id
    store = Store(s3_url)
    results = store.results(run_id)
    assert len(results) == visible  # whole batches only: 2 of 3 committed, or every batch before compaction
    assert {r.signature for r in results} == {r.signature for r in night.results[:visible]}
    assert run_sql("SELECT count(*) FROM results", s3_url).rows == [(visible,)]
    files = ObjectFiles(s3_url)
    named = {f for t in ("runs", "ops", "results") for f in files.data_files(t, run_id)}
    orphans = [o for o in _objects(s3_url) if o not in named and MANIFESTS not in o]
    assert len(orphans) == 1 and "/results/" in orphans[0]  # the upload the manifest never named

    with store.writer() as w:
        w.start(night.run)  # the resume deletes what no manifest names
        assert w.completed_signatures() == {r.signature for r in night.results[:visible]}
        w.add_results([r for r in night.results if r.signature not in w.completed_signatures()])
        w.finish(night.run, night.models)
    assert [o for o in _objects(s3_url) if MANIFESTS not in o] == sorted(
        f for t in ("runs", "ops", "results", "models") for f in files.data_files(t, run_id))
    assert run_sql("SELECT count(*) FROM results", s3_url).rows == [(len(night.results),)]


def test_readers_during_a_run_on_s3_see_only_whole_batches(s3_url: str) -> None:
    night, size, batches = samples.history()[1], 5, 8
    results = [night.results[i % len(night.results)].model_copy(update={"signature": f"{i:064x}"})
               for i in range(size * batches)]
    seen: list[int] = []
    failure: list[BaseException] = []

    def write() -> None:
        try:
            with Store(s3_url).writer() as w:
                w.start(night.run)
                for i in range(batches):
                    w.add_results(results[i * size:(i + 1) * size])
                w.finish(night.run, night.models)
        except BaseException as e:  # re-raised below, in the test's thread
            failure.append(e)

    writer = threading.Thread(target=write)
    writer.start()
    while writer.is_alive():
        seen.append(Store(s3_url).read_table("results").num_rows)
    writer.join()
    assert not failure, failure
    seen.append(run_sql("SELECT count(*) FROM results", s3_url).rows[0][0])
    assert all(n % size == 0 for n in seen), seen  # never part of a batch, during batches or compaction
    assert len(set(seen)) > 2 and seen[-1] == size * batches


def test_a_connection_opened_before_a_compaction_answers_from_the_objects_that_replaced_its_own(
        s3_url: str) -> None:
    store, night = Store(s3_url), samples.history()[1]
    with store.writer() as w:
        w.start(night.run)
        w.add_results(night.results[:3])
        with StoreConnection(s3_url) as con:
            w.add_results(night.results[3:])
            w.finish(night.run, night.models)  # deletes the part objects the connection's views name
            assert con.query("SELECT count(*) FROM results").rows == [(len(night.results),)]


def test_a_corrupt_object_is_left_out_of_queries_and_named_with_its_path(s3_url: str) -> None:
    _write_history(Store(s3_url))
    files = ObjectFiles(s3_url)
    (broken,) = files.data_files("results", "n1")
    with files.filesystem.open_output_stream(str(broken)) as f:  # replaced behind the store's back
        f.write(b"PAR1 not parquet at all")
    result = run_sql("SELECT DISTINCT run_id FROM results ORDER BY 1", s3_url)
    assert result.column("run_id") == ["n0", "n2"]
    assert [str(s.path) for s in result.skipped] == [str(broken)]
    with pytest.raises(StoreError, match="corrupt"):
        Store(s3_url).check_readable("n1")


def test_the_catalog_of_an_s3_store_is_uploaded_beside_it_and_opens_anywhere(s3_url: str, tmp_path: Path) -> None:
    _write_history(Store(s3_url))
    url = build_catalog(s3_url)
    assert url == f"{s3_url}/opbyop.duckdb"
    local = tmp_path / "catalog.duckdb"
    files = ObjectFiles(s3_url)
    with files.filesystem.open_input_stream(f"{files.base}/opbyop.duckdb") as src:
        local.write_bytes(src.read())
    con = duckdb.connect(str(local), read_only=True)  # no S3 credentials or extension needed: rows are inside
    try:
        assert con.execute("SELECT count(DISTINCT run_id) FROM results").fetchone() == (3,)
        assert con.execute("SELECT count(*) FROM occurrences WHERE status IS NOT NULL").fetchone()[0] > 0
    finally:
        con.close()


def test_opbyop_sql_and_runs_read_an_s3_store_named_by_opbyop_store(s3_url: str, tmp_path: Path) -> None:
    _write_history(Store(s3_url))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPBYOP_STORE": s3_url}
    opbyop = Path(sys.executable).parent / "opbyop"
    out = subprocess.run([str(opbyop), "sql", "SELECT run_id, count(*) AS n FROM results GROUP BY run_id "
                          "ORDER BY run_id", "--format", "json"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"run_id": "n0", "n": 6}, {"run_id": "n1", "n": 6}, {"run_id": "n2", "n": 6}]
    runs = subprocess.run([str(opbyop), "runs", "--store", s3_url], env=env, capture_output=True, text=True,
                          timeout=120)
    assert runs.returncode == 0 and "n2" in runs.stdout, runs.stderr


def test_a_store_in_a_bucket_that_does_not_exist_is_an_error_naming_the_bucket(s3_url: str) -> None:
    with pytest.raises(StoreError, match="no-such-bucket") as e:
        Store("s3://no-such-bucket/x").runs()
    assert "AWS_ENDPOINT_URL" in e.value.fix


ANALYSED = ("SELECT o.model, o.position, o.op_name, o.signature, r.status, r.depth, r.failed_stage, r.message, "
            "r.pcc, r.max_abs_error, r.cycles, r.ttnn_ops FROM ops o JOIN results r USING (run_id, signature) "
            "ORDER BY o.model, o.position")


def _opbyop(*args: str, env: dict[str, str]) -> str:
    opbyop = Path(sys.executable).parent / "opbyop"
    done = subprocess.run([str(opbyop), *args], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout


def test_an_analyze_run_on_an_s3_store_gives_the_same_rows_as_on_a_local_store(s3_url: str, tmp_path: Path) -> None:
    """The flow (its own Prefect server and Dask cluster) writes the run, the catalog and the report to
    the object store; `opbyop sql` reads back what a local store holds for the same run."""
    base = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    base.pop("OPBYOP_STORE", None)
    local_env = {**base, "OPBYOP_HOME": str(tmp_path / "local")}
    s3_env = {**base, "OPBYOP_HOME": str(tmp_path / "s3"), "OPBYOP_STORE": s3_url}
    for env in (local_env, s3_env):
        _opbyop("analyze", "jax-mlp", "--no-whole", "--run-id", "same", env=env)
    on_s3 = json.loads(_opbyop("sql", ANALYSED, "--format", "json", env=s3_env))
    assert on_s3 == json.loads(_opbyop("sql", ANALYSED, "--format", "json", env=local_env))
    assert len(on_s3) == 8 and {r["status"] for r in on_s3} == {"success"}
    assert not (tmp_path / "s3" / "store").exists()  # nothing of the store on the flow's disk
    objects = _objects(s3_url)
    base_key = ObjectFiles(s3_url).base
    assert f"{base_key}/reports/same.html" in objects and f"{base_key}/opbyop.duckdb" in objects


def test_opbyop_nightly_on_an_s3_store_stores_its_target_run_there(s3_url: str, tmp_path: Path) -> None:
    config = tmp_path / "nightly.yaml"
    config.write_text("models: [jax-mlp]\ntargets: [{chip: p150}]\nwhole_model: false\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "OPBYOP_", "JAX_"))}
    env.update({"PYTHONPATH": str(ROOT), "PREFECT_HOME": str(tmp_path / "prefect"), "COLUMNS": "200",
                "OPBYOP_HOME": str(tmp_path / "home"), "OPBYOP_STORE": s3_url})
    out = _opbyop("nightly", "--config", str(config), "--workers", "1", env=env)
    assert "nightly: Completed" in out, out
    (run,) = [r for r in Store(s3_url).runs() if r.run_id.endswith("-t0")]
    assert run.status.value == "completed"
    assert {r.status.value for r in Store(s3_url).results(run.run_id)} == {"success"}
    assert f"{ObjectFiles(s3_url).base}/reports/{run.run_id}.html" in _objects(s3_url)
    assert not (tmp_path / "home" / "store").exists()
