"""Ops at real LLM sizes: bounded memory with the numerics of the whole-array paths, and running
out of memory as a clear outcome. Sizes here are small: the blocks and pieces are made small instead."""

from __future__ import annotations

import numpy as np
import pytest

from opbyop.device import formats
from opbyop.device.formats import BF16, _fidelity_matmul, fidelity_matmul, round_bf16, store, to_bf16
from opbyop.golden import inputs, large
from opbyop.golden.compare import Thresholds, compare
from opbyop.ir.dedupe import dedupe
from opbyop.ir.split import split_module
from opbyop.records import Stage, Status, TensorDesc
from opbyop.worker.process import OpWorker


@pytest.mark.parametrize("shape_a, shape_b", [((128, 512), (512, 1100)), ((2, 64, 256), (2, 256, 2100)),
                                              ((4100, 256), (256, 64))])
@pytest.mark.parametrize("fidelity", ["lofi", "hifi4"])
@pytest.mark.parametrize("fp32_acc", [True, False])
def test_a_matmul_taken_in_blocks_is_bit_for_bit_the_whole_array_matmul(monkeypatch, shape_a, shape_b, fidelity,
                                                                        fp32_acc):
    rng = np.random.default_rng(7)
    a = rng.standard_normal(shape_a).astype(BF16)
    b = rng.standard_normal(shape_b).astype(BF16)  # a weight kept as bf16
    whole = _fidelity_matmul(a.astype(np.float32), b.astype(np.float32), fidelity, fp32_acc, 32)
    monkeypatch.setattr(formats, "CHUNK_ELEMENTS", 1 << 14)
    blocked = fidelity_matmul(a, b, fidelity, fp32_acc)
    assert formats._block(b.shape[-1], b.shape[-2], b.size) < b.shape[-1] or formats._block(
        a.shape[-2], a.shape[-1], a.size) < a.shape[-2]  # taken in blocks indeed
    assert blocked.dtype == np.float32 and blocked.shape == whole.shape
    assert np.array_equal(blocked.view(np.uint32), whole.view(np.uint32))


@pytest.mark.parametrize("fidelity", ["lofi", "hifi2", "hifi3", "hifi4"])
def test_a_large_matmuls_bits_do_not_depend_on_the_order_its_products_are_summed_in(fidelity):
    """Above the bit-exact limit BLAS sums the products, in an order that changes with the CPU's
    kernels and the operands' shapes: the result must not (a permuted K is another order)."""
    rng = np.random.default_rng(11)
    a = rng.standard_normal((256, 512)).astype(BF16)
    b = rng.standard_normal((512, 300)).astype(BF16)
    assert 256 * 512 * 300 * formats.FIDELITY_PHASES[fidelity] > formats.EXACT_PRODUCTS  # the BLAS path
    order = rng.permutation(512)
    straight = fidelity_matmul(a, b, fidelity, True)
    permuted = fidelity_matmul(a[:, order], b[order], fidelity, True)
    assert np.array_equal(straight.view(np.uint32), permuted.view(np.uint32))


def test_bf16_storage_holds_exactly_the_values_round_bf16_gives_across_f32_bit_patterns():
    bits = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    stored = store(x, "bf16")
    assert stored.dtype == BF16
    same = (stored.astype(np.float32).view(np.uint32) == round_bf16(x).view(np.uint32))
    assert np.all(same | np.isnan(x))
    assert to_bf16(stored) is stored  # bf16 values are stored as they are, not copied


@pytest.mark.parametrize("dtype", ["bf16", "f32", "i32", "i1"])
@pytest.mark.parametrize("positive", [False, True])
def test_a_large_input_drawn_in_pieces_has_the_values_of_one_draw(monkeypatch, dtype, positive):
    desc = TensorDesc(shape=(301, 177), dtype=dtype)
    whole = inputs._draw(np.random.default_rng(3), desc, positive, None)
    monkeypatch.setattr(inputs, "DRAW_CHUNK", 1000)
    pieces = inputs._draw(np.random.default_rng(3), desc, positive, None)
    assert pieces.dtype == whole.dtype and np.array_equal(pieces, whole)


