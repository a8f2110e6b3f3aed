"""The nightly aggregation SQL on the three-night history of store_samples (see its comments)."""

from __future__ import annotations

import pytest
import store_samples as samples

from opbyop_storage.aggregate import nightly, previous_run_id, run_query
from opbyop_storage.dataset import Store
from opbyop_storage.queries import load_queries
from opbyop_storage.readonly import StoreConnection


@pytest.fixture
def con(history_store: Store):
    with StoreConnection(history_store.root) as c:
        yield c


def _by(rows: list[dict], *keys: str) -> dict:
    return {tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]: r for r in rows}


def test_every_query_file_loads_with_its_parameters() -> None:
    queries = load_queries()
    assert {"depth_histogram", "blockers", "op_pass_rate", "kind_depth_matrix", "regressions", "progressions",
            "new_ops", "removed_ops", "trend", "top_failures"} <= set(queries)
    assert set(queries["regressions"].params) == {"run_id", "prev_run_id"}
    assert set(queries["trend"].params) == {"runs"}  # derived from run_id and n by run_query
    assert all(q.description for q in queries.values())


def test_previous_run_is_the_last_completed_one_of_the_same_chip_and_options(con: StoreConnection) -> None:
    assert previous_run_id(con, "n2") == "n1"
    assert previous_run_id(con, "n1") is None  # n0 ran on n150


def test_depth_histogram_per_model(con: StoreConnection) -> None:
    rows = run_query(con, "depth_histogram", run_id="n1").records()
    got = {(r["model"], r["depth"]): r["occurrences"] for r in rows}
    assert got == {("mlp", "TTIR"): 2, ("mlp", "GOLDEN"): 4,
                   ("cnn", "SPLIT_FAILED"): 1, ("cnn", "TTIR"): 1, ("cnn", "FLATBUFFER"): 2,
                   ("cnn", "DEVICE_RUN"): 1, ("cnn", "GOLDEN"): 1}
    cnn = [r["depth"] for r in rows if r["model"] == "cnn"]
    assert cnn == ["SPLIT_FAILED", "TTIR", "FLATBUFFER", "DEVICE_RUN", "GOLDEN"]  # pipeline order


def test_blockers_are_weighted_by_occurrences_in_each_model(con: StoreConnection) -> None:
    rows = run_query(con, "blockers", run_id="n1").records()
    got = [(r["model"], r["op_name"], r["occurrences"]) for r in rows]
    assert got[0] == ("cnn", "stablehlo.convolution", 2)  # heaviest first within a model
    assert set(got[1:3]) == {("cnn", "stablehlo.reduce", 1), ("cnn", "stablehlo.sort", 1)}
    assert got[3:] == [("mlp", "stablehlo.dot_general", 2)]
    by = _by(rows, "model", "op_name")
    assert by[("mlp", "stablehlo.dot_general")]["share_of_model"] == pytest.approx(2 / 6, abs=1e-4)
    assert by[("cnn", "stablehlo.convolution")]["failed_stage"] == "DEVICE_RUN"
    assert by[("cnn", "stablehlo.convolution")]["depth"] == "FLATBUFFER"
    assert ("cnn", "stablehlo.add") not in by and ("mlp", "stablehlo.tanh") not in by


def test_pass_rate_across_models_and_runs(con: StoreConnection) -> None:
    rows = _by(run_query(con, "op_pass_rate", run_id="n2", n=2).records(), "op_name")
    # add: in mlp and cnn, both nights, always passing; dot: mlp only, failed n1, passed n2
    assert (rows["stablehlo.add"]["model_runs"], rows["stablehlo.add"]["passes"]) == (4, 4)
    assert rows["stablehlo.add"]["models"] == 2
    assert rows["stablehlo.dot_general"]["pass_rate"] == pytest.approx(0.5)
    assert rows["stablehlo.convolution"]["pass_rate"] == 0
    assert rows["stablehlo.gather"]["runs"] == 1
    only_last = _by(run_query(con, "op_pass_rate", run_id="n2", n=1).records(), "op_name")
    assert only_last["stablehlo.dot_general"]["pass_rate"] == 1 and "stablehlo.sort" not in only_last


