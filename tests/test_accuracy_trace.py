"""Where a whole model loses accuracy: each op on the device against XLA:CPU's run of the whole model."""

from __future__ import annotations

import re
from concurrent.futures import Future

import numpy as np
import pytest
from core_fixtures import DATA

from opbyop.analysis.accuracy_trace import TaggedModule, TraceObserver, finish_trace, tag_module
from opbyop.analysis.analyzer import trace_references
from opbyop.config import CompilerOptions
from opbyop.device.program import Op, load_program
from opbyop.golden.compare import finite_pcc, pcc
from opbyop.records import Status, TtsimOutcome


def test_every_op_gets_its_own_location_and_the_copy_for_xla_returns_every_intermediate():
    tagged = tag_module((DATA / "tanh_matmul_chain.mlir").read_text())
    assert 'loc("opbyop.0"' in tagged.text and 'loc("opbyop.11"' in tagged.text
    assert tagged.traced == list(range(12)) and tagged.outputs == 1
    assert tagged.producers[3] == [2] and tagged.consumers[2] == [3]
    assert tagged.all_outputs_text.count("tensor<32x64xf32>") > tagged.text.count("tensor<32x64xf32>")


def test_a_lofi_chain_names_the_op_where_its_accuracy_starts_to_fall(worker, settings):
    from opbyop.frontends.loader import load_stablehlo_file

    graph = load_stablehlo_file(DATA / "tanh_matmul_chain.mlir")
    lofi = worker.analyze_whole(graph, settings.model_copy(update={"options": CompilerOptions(math_fidelity="lofi")}))
    assert lofi.status is Status.GOLDEN_FAILED  # the whole model fails ...
    trace = lofi.accuracy_trace
    assert [p.position for p in trace.points] == list(range(12))  # ... every op was compared along its depth
    first = trace.first_below
    assert first is not None and 0 < first < 11 and trace.first_below_op in ("stablehlo.tanh", "stablehlo.dot_general")
    assert all(p.pcc >= trace.pcc_threshold for p in trace.points[:first]) and trace.points[first].below_threshold
    assert trace.points[-1].pcc < trace.points[first].pcc  # and it keeps falling after
    assert trace.most_added and all(trace.points[i].added_loss > 0 for i in trace.most_added)

    exact = worker.analyze_whole(graph, settings)  # the compiler's default fidelity: it passes, op by op too
    assert exact.status is Status.SUCCESS and exact.accuracy_trace.first_below is None
    assert min(p.pcc for p in exact.accuracy_trace.points) >= exact.accuracy_trace.pcc_threshold


def test_a_fused_activation_is_compared_with_the_op_it_computes(worker, settings, mlp_graph):
    result = worker.analyze_whole(mlp_graph, settings)
    trace = result.accuracy_trace
    assert result.status is Status.SUCCESS and trace.first_below is None and len(trace.points) > 20
    # the compiler fuses the relu (stablehlo.maximum) into the bias add: that ttnn.add is the maximum's value
    assert any(p.op_name == "stablehlo.maximum" and p.ttnn_op == "ttnn.add" for p in trace.points)


def test_the_trace_can_be_turned_off(worker, settings, mlp_graph):
    assert worker.analyze_whole(mlp_graph, settings.model_copy(update={"accuracy_trace": "off"})).accuracy_trace is None


def test_the_trace_s_pcc_of_finite_values_is_the_golden_check_s_pcc():
    rng = np.random.default_rng(0)
    want = rng.standard_normal(100_000) * 50 + 1000  # a large mean: the centring must come first
    cases = [(want + rng.standard_normal(want.size) * s, want) for s in (1e-3, 1.0, 100.0)]
    cases += [(-want, want), (np.full(8, 3.0), np.full(8, 3.0)), (np.full(8, 3.0), np.arange(8.0)),
              (want[:1], want[:1])]
    for got, expected in cases:
        assert finite_pcc(got, expected) == pytest.approx(pcc(got, expected), abs=1e-12)


def test_an_op_whose_device_value_holds_nan_is_compared_as_the_golden_check_compares_it():
    want = np.random.default_rng(1).standard_normal((16, 32)).astype(np.float32)
    got = want.copy()
    got[3, 4] = np.nan
    tagged = TaggedModule(text="", all_outputs_text="", ops={0: ("stablehlo.add", want.shape, "x.py:1")}, traced=[0])
    observer = TraceObserver(tagged, {0: want}, 0.99)
    observer(Op(name="ttnn.add", operands=[0], results=[1], operand_types=[None], result_types=[None], attrs={},
                location='loc("opbyop.0"("x.py":1:1))'), [got])
    (point,) = observer.compare().values()
    assert point.pcc == pcc(got, want) == 0.0 and point.below_threshold and np.isnan(point.max_abs_error)