@pytest.mark.parametrize("noise", [0.01, 3.0])
def test_a_large_output_compared_in_pieces_gets_the_whole_array_verdict(monkeypatch, noise):
    rng = np.random.default_rng(0)
    expected = rng.standard_normal((300, 100)).astype(np.float32)
    actual = (expected + noise * rng.standard_normal(expected.shape)).astype(BF16)
    expected[3, 3] = actual[3, 3] = np.nan
    expected[4, 4] = actual[4, 4] = np.inf
    whole = compare([actual], [expected], ["f32"], Thresholds())
    monkeypatch.setattr(large, "PIECE", 1000)
    pieces = compare([actual], [expected], ["f32"], Thresholds())
    assert pieces.passed == whole.passed == (noise < 1)
    assert (pieces.max_abs_error, pieces.max_rel_error, pieces.allclose) == (whole.max_abs_error, whole.max_rel_error,
                                                                             whole.allclose)
    assert pieces.pcc == pytest.approx(whole.pcc, abs=1e-12)


@pytest.mark.parametrize("kind", ["random", "constant", "with_nan"])
def test_large_outputs_equal_bit_for_bit_get_the_piecewise_figures_without_the_f64_pieces(monkeypatch, kind):
    rng = np.random.default_rng(1)
    expected = (np.full((300, 100), 1.5) if kind == "constant" else rng.standard_normal((300, 100))).astype(BF16)
    if kind == "with_nan":
        expected[3, 3], expected[4, 4] = np.nan, np.inf
    actual = expected.copy()
    monkeypatch.setattr(large, "PIECE", 1000)
    assert large.identical(actual, expected)
    assert large.figures(actual, expected, 1e-2, 1e-2) == large._figures_in_pieces(actual, expected, 1e-2, 1e-2)
    actual[299, 99] = actual[299, 99] + 1  # one element off, in the last piece: the pieces judge it
    assert not large.identical(actual, expected)
    assert large.figures(actual, expected, 1e-2, 1e-2).max_abs > 0


BIG_ADD = """module {
  func.func @main(%a: tensor<4096x8192xf32>, %b: tensor<4096x8192xf32>) -> tensor<4096x8192xf32> {
    %0 = stablehlo.add %a, %b : tensor<4096x8192xf32>
    return %0 : tensor<4096x8192xf32>
  }
}"""


@pytest.mark.slow
def test_an_op_worker_killed_by_sigkill_costs_its_op_an_infra_error_naming_memory_and_its_bytes(
        p150, tmp_path, compile_only, mlp_ops):
    killed, fine = mlp_ops[1], mlp_ops[3]
    env = {"OPBYOP_FAULT_INJECT": f"sigkill:{killed.signature[:12]}"}
    with OpWorker(p150.path, tmp_path, chip="p150", name="oom", env=env) as worker:
        lost = worker.analyze(killed, compile_only, timeout=60)
        after = worker.analyze(fine, compile_only, timeout=60)
    assert lost.status is Status.INFRA_ERROR
    assert "SIGKILL" in lost.message and "out of host memory" in lost.message
    assert "operands are" in lost.message and " MB" in lost.message
    assert after.compile.reached is Stage.FLATBUFFER and worker.restarts == 1


@pytest.mark.slow
def test_an_op_over_the_worker_memory_budget_is_refused_after_compiling_with_its_bytes(p150, tmp_path, settings):
    (op,) = dedupe(split_module(BIG_ADD, "big").ops)
    budget = settings.model_copy(update={"memory_budget_bytes": 100_000_000})
    with OpWorker(p150.path, tmp_path, chip="p150", name="budget") as worker:
        result = worker.analyze(op, budget, timeout=120)
    assert result.status is Status.INFRA_ERROR
    assert (result.depth, result.failed_stage) == (Stage.FLATBUFFER, Stage.DEVICE_RUN)
    assert "operands (268.4 MB) and results (134.2 MB) exceed the worker's memory budget of 100.0 MB" in result.message


@pytest.mark.slow
def test_an_op_beyond_the_worker_memory_limit_is_an_infra_error_and_the_worker_carries_on(
        p150, tmp_path, settings, mlp_ops):
    (op,) = dedupe(split_module(BIG_ADD, "big").ops)
    env = {"OPBYOP_WORKER_MEMORY_LIMIT": str(150_000_000)}
    with OpWorker(p150.path, tmp_path, chip="p150", name="limit", env=env) as worker:
        result = worker.analyze(op, settings, timeout=120)
        after = worker.analyze(mlp_ops[3], settings, timeout=120)
    assert result.status is Status.INFRA_ERROR, result.message
    assert result.message.startswith("MemoryError during DEVICE_RUN: out of host memory")
    assert "the op's operands are 268.4 MB" in result.message
    assert result.compile.reached is Stage.FLATBUFFER and result.synthetic_inputs == ["arg0", "arg1"]
    assert after.status is Status.SUCCESS and worker.restarts == 0


