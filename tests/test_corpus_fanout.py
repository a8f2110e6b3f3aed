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


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_a_compile_only_corpus_run_stores_its_cases_apart_from_full_results(harness, tmp_path, monkeypatch):
    from flows.corpus import corpus
    from opbyop.config import ClusterConfig
    from opbyop.records import Stage
    from storage.dataset import Store

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
