"""The single-op corpus as the unique ops of one analyze run (opbyop.corpus.ops, the `corpus` flow)."""

from __future__ import annotations

import pytest

from opbyop.corpus.ops import MODEL, CorpusSelection, corpus_records, selected, variant
from opbyop.corpus.catalog import cases


def test_shape_variants_add_new_unique_ops_of_the_element_wise_cases_only():
    base = CorpusSelection(ops=["add", "dot_general"], dtypes=["f32"], forms=["args"])
    records, entries = corpus_records(base)
    more, more_entries = corpus_records(base.model_copy(update={"shape_variants": 2}))
    assert [r.model for r in more] == [MODEL] * len(more) and [r.position for r in more] == list(range(len(more)))
    new = set(more_entries) - set(entries)
    assert set(entries) <= set(more_entries) and len(new) == 2  # add at (4, 24) and (5, 24); dot_general has none
    assert {more_entries[s].op for s in new} == {"stablehlo.add"}
    assert {tuple(more_entries[s].shapes[0]) for s in new} == {(4, 24), (5, 24)}


def test_a_case_whose_shapes_differ_has_no_variant_and_a_selection_stops_at_its_limit():
    dot = next(cases(["dot_general"], ["f32"]))
    assert variant(dot, 0) is None
    limited = list(selected(CorpusSelection(shape_variants=3, limit=7)))
    assert len(limited) == 7 and len({e.file for e, _ in limited}) == 7


@pytest.mark.slow
def test_a_compile_only_corpus_run_stores_its_cases_apart_from_full_results(harness, tmp_path, monkeypatch):
    from opbyop_flows.corpus import corpus
    from opbyop.config import ClusterConfig
    from opbyop.records import Stage
    from opbyop_storage.dataset import Store

    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "home"))
    selection = CorpusSelection(ops=["add"], dtypes=["f32"], forms=["args"], limit=3)
    state = corpus(selection=selection, cluster=ClusterConfig(workers=1), run_id="compile-only-1", compile_only=True,
                   return_state=True)
    assert state.is_completed(), state.message
    store = Store(tmp_path / "home" / "store")
    results = store.results("compile-only-1")
    assert len(results) == 3 and {r.depth for r in results} == {Stage.FLATBUFFER}
    assert all(r.device is None and r.golden is None for r in results)
    assert store.run("compile-only-1").options_key.endswith("|compile-only")  # never reused by a full run
    assert [o.position for o in store.ops("compile-only-1", MODEL)] == [0, 1, 2]


def test_a_mesh_selection_yields_that_shapes_collectives_and_nothing_for_dtypes_it_lacks():
    chosen = [e for e, _ in selected(CorpusSelection(ops=["all_reduce"], dtypes=["f32"], mesh="1x2"))]
    assert [(e.op, e.variant, e.mesh) for e in chosen] == [("stablehlo.all_reduce", "sum", "1x2"),
                                                          ("stablehlo.all_reduce", "max", "1x2")]
    records, entries = corpus_records(CorpusSelection(ops=["all_reduce"], dtypes=["f32"], mesh="1x2"))
    assert [r.op_name for r in records] == ["stablehlo.all_reduce"] * 2 and len(entries) == 2
    assert list(selected(CorpusSelection(dtypes=["f64"], mesh="1x2"))) == []  # the multichip catalog has no f64
    assert {e.mesh for e, _ in selected(CorpusSelection(mesh="2x2"))} == {"2x2"}


@pytest.mark.slow
def test_the_nightly_runs_a_mesh_boards_collectives_through_the_fan_out_and_reads_their_coverage(
        harness, tmp_path, monkeypatch):
    from opbyop_flows.nightly import CorpusTarget, NightlyConfig, _run_corpus
    from opbyop.config import ClusterConfig
    from opbyop.records import Status
    from opbyop.workspace import Workspace
    from opbyop_storage.dataset import Store

    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "home"))
    config = tmp_path / "corpus.yaml"
    config.write_text("chips: [p150]\nops: [all_reduce]\ndtypes: [f32]\nmeshes: [p300, nowhere]\n")
    store = Store(Workspace.default().store)
    outcomes = _run_corpus(CorpusTarget(config=str(config)), "night-1", NightlyConfig(models=[]),
                           ClusterConfig(workers=1), store)
    chip, mesh, unknown = outcomes
    assert (chip.chip, chip.state, chip.coverage) == ("p150", "Skipped", None)  # all_reduce is no single-chip case
    assert (mesh.chip, mesh.run_id, mesh.state) == ("p300 1x2", "night-1-corpus-1", "Completed"), mesh.message
    assert unknown.state == "Error" and "nowhere" in unknown.message
    assert store.run("night-1-corpus-1").mesh == "1x2"
    rows = mesh.coverage.rows
    assert sorted(r.label for r in rows) == ["mesh/all_reduce-max-f32-1x2-x.mlir", "mesh/all_reduce-sum-f32-1x2-x.mlir"]
    assert {r.status for r in rows} == {Status.SUCCESS}, [r.message for r in rows]
    assert all(r.golden is not None for r in store.results("night-1-corpus-1"))  # compared on 2 host devices
    assert {op.ttnn_op: op.simulated for op in mesh.coverage.ops}.get("ttnn.all_reduce") is True
