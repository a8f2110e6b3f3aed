"""DuckDB over the dataset: read-only queries, the catalog file, the cross-run cache lookup."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
import store_samples as samples

from opbyop.errors import StoreError
from opbyop.records import Stage, Status
from opbyop_storage.aggregate import previous_run_id, run_query
from opbyop_storage import cache
from opbyop_storage.cache import lookup_cached
from opbyop_storage.catalog import build_catalog
from opbyop_storage.dataset import Store
from opbyop_storage.message_pattern import macro_sql, message_pattern
from opbyop_storage.readonly import StoreConnection, check_read_only, run_sql

CODE = samples.CODE  # the opbyop code the sample runs were made by


@pytest.mark.parametrize("statement", [
    "INSERT INTO runs SELECT * FROM runs",
    "CREATE TABLE t AS SELECT 1",
    "COPY (SELECT * FROM results) TO '/tmp/out.csv'",
    "ATTACH '/tmp/other.duckdb'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "PRAGMA enable_profiling",
    "SET enable_external_access = true",
    "DROP VIEW results",
    "UPDATE runs SET status = 'x'",
    "DELETE FROM runs",
    "CALL pragma_version()",
    "EXPORT DATABASE '/tmp/dump'",
    "SELECT 1; DROP VIEW runs",
])
def test_writes_and_outside_access_are_refused(history_store: Store, statement: str) -> None:
    with pytest.raises(StoreError, match="read-only") as info:
        run_sql(statement, history_store.root)
    assert info.value.fix and "SELECT" in info.value.fix
    assert run_sql("SELECT count(*) FROM runs", history_store.root).rows == [(3,)]  # nothing changed


def test_file_access_inside_a_select_is_refused_by_duckdb(history_store: Store, tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    with pytest.raises(StoreError, match="refused by DuckDB"):
        run_sql(f"SELECT * FROM read_csv('{secret}')", history_store.root)


@pytest.mark.parametrize("query", [
    "SELECT run_id FROM runs ORDER BY run_id",
    "WITH r AS (SELECT * FROM runs) SELECT run_id FROM r ORDER BY 1",
    "FROM runs SELECT run_id ORDER BY run_id",
])
def test_queries_are_allowed(history_store: Store, query: str) -> None:
    assert run_sql(query, history_store.root).column("run_id") == ["n0", "n1", "n2"]
    check_read_only("DESCRIBE results")
    check_read_only("EXPLAIN SELECT * FROM ops")


def test_views_expose_typed_columns_and_helpers(history_store: Store) -> None:
    with StoreConnection(history_store.root) as con:
        types = dict(con.query("SELECT column_name, column_type FROM (DESCRIBE results)").rows)
        assert types["started_at"] == "TIMESTAMP WITH TIME ZONE"
        assert types["placements"].startswith("STRUCT(ttnn_op VARCHAR, grid BIGINT[]") and types["placements"].endswith("[]")
        assert types["stablehlo_s"] == "DOUBLE" and types["date"] == "DATE"
        occ = con.query("SELECT depth, count(*) FROM occurrences WHERE run_id = 'n1' AND model = 'mlp' "
                        "GROUP BY depth ORDER BY depth").rows
        assert occ == [("GOLDEN", 4), ("TTIR", 2)]
        placements = con.query("SELECT placements[1].grid FROM results WHERE run_id = 'n1' AND status = 'success' LIMIT 1")
        assert placements.rows == [([2, 4],)]


def test_empty_store_has_empty_typed_views(store_root: Path) -> None:
    result = run_sql("SELECT count(*), min(started_at) FROM results", store_root)
    assert result.rows == [(0, None)]


def test_catalog_file_opens_in_a_fresh_duckdb(history_store: Store, tmp_path: Path) -> None:
    path = build_catalog(history_store.root, tmp_path / "cat" / "opbyop.duckdb")
    con = duckdb.connect(str(path), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM results").fetchone() == (18,)
        assert con.execute("SELECT count(*) FROM occurrences WHERE split_error IS NOT NULL").fetchone() == (3,)
        assert con.execute("SELECT message_pattern('at 0x1f for 4x32xf32')").fetchone() == (
            message_pattern("at 0x1f for 4x32xf32"),)
    finally:
        con.close()
    assert not list(path.parent.glob(".*"))


@pytest.mark.parametrize("message", [
    "error: failed to legalize 4x32xf32 at 0x7f3a",
    'loc("/home/me/model.py":12:3): error: \'ttnn.conv2d\' op 1x3x224x224xbf16 vs 4x32 %arg0 1.5e-3',
    "  line one 12\nline two 13", "", None, "operand 40000x40000xf32 at 0x7f3a too big",
])
def test_sql_message_pattern_matches_python(message: str | None) -> None:
    con = duckdb.connect()
    con.execute(macro_sql())
    assert con.execute("SELECT message_pattern($m::VARCHAR)", {"m": message}).fetchone()[0] == message_pattern(message)


def test_a_shape_whose_dims_end_in_zero_is_a_shape_not_an_address() -> None:
    assert message_pattern("operand 40000x40000xf32 at 0x7f3a, 0x10") == "operand <shape> at <addr>, <addr>"


def test_a_build_that_says_the_same_version_is_never_served_anothers_results(history_store: Store) -> None:
    sigs = [o.signature for o in (samples.ADD, samples.DOT, samples.CONV, samples.SORT, samples.GATHER)]
    local = samples.compiler("0.1.3").model_copy(update={"library_sha256": samples.sha("my own build of 0.1.3")})
    assert lookup_cached(history_store, sigs, samples.compiler("0.1.3").key, "p150", "opts-a", CODE)
    assert lookup_cached(history_store, sigs, local.key, "p150", "opts-a", CODE) == {}


@pytest.mark.parametrize("run_rows_bytes", [cache.RUN_ROWS_BYTES, 0], ids=["runs read whole", "rows fetched per ask"])
def test_cache_lookup_returns_the_latest_reusable_result(history_store: Store, run_rows_bytes: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "RUN_ROWS_BYTES", run_rows_bytes)
    sigs = [o.signature for o in (samples.ADD, samples.DOT, samples.CONV, samples.SORT, samples.GATHER)]
    hits = lookup_cached(history_store, sigs + ["f" * 64], compiler=samples.compiler("0.1.3").key, chip="p150",
                         options_key="opts-a", verdict_code=CODE)
    assert hits[samples.DOT.signature][0] == "n2" and hits[samples.DOT.signature][1].status is Status.SUCCESS
    assert hits[samples.ADD.signature][0] == "n1"  # n2 reused it: the origin is named
    assert hits[samples.CONV.signature][0] == "n1"  # n2 timed out: never reused
    assert hits[samples.CONV.signature][1].status is Status.RUN_FAILED
    assert hits[samples.SORT.signature][0] == "n1" and samples.GATHER.signature in hits
    assert "f" * 64 not in hits
    got = hits[samples.DOT.signature][1]
    expected = next(r for r in samples.history()[2].results if r.signature == samples.DOT.signature)
    assert got == expected  # the full record, rebuilt from DuckDB's rows
    release = samples.compiler("0.1.3").key
    assert lookup_cached(history_store, sigs, samples.compiler("0.1.4").key, "p150", "opts-a", CODE) == {}
    assert lookup_cached(history_store, sigs, release, "p150", "opts-b", CODE) == {}
    n150 = lookup_cached(history_store, sigs, release, "n150", "opts-a", CODE)
    assert {run for run, _ in n150.values()} == {"n0"}
    excluded = lookup_cached(history_store, sigs, release, "p150", "opts-a", CODE, exclude_run="n2")
    assert excluded[samples.DOT.signature][1].status is Status.COMPILE_FAILED


def test_results_made_by_other_opbyop_code_are_never_reused(history_store: Store) -> None:
    """A changed device model or comparison makes other verdicts: an earlier run's results are kept
    for the code that made them (opbyop.run.verdict_code), as whole models are."""
    sigs = [o.signature for o in (samples.ADD, samples.DOT, samples.CONV, samples.SORT, samples.GATHER)]
    release = samples.compiler("0.1.3").key
    assert lookup_cached(history_store, sigs, release, "p150", "opts-a", CODE)
    assert lookup_cached(history_store, sigs, release, "p150", "opts-a", "another code") == {}
    assert lookup_cached(history_store, sigs, release, "p150", "opts-a", "") == {}  # nor by a run that records none


def test_outcomes_without_a_verdict_are_never_reused(history_store: Store) -> None:
    gap = samples.night("n3", 4, {**samples.NIGHT2, "dot": (Status.NOT_SIMULATED, Stage.DEVICE_RUN, "not simulated")},
                        zoo_night=2)
    history_store.write_run(gap.run, gap.ops, gap.results, gap.models)
    hits = lookup_cached(history_store, [samples.DOT.signature], samples.compiler("0.1.3").key, "p150", "opts-a", CODE)
    assert hits[samples.DOT.signature][0] == "n2"  # n3's not_simulated is skipped: n2's success is reused


def test_the_previous_night_is_the_last_run_of_the_same_build_as_named(store_root) -> None:
    """A night of `newest` follows the last `newest` whatever it resolved to, never the installed build's
    run of the same night; runs stored before builds were named count as the installed one."""
    store = Store(store_root)
    nights = [("old", 1, "installed", "0.1.3"), ("n1", 2, "newest", "0.1.2"), ("i2", 3, "installed", "0.1.3"),
              ("n2", 3, "newest", "0.1.3")]
    for run_id, day, spec, version in nights:
        run = samples.night(run_id, day, samples.NIGHT1)
        identity = samples.compiler(version).model_copy(update={"spec": spec})
        store.write_run(run.run.model_copy(update={"compiler": identity}), run.ops, run.results, run.models)
    with StoreConnection(store.root) as con:
        assert previous_run_id(con, "n2") == "n1"
        assert previous_run_id(con, "i2") == "old"
        assert run_query(con, "window_runs", run_id="n2", n=10).column("run_id") == ["n2", "n1"]
