"""One op, one verdict, the right cause: what lands on an op is that op's doing, and its status
says whose fault it is. Real compiler, real simulator, real XLA:CPU."""

from __future__ import annotations

import numpy as np
import pytest

from core_fixtures import DATA
from opbyop.golden import upstream
from opbyop.golden.compare import Thresholds, compare
from opbyop.ir.dense import parse_dense
from opbyop.ir.rewrite import rewritten_text
from opbyop.ir.split import split_module
from opbyop.pipeline import prepare
from opbyop.records import Fault, OperandKind, Stage, Status


def prepared(workspace, *names: str):
    return prepare([str(DATA / n) for n in names], artifacts=workspace.artifacts)


def by_kind(prepared_run, op_name: str):
    return [op for op in prepared_run.unique if op.op_name == op_name]


@pytest.fixture(scope="module")
def chain(workspace):
    return prepared(workspace, "constant_fed_chain.mlir")


@pytest.fixture(scope="module")
def chain_results(chain, worker, settings):
    return {op.signature: worker.analyze(op, settings) for op in chain.unique}


def test_a_crashing_op_in_a_constant_fed_program_is_the_only_crashed_op(chain, chain_results):
    (sas,) = by_kind(chain, "stablehlo.select_and_scatter")
    (sliced,) = by_kind(chain, "stablehlo.slice")
    assert chain_results[sas.signature].status is Status.CRASHED
    assert "initValue_" in chain_results[sas.signature].message  # tt-mlir's own words
    assert chain_results[sliced.signature].status is Status.SUCCESS
    assert [r.status for r in chain_results.values()].count(Status.CRASHED) == 1


def test_an_op_module_holds_that_op_and_constant_forming_chains_only(chain):
    (sliced,) = by_kind(chain, "stablehlo.slice")
    (multiply,) = by_kind(chain, "stablehlo.multiply")
    (sas,) = by_kind(chain, "stablehlo.select_and_scatter")
    assert "select_and_scatter" not in sliced.module_text and "while" not in multiply.module_text
    assert [o.kind for o in sliced.operands] == [OperandKind.COMPUTED]
    assert {o.kind for o in multiply.operands} == {OperandKind.COMPUTED, OperandKind.CONSTANT}
    # the init value is computed (an add), so it is an argument: constants themselves stay inside
    assert [o.kind for o in sas.operands] == [OperandKind.CONSTANT, OperandKind.CONSTANT, OperandKind.COMPUTED]


def test_computed_arguments_get_their_real_values(chain, workspace):
    (sliced,) = by_kind(chain, "stablehlo.slice")
    (multiply,) = by_kind(chain, "stablehlo.multiply")
    (value,) = upstream.load(sliced, workspace.artifacts).values()
    # select_and_scatter puts each source value on its 2x2 window's maximum (5, 7, 9 and 8)
    assert value[0, :, :, 0].tolist() == [[0, 1, 0, 0], [0, 0, 2, 0], [0, 0, 0, 4], [3, 0, 0, 0]]
    (loop,) = [v for v in upstream.load(multiply, workspace.artifacts).values()]
    assert loop.tolist() == [8.0, 16.0, 24.0, 32.0]  # three doublings of [1, 2, 3, 4]


def test_an_op_after_a_loop_is_judged_without_the_loop(chain, chain_results):
    (multiply,) = by_kind(chain, "stablehlo.multiply")
    (loop,) = by_kind(chain, "stablehlo.while")
    assert chain_results[multiply.signature].status is Status.SUCCESS
    # the loop is judged on its own: passed, or a gap of the simulator, never the compiler's failure
    assert chain_results[loop.signature].status in (Status.SUCCESS, Status.NOT_SIMULATED)
    assert "ttcore.while_loop" not in (chain_results[multiply.signature].message or "")


GATHER_BY_COMPUTED_INDICES = """module {
  func.func @main(%table: tensor<10x4xf32>) -> tensor<3x4xf32> {
    %iota = stablehlo.iota dim = 0 : tensor<3x1xi64>
    %seven = stablehlo.constant dense<7> : tensor<3x1xi64>
    %ids = stablehlo.add %iota, %seven : tensor<3x1xi64>
    %0 = "stablehlo.gather"(%table, %ids) <{dimension_numbers = #stablehlo.gather<offset_dims = [1],
      collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false,
      slice_sizes = array<i64: 1, 4>}> : (tensor<10x4xf32>, tensor<3x1xi64>) -> tensor<3x4xf32>
    return %0 : tensor<3x4xf32>
  }
}"""


