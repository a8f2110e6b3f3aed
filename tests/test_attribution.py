"""Whose fault is a wrong number, on real compiled programs: the compiler's lowering (miscompiled),
the chip's numerics (golden_failed, named), or opbyop's simulator (simulator_error). Real compiler,
real simulator, real XLA:CPU; scatters and gathers with dimensions before and after the indexed
one, and JAX's fori_loop, end to end."""

from __future__ import annotations

import numpy as np
import pytest
from core_fixtures import DATA

from opbyop.analysis.attribution import first_divergence, judge
from opbyop.config import CompilerOptions
from opbyop.device.reference import read_program
from opbyop.device.runtime import Binary
from opbyop.device.simulator import DeviceSimulator
from opbyop.golden.compare import DtypeThreshold, Thresholds, compare, verdict
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.pipeline import prepare
from opbyop.records import Fault, Status


def results_of(workspace, worker, settings, name: str) -> dict[str, object]:
    run = prepare([str(DATA / name)], artifacts=workspace.artifacts)
    return {op.op_name: (op, worker.analyze(op, settings)) for op in run.unique}


def test_a_scatter_add_on_the_middle_dimension_matches_xla(workspace, worker, settings):
    """int32 operand 3x5x4 scattered on dimension 1 (tt-mlir's ttnn.rows_scatter with index vectors
    shared by the 3 leading rows): max abs error 8 before the kernel read (pre, sizes, rest)."""
    (_, result) = results_of(workspace, worker, settings, "scatter_add_middle_dim.mlir")["stablehlo.scatter"]
    assert result.status is Status.SUCCESS, result.message
    assert "ttnn.rows_scatter" in workspace.artifacts.read_text(result.compile.artifacts["ttnn_runtime"])


def test_a_gather_with_dimensions_before_and_after_the_indexed_one_matches_xla(workspace, worker, settings):
    (_, result) = results_of(workspace, worker, settings, "gather_middle_dim.mlir")["stablehlo.gather"]
    assert result.status is Status.SUCCESS, result.message
    assert "ttnn.rows_gather" in workspace.artifacts.read_text(result.compile.artifacts["ttnn_runtime"])


def test_a_jax_fori_loop_runs_op_by_op_and_whole(workspace, worker, settings):
    """fori_loop lowers to a counted ttcore.while_loop (initial/limit/step, no condition program)."""
    (_, result) = results_of(workspace, worker, settings, "jax_fori_loop.mlir")["stablehlo.while"]
    assert result.status is Status.SUCCESS, result.message
    program = workspace.artifacts.read_text(result.compile.artifacts["ttnn_runtime"])
    assert "limit = #ttcore.loop_bound<3>" in program and "condition_program" not in program
    from opbyop.frontends.loader import load_stablehlo_file

    whole = worker.analyze_whole(load_stablehlo_file(DATA / "jax_fori_loop.mlir"), settings)
    assert whole.status is Status.SUCCESS, whole.message


def test_a_value_lost_to_narrowing_is_the_compilers_finding(workspace, worker, settings):
    (_, result) = results_of(workspace, worker, settings, "wide_constant_and_nan_max.mlir")["stablehlo.add"]
    assert result.status is Status.MISCOMPILED and result.status.fault is Fault.COMPILER
    assert "i64 compiled as si32: value 1099511627776 not representable" in result.message
    assert result.narrowing and "not representable" in result.narrowing


def test_the_chips_numerics_are_named_when_both_exact_readings_match_xla(workspace, worker, settings):
    """A LoFi matmul judged at tight tolerances: the program and the simulator's kernels are right,
    the multiplier's fidelity is what XLA's value does not survive."""
    tight = Thresholds(default=DtypeThreshold(pcc=0.99, atol=1e-4, rtol=1e-4, require_allclose=True))
    lofi = settings.model_copy(update={"thresholds": tight, "options": CompilerOptions(math_fidelity="lofi")})
    (_, result) = results_of(workspace, worker, lofi, "dot_f32_lofi.mlir")["stablehlo.dot_general"]
    assert result.status is Status.GOLDEN_FAILED, result.message
    assert result.message.startswith("the chip's numerics (") and "lofi" in result.message
    assert "first at ttnn.matmul" in result.message
    assert "not allclose" in result.message or "pcc" in result.message


RANDOM = np.random.default_rng(7)
SCATTER_INPUTS = [RANDOM.integers(-9, 10, (3, 5, 4)).astype(np.int32), np.array([[1], [3]], np.int32),
                  RANDOM.integers(-9, 10, (3, 2, 4)).astype(np.int32)]
