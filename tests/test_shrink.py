"""The failing shape boundary: variants of an op, searched with the real compiler and simulated device.

Failing ops here are real failures: tt-mlir refuses stablehlo.cholesky at every size; a ui8
dot_general compiles, but once its sums leave the 8-bit range (inputs are drawn from {0, 1} for
summing 8-bit ops, so about K/4 per output) the device's output differs from XLA:CPU's wrap-around.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from core_fixtures import DATA, file_ops
from opbyop.ir.split import split_module
from opbyop.shrink.result import Outcome
from opbyop.shrink.search import Shrinker
from opbyop.shrink.variants import OpModule, Rejected

DOT_UI8 = textwrap.dedent("""
    module {
      func.func @main(%a: tensor<32x4096xui8>, %b: tensor<4096x32xui8>) -> tensor<32x32xui8> {
        %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<32x4096xui8>, tensor<4096x32xui8>) -> tensor<32x32xui8>
        return %0 : tensor<32x32xui8>
      }
    }
""")


def ops_of(text: str, name: str = "m"):
    from opbyop.ir.dedupe import dedupe

    return [op for op in dedupe(split_module(text, name).ops) if op.op_name != "stablehlo.constant"]


def single(text: str):
    (op,) = ops_of(text)
    return op


def test_tied_dimensions_change_together_and_variants_verify(cnn_graph):
    dot = OpModule(single(DOT_UI8).module_text)
    assert [(d.label, d.size) for d in dot.dimensions] == [("rows (M)", 32), ("contracting (K)", 4096), ("columns (N)", 32)]
    k = dot.dimension("contracting (K)")
    text = dot.variant({k.index: 8})
    assert "tensor<32x8xui8>, tensor<8x32xui8>) -> tensor<32x32xui8>" in text  # both operands, result unchanged
    as_i32 = dot.variant(dtype="i32")
    assert "ui8" not in as_i32 and "tensor<32x4096xi32>" in as_i32

    conv_op = next(op for op in ops_of(cnn_graph.module_text, "cnn") if op.op_name == "stablehlo.convolution")
    conv = OpModule(conv_op.module_text)
    labels = {d.label for d in conv.dimensions}
    assert {"batch", "input channels", "output channels", "input height", "input width"} <= labels
    height = conv.dimension("input height")
    grown = ops_of(conv.variant({height.index: height.size * 2}), "grown")[0]
    assert grown.inputs[0].shape[2] == height.size * 2
    assert grown.outputs[0].shape[2] > conv_op.outputs[0].shape[2]  # the output follows the window arithmetic
    # a variant is an op like any other: splitting its text again gives the same signature
    assert ops_of(grown.module_text, "again")[0].signature == grown.signature != conv_op.signature


def test_a_variant_the_verifier_refuses_is_rejected_not_compiled():
    (op,) = file_ops("cholesky.mlir")
    cholesky = OpModule(op.module_text)
    (matrix,) = cholesky.dimensions  # both axes of the matrix: it must stay square
    assert matrix.label == "matrix size" and len(matrix.axes) == 4
    assert "tensor<2x2xf32>" in cholesky.variant({matrix.index: 2})
    assert cholesky.other_dtypes() == ["bf16", "f16"]
    window = OpModule(textwrap.dedent("""
        module {
          func.func @main(%a: tensor<1x8x8x4xf32>) -> tensor<1x4x4x4xf32> {
            %init = stablehlo.constant dense<0.0> : tensor<f32>
            %0 = "stablehlo.reduce_window"(%a, %init) ({
            ^bb0(%x: tensor<f32>, %y: tensor<f32>):
              %s = stablehlo.add %x, %y : tensor<f32>
              stablehlo.return %s : tensor<f32>
            }) {window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>}
              : (tensor<1x8x8x4xf32>, tensor<f32>) -> tensor<1x4x4x4xf32>
            return %0 : tensor<1x4x4x4xf32>
          }
        }"""))
    spatial = next(d for d in window.dimensions if d.size == 8)
    assert "-> tensor<1x8x4x4xf32>" in window.variant({spatial.index: 16})  # the window's output follows
    with pytest.raises(Rejected, match="empty"):  # an input below the window's size: no output at all
        window.variant({spatial.index: 1})
    sas = OpModule(next(op for op in file_ops("select_and_scatter_arg_init.mlir")).module_text)
    operand_height = next(d for d in sas.dimensions if d.size == 4 and (( -1, 0), 1) in d.axes)
    with pytest.raises(Rejected, match="source"):  # its source would have to change too
        sas.variant({operand_height.index: 8})
    channels = next(d for d in window.dimensions if d.size == 4)  # window 1, stride 1: one dimension in and out
    assert "tensor<1x8x8x8xbf16>" in window.variant({channels.index: 8}, dtype="bf16")
    assert "tensor<bf16>" in window.variant(dtype="bf16")  # the init constant and the body follow the dtype


def test_cholesky_fails_at_every_size_and_dtype_and_each_variant_replays(worker, settings, workspace):
    (op,) = file_ops("cholesky.mlir")
    result = Shrinker(lambda v: worker.analyze(v, settings, 120), workspace.artifacts, workspace.ops.put,
                      budget_s=60).shrink(op)
    assert result.baseline is Outcome.FAIL and result.complete
    assert result.dtypes == {"f32": Outcome.FAIL, "bf16": Outcome.FAIL, "f16": Outcome.FAIL}
    assert {(b.dtype, b.largest_passing) for b in result.boundaries} == {("f32", None), ("bf16", None), ("f16", None)}
    assert all(v.outcome is Outcome.FAIL and "stablehlo.cholesky" in v.message for v in result.variants)
    assert any("fails at every matrix size tried (1..8)" in line for line in result.summary())
    smallest = next(b for b in result.boundaries if b.dtype == "f32")
    assert smallest.smallest_failing == 1
    replay = worker.analyze(workspace.ops.get(smallest.smallest_failing_signature[:16]), settings, 120)
    assert replay.status.value == "compile_failed" and replay.signature == smallest.smallest_failing_signature
    stored = [v for v in result.variants if v.signature]
    assert all(workspace.artifacts.read_text(v.module_artifact) == workspace.ops.get(v.signature).module_text
               for v in stored)


@pytest.mark.slow
def test_the_boundary_of_a_ui8_contraction_replays_on_both_sides(worker, settings, workspace):
    op = single(DOT_UI8)
    result = Shrinker(lambda v: worker.analyze(v, settings, 120), workspace.artifacts, workspace.ops.put,
                      budget_s=120).shrink(op)
    # the compiled program's exact reading differs from XLA: the compiler's lowering, not the chip's numerics
    assert result.baseline is Outcome.FAIL and result.baseline_status.value == "miscompiled"
    assert result.dtypes["i32"] is Outcome.PASS  # the same contraction in i32 matches XLA:CPU
    k = next(b for b in result.boundaries if b.dtype == "ui8" and b.dimension == "contracting (K)")
    assert k.largest_passing is not None and k.smallest_failing is not None
    assert k.largest_passing < k.smallest_failing <= 4096
    assert k.smallest_failing - k.largest_passing == 1  # bisected to adjacent sizes
    for signature, expected in ((k.largest_passing_signature, "success"), (k.smallest_failing_signature,
                                                                             "miscompiled")):
        variant = workspace.ops.get(signature)
        assert variant.inputs[0].shape[1] in (k.largest_passing, k.smallest_failing)
        assert worker.analyze(variant, settings, 120).status.value == expected
    assert f"fails above {k.largest_passing} contracting (K)" in "\n".join(result.summary())


def test_shrinks_are_stored_per_op_under_their_run_and_shown_in_the_report(history_store, tmp_path):
    from opbyop.records import Status, TensorDesc
    from opbyop.shrink.result import ShrinkBoundary, ShrinkResult, ShrinkVariant
    from opbyop_storage.exports.report import report_data

    run_id = history_store.runs()[-1].run_id
    signature = history_store.results(run_id)[0].signature
    variants = [ShrinkVariant(dimension="K", dtype="ui8", size=s, signature=f"{s:064x}", outcome=o,
                              status=Status.SUCCESS if o is Outcome.PASS else Status.GOLDEN_FAILED,
                              inputs=[TensorDesc(shape=(32, s), dtype="ui8")])
                for s, o in ((32, Outcome.FAIL), (16, Outcome.FAIL), (8, Outcome.FAIL), (7, Outcome.PASS))]
    result = ShrinkResult(signature=signature, op_name="stablehlo.dot_general", inputs=[], dtype="ui8",
                          baseline=Outcome.FAIL, baseline_status=Status.GOLDEN_FAILED, variants=variants,
                          boundaries=[ShrinkBoundary(dimension="K", dtype="ui8", size=64, largest_passing=7,
                                                     largest_passing_signature=f"{7:064x}", smallest_failing=8,
                                                     smallest_failing_signature=f"{8:064x}", tried=[7, 8, 16, 32, 64])])
    history_store.write_shrinks(run_id, [result])
    history_store.write_shrinks(run_id, [result])  # again: the op's shrink is replaced, not doubled
    rows = history_store.shrinks(run_id)
    assert len(rows) == 4 and {r["boundary"] for r in rows} == {"largest_passing", "smallest_failing", None}
    assert "fails above 7 K" in rows[0]["summary"]
    (shown,) = report_data(history_store.root, run_id, None)["shrinks"]
    assert shown["signature"] == signature and {b["size"] for b in shown["boundaries"]} == {7, 8}
    other = history_store.runs()[0].run_id
    assert history_store.shrinks(other) == []  # another run, and stores written before the table, read empty


@pytest.mark.slow
def test_the_flow_shrinks_its_failing_ops_when_asked_and_writes_the_manifest(harness, tmp_path, monkeypatch):
    from opbyop_flows.analyze import RunFailed, analyze, new_run_id
    from opbyop.config import AnalysisConfig, ClusterConfig
    from opbyop_storage.dataset import Store
    from opbyop.config import ShrinkOption

    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "home"))
    dot = tmp_path / "dot_ui8.mlir"
    dot.write_text(DOT_UI8)
    config = AnalysisConfig(models=[str(DATA / "cholesky.mlir"), str(dot), "mlp"], whole_model=False,
                            cluster=ClusterConfig(workers=1))
    state = analyze(config=config, run_id=new_run_id(), shrink=ShrinkOption(failing=True, seconds_per_op=20),
                    return_state=True)
    summary = state.result(raise_on_failure=False)
    summary = summary.summary if isinstance(summary, RunFailed) else summary
    store = Store(tmp_path / "home" / "store")
    rows = store.shrinks(summary.run_id)
    shrunk = {r["op_name"] for r in rows}
    assert shrunk == {"stablehlo.cholesky", "stablehlo.dot_general"}  # the failing ops only, not mlp's
    assert any(r["boundary"] == "largest_passing" and r["dimension"] == "contracting (K)" for r in rows)
    assert "shrink" in summary.phases
    manifest = json.loads((tmp_path / "home" / "reports" / f"{summary.run_id}.manifest.json").read_text())
    assert {m["name"] for m in manifest["models"]} == {"cholesky", "dot_ui8", "mlp"}
    html = (tmp_path / "home" / "reports" / f"{summary.run_id}.html").read_text()
    assert 'id="shrinks"' in html and "fails at every matrix size" in html