def test_an_op_whose_last_ttnn_step_reorders_its_value_is_compared_in_its_own_shape():
    """A max pool's TTNN ops end with its NHWC output cast for the convolution after it: the same
    size as the pool's NCHW value, not its order. The value in the pool's own shape is the one compared."""
    want = np.random.default_rng(2).standard_normal((1, 4, 3, 3)).astype(np.float32)
    tagged = TaggedModule(text="", all_outputs_text="", ops={0: ("stablehlo.reduce_window", want.shape, "x.py:1")},
                          traced=[0])
    observer = TraceObserver(tagged, {0: want}, 0.99)
    location = 'loc("opbyop.0"("x.py":1:1))'
    for name, value in (("ttnn.permute", want), ("ttnn.typecast", want.transpose(0, 2, 3, 1).reshape(1, 1, 9, 4))):
        observer(Op(name=name, operands=[0], results=[1], operand_types=[None], result_types=[None], attrs={},
                    location=location), [value])
    (point,) = observer.compare().values()
    assert point.ttnn_op == "ttnn.permute" and point.pcc == 1.0 and not point.below_threshold


def test_the_whole_model_s_seconds_include_what_its_accuracy_trace_added(worker, settings, mlp_graph):
    result = worker.analyze_whole(mlp_graph, settings)
    trace = result.accuracy_trace
    assert result.status is Status.SUCCESS and trace.message is None and trace.points
    assert 0 < trace.seconds <= result.seconds  # XLA:CPU's run (beside the device's) and the comparisons


def test_an_xla_run_that_failed_leaves_the_model_untraced_and_says_why():
    tagged = tag_module((DATA / "tanh_matmul_chain.mlir").read_text())
    failed: Future = Future()
    failed.set_exception(RuntimeError("out of host memory"))
    observer, outputs, note = trace_references(failed, TraceObserver(tagged, {}, 0.99), tagged, None)
    assert observer is None and outputs is None
    trace = finish_trace(tagged, observer, note, 0.99)
    assert not trace.points and "every intermediate" in trace.message and "out of host memory" in trace.message


@pytest.mark.slow
def test_on_ttsim_the_ops_of_a_const_eval_function_are_traced_as_the_models_own_trace_traces_them(
        worker, workspace, on_ttsim, ttsim_ready):
    """A weight computed from constants runs once, in a const-eval function: ttsim sends its ops'
    outputs back too, so the trace on ttsim's values compares the same ops as the model's."""
    from opbyop.frontends.loader import load_stablehlo_file

    whole = worker.analyze_whole(load_stablehlo_file(DATA / "const_eval_weight.mlir"), on_ttsim)
    run = whole.ttsim
    assert run is not None and run.outcome is TtsimOutcome.RAN, run.message if run else whole.message
    program = load_program(workspace.artifacts.read_text(whole.compile.artifacts["ttnn_runtime"]))
    tags = {name: {int(n) for op in function.ops for n in re.findall(r"opbyop\.(\d+)", op.location)}
            for name, function in program.functions.items()}
    hoisted = set().union(*(t for name, t in tags.items() if name != program.entry)) - tags[program.entry]
    model, trace = whole.accuracy_trace, run.accuracy_trace
    assert trace is not None and trace.message is None
    assert [p.position for p in trace.points] == [p.position for p in model.points]
    # among them the weight's scaling, computed in @main_const_eval_0 alone (the matmul and add: in @main)
    assert [p.op_name for p in trace.points if p.position in hoisted] == ["stablehlo.multiply"]
    assert trace.first_below is None and len(trace.points) > 1


@pytest.mark.slow
@pytest.mark.parametrize("graph", ["cnn_graph", "mlp_graph"])
def test_a_zoo_models_trace_names_the_same_ops_on_the_model_and_on_ttsim(request, worker, on_ttsim, ttsim_ready, graph):
    """The trace exists to name where a model loses accuracy, whichever device computed the values:
    the first op below the threshold is the same op on both, and every op of the matrix engine (its
    convolutions blocked and summed as tt-metal's conv2d sums them, its matmuls) has the same values
    on both, so the same pcc and largest error."""
    whole = worker.analyze_whole(request.getfixturevalue(graph), on_ttsim)
    assert whole.ttsim is not None and whole.ttsim.outcome is TtsimOutcome.RAN, whole.ttsim
    model, ttsim = whole.accuracy_trace, whole.ttsim.accuracy_trace
    assert ttsim is not None and len(ttsim.points) > 10
    assert [(p.position, p.ttnn_op) for p in ttsim.points] == [(p.position, p.ttnn_op) for p in model.points]
    assert ttsim.first_below == model.first_below
    engine = [(m, t) for m, t in zip(model.points, ttsim.points)
              if m.op_name in ("stablehlo.convolution", "stablehlo.dot_general")]
    assert engine
    for on_model, on_ttsim_ in engine:  # the same values (pcc's own f64 sums may order them apart: 1e-14)
        assert on_ttsim_.max_abs_error == on_model.max_abs_error, on_model.position
        assert on_ttsim_.pcc == pytest.approx(on_model.pcc, abs=1e-12), on_model.position