SCATTER_ADD = (DATA / "scatter_add_middle_dim.mlir").read_text().replace(
    '%indices = stablehlo.constant dense<[[1], [3]]> : tensor<2x1xi32>\n', "").replace(
    "%updates: tensor<3x2x4xi32>", "%indices: tensor<2x1xi32>, %updates: tensor<3x2x4xi32>")


def test_a_program_that_computes_another_value_is_miscompiled_at_its_op():
    """A rows_scatter that keeps the maximum where the StableHLO scatter adds: the program's exact
    reading leaves XLA's value at that op."""
    binary = Binary.load((DATA / "ttnn_rows_scatter_max.mlir").read_text())
    expected = XlaCpu().run(SCATTER_ADD, SCATTER_INPUTS)
    simulator = DeviceSimulator()
    device, _ = simulator.run_binary(binary, SCATTER_INPUTS)
    failure = compare(device, expected, ["i32"], Thresholds())
    assert not failure.passed
    judgment = judge(binary, SCATTER_INPUTS, expected, ["i32"], Thresholds(), simulator, verdict(failure))
    assert judgment.status is Status.MISCOMPILED
    assert "exact reading differs from XLA" in judgment.message and "leaves XLA's value at ttnn.rows_scatter" in judgment.message


@pytest.mark.parametrize("dump", ["ttnn_rows_scatter_max.mlir", "ttnn_while_loop.mlir", "ttnn_case.mlir"])
def test_the_simulator_without_chip_numerics_reads_every_op_as_the_reference_does(dump):
    binary = Binary.load((DATA / dump).read_text())
    inputs = [RANDOM.integers(0, 2, t.shape).astype(np.int32) if t.dtype == "si32" else
              RANDOM.uniform(-2, 2, t.shape).astype(np.float32) for t in binary.program.main.argument_types]
    if dump == "ttnn_rows_scatter_max.mlir":
        inputs = SCATTER_INPUTS
    trace: dict = {}
    outputs, _ = DeviceSimulator().run_binary(binary, inputs, chip_numerics=False, trace=trace)
    reading = read_program(binary.program, inputs)
    assert trace and first_divergence(trace, reading.trace) is None
    assert compare(outputs, reading.outputs, [str(o.dtype) for o in outputs], Thresholds()).passed


def test_the_first_op_where_two_readings_part_is_named():
    """The scatter-add program run without chip numerics, against the reading of the same program
    with a max scatter: they part at the rows_scatter, not before."""
    add = Binary.load((DATA / "ttnn_rows_scatter_max.mlir").read_text().replace("reduce_type<max>", "reduce_type<sum>"))
    trace: dict = {}
    DeviceSimulator().run_binary(add, SCATTER_INPUTS, chip_numerics=False, trace=trace)
    other = read_program(Binary.load((DATA / "ttnn_rows_scatter_max.mlir").read_text()).program, SCATTER_INPUTS)
    assert first_divergence(trace, other.trace).name == "ttnn.rows_scatter"


def test_a_nan_mismatch_is_counted_never_reported_as_no_error():
    """maximum(NaN, x) folded to x by a compiler: XLA keeps the NaN, the device has numbers."""
    failure = compare([np.array([1.0, 2.0, 3.0])], [np.array([np.nan, np.nan, 3.0])], ["f32"], Thresholds())
    message = verdict(failure)
    assert not failure.passed and message.startswith("output mismatch: XLA has 2 NaN where the device has numbers")
    assert "max abs error 0" not in message
    extra = compare([np.array([np.nan, 2.0, np.inf])], [np.array([1.0, 2.0, 3.0])], ["f32"], Thresholds())
    assert "1 NaN where XLA has none" in verdict(extra) and "1 inf where XLA has a finite value" in verdict(extra)


def test_a_convolution_whose_compiled_padding_leaves_no_output_is_a_run_failure_naming_the_padding(
        workspace, worker, settings):
    """A 1-D transposed convolution (a vocoder's upsampler: lhs_dilate 8, pad 11) compiles to
    ttnn.conv_transpose2d with padding [4, 0, 4, 0]: read as tt-metal reads four values (top, bottom,
    left, right) its width-1 image has no output. The device's verdict, in words that name the
    padding, never an exception in opbyop's simulator."""
    (_, result) = results_of(workspace, worker, settings, "conv_transpose1d_upsampler.mlir")["stablehlo.convolution"]
    assert result.status is Status.RUN_FAILED and result.status.fault is Fault.DEVICE, result.message
    assert "padding [4, 0, 4, 0]" in result.message
    assert "leaves a 68x-3 output of the 8x1 input" in result.message
