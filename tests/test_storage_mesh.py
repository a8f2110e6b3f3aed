"""Mesh runs in the dataset: per-chip peaks and collectives survive a round trip, and SQL reads them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import store_samples as samples
from opbyop.records import CollectiveRun, Status
from opbyop_storage import Store


def _mesh_result():
    result = samples.result(samples.DOT, Status.SUCCESS).model_copy(deep=True)
    result.device = result.device.model_copy(update={
        "mesh_shape": [1, 2], "topology": "linear", "chip_peak_l1_bytes": [4096, 8192],
        "chip_peak_dram_bytes": [1 << 20, 1 << 21], "collective_bytes": 16384, "collective_cycles": 1100,
        "collective_seconds": 0.0125, "collectives": [CollectiveRun(op="ttnn.all_reduce", cluster_axis=1, group_size=2, payload_bytes=16384,
                                      link_bytes=16384, hops=1, cycles=1100)]})
    return result


def test_a_mesh_run_round_trips_with_its_chips_and_collectives(store_root: Path) -> None:
    mesh, single = _mesh_result(), samples.result(samples.ADD, Status.SUCCESS)
    store = Store(store_root)
    store.write_run(samples.run_info("mesh", datetime(2026, 11, 24, tzinfo=UTC), ["mlp"]), [],
                    [mesh, single], [])
    back = {r.signature: r for r in store.results("mesh")}
    assert back[mesh.signature] == mesh
    assert back[single.signature].device.mesh_shape == [] and back[single.signature].device.collectives == []


def _store_with_mesh_run(store_root: Path) -> tuple[Store, object]:
    mesh, single = _mesh_result(), samples.result(samples.ADD, Status.SUCCESS)
    ops = [samples.record("mlp", 0, samples.DOT), samples.record("mlp", 1, samples.ADD)]
    store = Store(store_root)
    store.write_run(samples.run_info("mesh", datetime(2026, 11, 24, tzinfo=UTC), ["mlp"]), ops,
                    [mesh, single], [samples.summary("mlp", ops)])
    return store, mesh


def test_the_mesh_collectives_query_lists_only_ops_that_ran_on_a_mesh(store_root: Path) -> None:
    from opbyop_storage.aggregate import run_query
    from opbyop_storage.readonly import StoreConnection

    store, mesh = _store_with_mesh_run(store_root)
    with StoreConnection(store.root) as con:
        rows = run_query(con, "mesh_collectives", run_id="mesh").records()
    assert [(r["signature"], r["mesh"], r["topology"], r["collectives"], r["collective_bytes"],
             r["max_chip_peak_dram_bytes"]) for r in rows] == \
        [(mesh.signature, "1x2", "linear", ["ttnn.all_reduce"], 16384, 1 << 21)]


def test_report_and_optest_show_a_mesh_runs_collectives(store_root: Path) -> None:
    from opbyop_storage.exports import optest
    from opbyop_storage.exports.report import report_data

    store, _ = _store_with_mesh_run(store_root)
    data = report_data(store.root, "mesh")
    assert [r["collective_cycles"] for r in data["mesh_ops"]] == [1100]
    tests = {t.op_name: t for t in optest.optests_for_run(store, "mesh")}
    config = tests["stablehlo.dot_general"].config
    assert config["mesh_shape"] == [1, 2] and config["collectives"][0]["op"] == "ttnn.all_reduce"
    assert "mesh_shape" not in tests["stablehlo.add"].config