def test_kind_depth_matrix(con: StoreConnection) -> None:
    rows = _by(run_query(con, "kind_depth_matrix", run_id="n1").records(), "op_name")
    assert rows["stablehlo.add"]["golden"] == 1 and rows["stablehlo.add"]["occurrences"] == 4
    assert rows["stablehlo.dot_general"]["ttir"] == 1 and rows["stablehlo.dot_general"]["golden"] == 0
    assert rows["stablehlo.convolution"]["flatbuffer"] == 1 and rows["stablehlo.convolution"]["occurrences"] == 2
    assert sum(r["unique_ops"] for r in rows.values()) == 6


def test_regressions_progressions_new_and_removed(con: StoreConnection) -> None:
    s = nightly(con, "n2")
    assert s.previous_run_id == "n1"
    reg = s.regressions.records()
    assert [(r["op_name"], r["previous_depth"], r["depth"]) for r in reg] == [
        ("stablehlo.tanh", "GOLDEN", "DEVICE_RUN")]
    assert reg[0]["models"] == ["mlp"] and reg[0]["occurrences"] == 1
    prog = s.progressions.records()
    assert [(r["op_name"], r["previous_depth"], r["depth"]) for r in prog] == [
        ("stablehlo.dot_general", "TTIR", "GOLDEN")]
    assert prog[0]["occurrences"] == 2
    assert [r["op_name"] for r in s.new_ops.records()] == ["stablehlo.gather"]
    assert [r["op_name"] for r in s.removed_ops.records()] == ["stablehlo.sort"]
    # conv went run_failed -> timeout at the same depth: neither
    assert "stablehlo.convolution" not in {r["op_name"] for r in reg + prog}
    reverse = nightly(con, "n1", previous="n2")
    assert [r["op_name"] for r in reverse.regressions.records()] == ["stablehlo.dot_general"]


def test_trend_over_the_last_runs_of_the_same_chip(con: StoreConnection) -> None:
    rows = run_query(con, "trend", run_id="n2", n=30).records()
    assert [r["run_id"] for r in rows] == ["n1", "n2"]  # n0 is another chip
    n1, n2 = rows
    assert (n1["unique_ops"], n1["unique_golden"]) == (6, 2)
    assert (n2["unique_ops"], n2["unique_golden"]) == (6, 2)  # add, dot
    assert (n1["occurrences"], n1["occurrences_golden"]) == (12, 5)
    assert (n2["occurrences"], n2["occurrences_golden"]) == (12, 6)
    assert [r["run_id"] for r in run_query(con, "trend", run_id="n2", n=1).records()] == ["n2"]
    models = run_query(con, "model_trend", run_id="n2", n=30).records()
    assert [(r["model"], r["run_id"], r["golden_share"]) for r in models if r["model"] == "mlp"] == [
        ("mlp", "n1", pytest.approx(4 / 6, abs=1e-4)), ("mlp", "n2", pytest.approx(5 / 6, abs=1e-4))]


def test_top_failures_group_messages_that_differ_only_in_shapes_and_addresses(con: StoreConnection) -> None:
    rows = run_query(con, "top_failures", run_id="n1", limit=10).records()
    top = rows[0]
    # dot (4x32xf32 at 0x7f3a, 2 occurrences in mlp) and sort (8x16xi32 at 0x11ff, once in cnn)
    assert top["pattern"] == "error: failed to legalize <shape> at <addr>"
    assert (top["unique_ops"], top["occurrences"], top["models"]) == (2, 3, 2)
    assert top["failed_stage"] == "TTNN"
    assert top["op_names"] == ["stablehlo.dot_general", "stablehlo.sort"]
    assert sum(r["unique_ops"] for r in rows) == 4  # every failed unique op, in exactly one group
    assert run_query(con, "top_failures", run_id="n1", limit=1).rows == run_query(
        con, "top_failures", run_id="n1", limit=10).rows[:1]


def test_nightly_summary_notes_skipped_files(history_store: Store) -> None:
    victim = next((history_store.root / "models").rglob("part-*.parquet"))
    victim.write_bytes(b"garbage")
    with StoreConnection(history_store.root) as c:
        s = nightly(c, "n2")
    assert [x.path for x in s.skipped] == [victim]
    assert samples.ADD.signature  # history intact otherwise