def test_a_whole_model_beyond_the_chip_s_dram_is_left_out_with_its_figures_and_a_small_one_is_run():
    from opbyop.compiler.system_desc import dram_bytes, resolve
    from opbyop.graph import Argument, ArgumentKind, ModelGraph
    from opbyop.op_memory import whole_model_misfit_on

    def graph(rows: int) -> ModelGraph:
        weight = Argument("w", ArgumentKind.PARAMETER, TensorDesc(shape=(rows, 8192), dtype="bf16"))
        return ModelGraph(name="m", frontend="stablehlo", module_text="", arguments=[weight] * 80)

    n150 = dram_bytes(resolve("n150"))  # 12 channels of 1 GiB, less what the runtime reserves
    misfit = whole_model_misfit_on(graph(28672), n150)  # 80 llama-70B MLP weights: 37.6 GB
    assert misfit.startswith("whole model not run: its arguments (weights included) are 37.58 GB")
    assert "the chip's DRAM holds 12.86 GB" in misfit
    assert whole_model_misfit_on(graph(32), n150) is None
    # every board has its DRAM from its descriptor: a p100 has 7 channels to the p150's 8, a p300 two p150s
    p150, p100, p300 = (dram_bytes(resolve(board)) for board in ("p150", "p100", "p300"))
    assert p100 * 8 == p150 * 7 and p300 == 2 * p150


def test_which_inputs_were_real_and_which_synthetic_survive_the_store(mlp_ops):
    from opbyop_storage.convert import result_from_row, result_row

    from opbyop.analysis.analyzer import input_kinds
    from opbyop.records import OpResult

    op = next(o for o in mlp_ops if len(o.inputs) >= 2).model_copy(update={"input_values": {1: "digest"}})
    real, synthetic = input_kinds(op)
    assert (real, synthetic[0]) == (["arg1"], "arg0")
    result = OpResult(signature=op.signature, op_name=op.op_name, status=Status.SUCCESS, depth=Stage.GOLDEN,
                      real_inputs=real, synthetic_inputs=synthetic)
    back = result_from_row(result_row("run", result))
    assert (back.real_inputs, back.synthetic_inputs) == (real, synthetic)


HUGE_ADD = """module {
  func.func @main(%a: tensor<40000x40000xf32>, %b: tensor<40000x40000xf32>) -> tensor<40000x40000xf32> {
    %0 = stablehlo.add %a, %b : tensor<40000x40000xf32>
    return %0 : tensor<40000x40000xf32>
  }
}"""


@pytest.mark.slow
def test_a_cli_run_capped_below_an_op_s_size_stores_it_as_a_memory_infra_error_and_ends_normally(tmp_path):
    """A process capped below what a file's arguments need (12.8 GB here; the cap stops the allocation
    before a page is touched). Uncapped, the kernel's out-of-memory killer ended such a run and left
    nothing. The CLI never draws a file's arguments itself: the op's worker runs out, and the op's
    result names memory, the op's bytes and the fix; the run ends normally, no traceback."""
    import os
    import resource
    import subprocess
    import sys

    (tmp_path / "huge.mlir").write_text(HUGE_ADD)

    def cap() -> None:  # 4 GB of address space: the CLI starts, a 6.4 GB argument is refused untouched
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.RLIM_INFINITY))

    env = {**os.environ, "OPBYOP_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "run", str(tmp_path / "huge.mlir"), "--no-whole"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, preexec_fn=cap)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "infra_error" in done.stdout and "out of host memory" in done.stdout, done.stdout[-3000:]
    assert "12.80 GB" in done.stdout and "Traceback" not in done.stderr


def test_a_large_constant_output_is_judged_by_allclose_in_pieces_as_it_is_whole(monkeypatch):
    expected = np.full((300, 100), 2.0, np.float32)
    actual = expected.astype(BF16)
    actual[7, 7] = 2.5
    whole = compare([actual], [expected], ["f32"], Thresholds())
    monkeypatch.setattr(large, "PIECE", 1000)
    pieces = compare([actual], [expected], ["f32"], Thresholds())
    assert whole.method == pieces.method == "allclose" and whole.pcc is pieces.pcc is None
    assert whole.passed is pieces.passed is False and pieces.max_abs_error == whole.max_abs_error == 0.5