def test_gather_indices_computed_from_constants_keep_their_real_range(tmp_path, workspace):
    path = tmp_path / "gather.mlir"
    path.write_text(GATHER_BY_COMPUTED_INDICES)
    run = prepare([str(path)], artifacts=workspace.artifacts)
    (gather,) = by_kind(run, "stablehlo.gather")
    assert upstream.load(gather, workspace.artifacts)[1].reshape(-1).tolist() == [7, 8, 9]


CALLEE_IN_LOOP = """module {
  func.func private @double(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %x, %x : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
  func.func @main() -> tensor<4xf32> {
    %start = stablehlo.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
    %i0 = stablehlo.constant dense<0> : tensor<i32>
    %r:2 = stablehlo.while(%i = %i0, %acc = %start) : tensor<i32>, tensor<4xf32>
      cond {
        %two = stablehlo.constant dense<2> : tensor<i32>
        %lt = stablehlo.compare LT, %i, %two : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %lt : tensor<i1>
      } do {
        %one = stablehlo.constant dense<1> : tensor<i32>
        %n = stablehlo.add %i, %one : tensor<i32>
        %m = func.call @double(%acc) : (tensor<4xf32>) -> tensor<4xf32>
        stablehlo.return %n, %m : tensor<i32>, tensor<4xf32>
      }
    %1 = stablehlo.negate %r#1 : tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}"""


def test_functions_called_inside_an_op_travel_with_its_module(tmp_path, workspace, worker, compile_only):
    path = tmp_path / "callee.mlir"
    path.write_text(CALLEE_IN_LOOP)
    run = prepare([str(path)], artifacts=workspace.artifacts)
    assert not run.errors and not any(r.split_error for r in run.records)
    (loop,) = by_kind(run, "stablehlo.while")
    assert "func.func private @double" in loop.module_text
    (negate,) = by_kind(run, "stablehlo.negate")
    assert upstream.load(negate, workspace.artifacts)[0].tolist() == [4.0, 8.0, 12.0, 16.0]
    result = worker.analyze(loop, compile_only)
    assert "does not reference a valid function" not in (result.message or "")


def test_constants_of_every_element_type_split_and_serialise(workspace):
    run = prepared(workspace, "complex_and_wide_constants.mlir", "testdata_abs_bf16.mlir")
    assert not run.errors and not any(r.split_error for r in run.records)
    for split in run.splits.values():
        split.model_validate_json(split.model_dump_json())  # what split --json and the workers send
    values = {op.attributes["value"]["type"]: op.attributes["value"] for op in by_kind(run, "stablehlo.constant")}
    assert values["tensor<2xcomplex<f32>>"]["values"] == [[1.0, 2.0], [3.0, -4.0]]
    assert values["tensor<2xui64>"]["values"] == [1, 18446744073709551615]
    assert values["tensor<3xi1>"]["values"] == [True, False, True]
    assert len(values["tensor<20x20xbf16>"]["sha256"]) == 64


def test_hex_encoded_constants_are_read_exactly():
    bf16 = parse_dense('dense<"0x' + "803F" * 400 + '"> : tensor<20x20xbf16>')
    assert bf16.shape == (20, 20) and bf16.dtype.name == "bfloat16" and float(bf16.astype(np.float32).sum()) == 400
    assert parse_dense('dense<0xFF800000> : tensor<2xf32>').tolist() == [-np.inf, -np.inf]  # bit pattern
    assert parse_dense('dense<"0x0100000000000000FFFFFFFFFFFFFFFF"> : tensor<2xui64>').tolist() == [1, 2**64 - 1]
    assert parse_dense('dense<[(1.0,2.0), (3.0,-4.0)]> : tensor<2xcomplex<f32>>').tolist() == [1 + 2j, 3 - 4j]


