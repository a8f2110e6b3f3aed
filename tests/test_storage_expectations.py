"""Expected depths: validation, comparison both ways, regeneration from a run."""

from __future__ import annotations

from pathlib import Path

import pytest
import store_samples as samples
import yaml

from opbyop.errors import ConfigError
from opbyop.records import Stage
from opbyop_storage.dataset import Store
from opbyop_storage.expectations import (
    Expectation,
    Expectations,
    compare,
    default_path,
    from_outcomes,
    load_expectations,
    outcomes,
    run_outcomes,
    save_expectations,
)


def test_checked_in_file_is_valid() -> None:
    assert load_expectations(default_path()).default_depth is Stage.GOLDEN


@pytest.mark.parametrize("entry, problem", [
    ({"depth": "TTIR"}, "exactly one of signature or op_kind"),
    ({"signature": "abc", "depth": "TTIR"}, "signature"),
    ({"op_kind": "stablehlo.add", "depth": "DEEP"}, "depth"),
    ({"op_kind": "stablehlo.add", "signature": "0123456789abcdef", "depth": "TTIR"}, "exactly one"),
])
def test_invalid_entries_are_refused_with_the_field_named(tmp_path: Path, entry: dict, problem: str) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "expectations": [entry]}))
    with pytest.raises(ConfigError, match=problem):
        load_expectations(path)


def test_signature_prefix_beats_op_kind_and_longest_prefix_wins() -> None:
    sig = samples.CONV.signature
    e = Expectations(expectations=[
        Expectation(op_kind="stablehlo.convolution", depth=Stage.TTNN),
        Expectation(signature=sig[:8], depth=Stage.TTIR),
        Expectation(signature=sig[:12], depth=Stage.FLATBUFFER),
    ])
    assert e.expected(sig, "stablehlo.convolution") is Stage.FLATBUFFER
    assert e.expected("0" * 64, "stablehlo.convolution") is Stage.TTNN
    assert e.expected("0" * 64, "stablehlo.add") is Stage.GOLDEN


def test_run_reports_unexpected_failures_and_unexpected_passes(history_store: Store) -> None:
    expected_from_n1 = from_outcomes(outcomes(history_store.results("n1")))
    n2 = run_outcomes(history_store.root, "n2")
    assert sorted(n2, key=lambda o: o.signature) == sorted(
        outcomes(history_store.results("n2"), history_store.ops("n2")), key=lambda o: o.signature)
    report = compare("n2", n2, expected_from_n1)
    failures = {m.op_name: m for m in report.unexpected_failures}
    passes = {m.op_name: m for m in report.unexpected_passes}
    assert set(failures) == {"stablehlo.tanh", "stablehlo.gather"}  # regressed; new and failing
    assert failures["stablehlo.tanh"].expected is Stage.GOLDEN and failures["stablehlo.tanh"].actual is Stage.DEVICE_RUN
    assert failures["stablehlo.gather"].rule == "default"
    assert set(passes) == {"stablehlo.dot_general"}  # expected TTIR, got to GOLDEN
    assert passes["stablehlo.dot_general"].models == ["mlp"] and passes["stablehlo.dot_general"].occurrences == 2
    assert report.checked == 6 and report.matched == 3 and not report.ok
    same = compare("n1", run_outcomes(history_store.root, "n1"), expected_from_n1)
    assert same.ok and same.matched == 6


def test_update_groups_whole_op_kinds_and_keeps_hand_written_reasons(tmp_path: Path) -> None:
    kinds = [samples.OpSpec(f"c{i}", "stablehlo.cholesky", (f"{i + 2}x{i + 2}xf32",), (f"{i + 2}x{i + 2}xf32",))
             for i in range(3)]
    results = [samples.result(k, samples.Status.COMPILE_FAILED, samples.Stage.TTIR, "no lowering") for k in kinds]
    results += [samples.result(samples.ADD, samples.Status.SUCCESS),
                samples.result(samples.DOT, samples.Status.RUN_FAILED, message="L1 overflow")]
    previous = Expectations(expectations=[Expectation(op_kind="stablehlo.cholesky", depth=Stage.SPLIT,
                                                      reason="tt-mlir has no decomposition (issue 123)")])
    updated = from_outcomes(outcomes(results), previous)
    assert [(e.op_kind, e.signature, e.depth) for e in updated.expectations] == [
        ("stablehlo.cholesky", None, Stage.STABLEHLO),
        (None, samples.DOT.signature[:16], Stage.FLATBUFFER)]
    assert updated.expectations[0].reason == "tt-mlir has no decomposition (issue 123)"
    path = save_expectations(updated, tmp_path / "expectations.yaml")
    assert load_expectations(path) == updated
    assert path.read_text().startswith("# Expected depth")


def test_opbyops_own_gaps_are_neither_unexpected_failures_nor_new_expectations() -> None:
    gap = samples.result(samples.TANH, samples.Status.NOT_SIMULATED, samples.Stage.DEVICE_RUN,
                         "not simulated: ttnn.tanh")
    bug = samples.result(samples.DOT, samples.Status.ANALYZER_ERROR, samples.Stage.DEVICE_RUN, "simulator error")
    report = compare("r", outcomes([gap, bug, samples.result(samples.ADD, samples.Status.SUCCESS)]), Expectations())
    assert report.ok and report.matched == 1 and report.not_compared == 2
    assert {m.op_name for m in report.not_judged} == {"stablehlo.tanh", "stablehlo.dot_general"}
    previous = Expectations(expectations=[Expectation(signature=samples.TANH.signature[:16], depth=Stage.TTIR,
                                                      reason="known")])
    assert from_outcomes(outcomes([gap, bug]), previous).expectations == previous.expectations