def test_test_harness_checks_are_skipped_and_leave_the_whole_model(workspace, worker, settings):
    run = prepared(workspace, "testdata_abs_bf16.mlir")
    (check,) = by_kind(run, "stablehlo.custom_call")
    result = worker.analyze(check, settings)
    assert result.status is Status.SKIPPED and "test-harness check @check.expect_close" in result.message
    assert result.status.fault is Fault.NONE and not result.status.is_verdict
    whole = rewritten_text((DATA / "testdata_abs_bf16.mlir").read_text())
    assert "check.expect_close" not in whole and "-> tensor<20x20xbf16>" in whole  # returns what it checked


def test_dtype_narrowing_is_named_in_its_own_field(workspace, worker, settings):
    run = prepared(workspace, "complex_and_wide_constants.mlir")
    results = {op.signature: (op, worker.analyze(op, settings)) for op in run.unique}
    narrowed = [r for op, r in results.values() if r.narrowing and "i64" in r.narrowing]
    assert narrowed and any("value -9223372036854775808 not representable" in r.narrowing for r in narrowed)
    for op, r in results.values():
        if op.op_name == "stablehlo.negate" and op.outputs[0].dtype == "complex<f32>":
            assert r.status is Status.SUCCESS  # complex: the device's (re, im) pairs compared as complex
        if op.outputs[0].dtype == "ui64":
            assert "differs from golden shape" not in (r.message or "")  # two 32-bit words, read as one


@pytest.mark.parametrize("device, golden, dtype, passed, method", [
    (np.array([True]), np.array(True), "i1", True, "exact"),  # rank 0 on the device is 1 element
    (np.array([[1.5]], dtype=np.float32), np.array(1.5, dtype=np.float32), "bf16", True, "allclose"),
    (np.array([[1.0, 2.0], [3.0, -4.0]], np.float32), np.array([1 + 2j, 3 - 4j], np.complex64), "complex<f32>",
     True, "pcc"),
    (np.array([[1, 0], [4294967295, 4294967295]], np.uint32), np.array([1, 2**64 - 1], np.uint64), "ui64", True,
     "exact"),
    (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32), "f32", True, "exact"),
    (np.full(8, 2.0, np.float32), np.full(8, 2.0, np.float32), "f32", True, "allclose"),  # a constant output
    (np.full(8, 2.5, np.float32), np.full(8, 2.0, np.float32), "f32", False, "allclose"),
    (np.array([1, 2, 3], np.int32), np.array([1, 2, 4], np.int64), "i64", False, "exact"),
])
def test_outputs_are_compared_like_with_like(device, golden, dtype, passed, method):
    comparison = compare([device], [golden], [dtype], Thresholds())
    assert (comparison.passed, comparison.method) == (passed, method)


def test_a_real_shape_difference_is_a_device_failure_naming_both_shapes():
    comparison = compare([np.zeros((3, 2))], [np.zeros((2, 3))], ["f32"], Thresholds())
    assert not comparison.passed and comparison.message == "device output shape (3, 2) differs from golden shape (2, 3)"


def test_every_status_says_whose_fault_it_is():
    assert {s.fault for s in (Status.COMPILE_FAILED, Status.CRASHED, Status.TIMEOUT, Status.MISCOMPILED)} == {
        Fault.COMPILER}
    assert {s.fault for s in (Status.RUN_FAILED, Status.GOLDEN_FAILED)} == {Fault.DEVICE}
    assert {s.fault for s in (Status.NOT_SIMULATED, Status.ANALYZER_ERROR, Status.SIMULATOR_ERROR)} == {Fault.OPBYOP}
    assert Status.INFRA_ERROR.fault is Fault.INFRA
    assert Status.FRONTEND_FAILED.fault is Fault.FRONTEND
    assert [s for s in Status if s.is_verdict] == [Status.SUCCESS, Status.COMPILE_FAILED, Status.CRASHED,
                                                   Status.TIMEOUT, Status.RUN_FAILED, Status.GOLDEN_FAILED,
                                                   Status.FRONTEND_FAILED, Status.MISCOMPILED]


@pytest.mark.slow
def test_a_bug_in_opbyop_is_an_analyzer_error_not_a_crash(clean_env, workspace_root, p150, mlp_ops, settings):
    from opbyop.worker.process import OpWorker

    op = next(o for o in mlp_ops if o.op_name == "stablehlo.add")
    clean_env.setenv("OPBYOP_FAULT_INJECT", f"raise:{op.signature[:12]}")
    with OpWorker(p150.path, workspace_root, chip="p150", name="tests-analyzer-error") as w:
        result = w.analyze(op, settings)
    assert result.status is Status.ANALYZER_ERROR and result.status.fault is Fault.OPBYOP
    assert "fault injected" in result.message and result.depth is Stage.SPLIT


def test_a_stablehlo_files_whole_model_is_checked_against_xla(worker, settings):
    from opbyop.frontends.loader import load_model

    whole = worker.analyze_whole(load_model(str(DATA / "testdata_abs_bf16.mlir")), settings)
    assert (whole.status, whole.depth, whole.reference) == (Status.SUCCESS, Stage.GOLDEN, "XLA:CPU")
    assert whole.pcc > 0.99  # abs of 400 bf16 values: judged by PCC


BIG = """module {
  func.func @main(%a: tensor<512x512xbf16>, %b: tensor<512x512xbf16>) -> (tensor<512x512xbf16>, tensor<512x512xbf16>) {
    %0 = stablehlo.add %a, %b : tensor<512x512xbf16>
    %1 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<512x512xbf16>, tensor<512x512xbf16>) -> tensor<512x512xbf16>
    return %0, %1 : tensor<512x512xbf16>, tensor<512x512xbf16>
  }
}"""


def test_harvested_rows_shrink_the_grid_ops_are_placed_on(worker, settings):
    from opbyop.config import DeviceOptions
    from opbyop.ir.dedupe import dedupe
    from opbyop.ir.split import split_module

    add, dot = dedupe(split_module(BIG, "big").ops)
    harvest = settings.model_copy(update={"device": DeviceOptions(harvesting_mask=0b1111111100)})  # 2 rows left
    full, harvested = worker.analyze(add, settings), worker.analyze(add, harvest)
    assert full.status is harvested.status is Status.SUCCESS
    assert max(p.grid[0] for p in harvested.device.placements) <= 2  # op models on 2 rows only
    assert sum(p.candidates for p in harvested.device.placements) < sum(p.candidates for p in full.device.placements)
    # the matmul's program config fixes its grid for the whole chip: it cannot run on 2 rows
    fixed = worker.analyze(dot, harvest)
    assert fixed.status is Status.RUN_FAILED and "compile with the harvested device's descriptor" in fixed.message


RNG = """module {
  func.func @main() -> tensor<4x4xf32> {
    %a = stablehlo.constant dense<0.0> : tensor<f32>
    %b = stablehlo.constant dense<1.0> : tensor<f32>
    %shape = stablehlo.constant dense<4> : tensor<2xi64>
    %0 = stablehlo.rng %a, %b, %shape, distribution = UNIFORM : (tensor<f32>, tensor<f32>, tensor<2xi64>) -> tensor<4x4xf32>
    return %0 : tensor<4x4xf32>
  }
}"""

UI8_DOT = """module {
  func.func @main(%a: tensor<4x64xui8>, %b: tensor<64x4xui8>) -> tensor<4x4xui8> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<4x64xui8>, tensor<64x4xui8>) -> tensor<4x4xui8>
    return %0 : tensor<4x4xui8>
  }
}"""


def test_a_random_op_is_run_but_has_no_golden_verdict(worker, settings):
    from opbyop.ir.dedupe import dedupe

    rng = next(op for op in dedupe(split_module(RNG, "rng").ops) if op.op_name == "stablehlo.rng")
    result = worker.analyze(rng, settings)
    assert result.status is Status.SKIPPED and result.depth is Stage.DEVICE_RUN
    assert "draws random values" in result.message


def test_eight_bit_sums_are_fed_values_whose_sums_fit():
    from opbyop.golden.inputs import make_inputs
    from opbyop.ir.dedupe import dedupe

    (dot,) = dedupe(split_module(UI8_DOT, "dot").ops)
    a, b = make_inputs(dot.op_name, dot.inputs, dot.operands, dot.attributes, dot.signature, 0)
    assert set(np.unique(a)) <= {0, 1} and set(np.unique(b)) <= {0, 1} and a.any()
    assert int((a.astype(int) @ b.astype(int)).max()) <= 255
