"""A matmul too large for XLA:CPU whole is run on blocks of its largest operand, with the same result."""

from __future__ import annotations

import numpy as np
import pytest

from opbyop.golden.blocked import block_module, dot_blocking, golden_outputs, run_blocked
from opbyop.golden.inputs import make_inputs
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.ir.dedupe import dedupe
from opbyop.ir.split import split_module


def dot(lhs: str, rhs: str, out: str, dims: str) -> str:
    return f"""module {{
  func.func @main(%a: tensor<{lhs}>, %b: tensor<{rhs}>) -> tensor<{out}> {{
    %0 = stablehlo.dot_general %a, %b, {dims} : (tensor<{lhs}>, tensor<{rhs}>) -> tensor<{out}>
    return %0 : tensor<{out}>
  }}
}}"""


LM_HEAD = dot("1x8x64xbf16", "64x1000xbf16", "1x8x1000xbf16", "contracting_dims = [2] x [0]")
TALL_LHS = dot("900x32xf32", "32x16xf32", "900x16xf32", "contracting_dims = [1] x [0]")
BATCHED = dot("4x16x32xf32", "4x32x300xf32", "4x16x300xf32",
              "batching_dims = [0] x [0], contracting_dims = [2] x [1]")
TRANSPOSED_RHS = dot("8x64xbf16", "1000x64xbf16", "8x1000xbf16", "contracting_dims = [1] x [1]")


def only_op(text: str):
    return dedupe(split_module(text, "t").ops)[0]


def draw(op) -> list[np.ndarray]:
    return make_inputs(op.op_name, op.inputs, op.operands, op.attributes, op.signature, 0)


@pytest.fixture(scope="module")
def golden() -> XlaCpu:
    return XlaCpu()


@pytest.mark.parametrize("text", [LM_HEAD, TALL_LHS, BATCHED, TRANSPOSED_RHS],
                         ids=["lm_head", "tall_lhs", "batched", "transposed_rhs"])
def test_a_dot_general_run_in_blocks_matches_the_whole_run(golden, text):
    op = only_op(text)
    blocking = dot_blocking(op, block_bytes=4096)
    assert blocking is not None and blocking.size < blocking.extent
    inputs = draw(op)
    (whole,) = golden.run(op.module_text, inputs, key=op.signature)
    (blocked,) = run_blocked(golden, op, inputs, blocking)
    assert blocked.shape == whole.shape and blocked.dtype == whole.dtype
    # f32 sums may round in another order in the matrix library at another shape: a few ulps of the sums
    np.testing.assert_allclose(np.asarray(blocked, np.float32), np.asarray(whole, np.float32), rtol=1e-6, atol=1e-5)


def test_a_bf16_lm_head_in_blocks_is_bit_for_bit_the_whole_run(golden):
    op = only_op(LM_HEAD)
    inputs = draw(op)
    (blocked,) = run_blocked(golden, op, inputs, dot_blocking(op, block_bytes=4096))
    np.testing.assert_array_equal(blocked, golden.run(op.module_text, inputs, key=op.signature)[0])


def test_the_largest_operand_is_split_along_its_largest_free_dimension():
    lm_head = dot_blocking(only_op(LM_HEAD), block_bytes=4096)
    assert (lm_head.argument, lm_head.dim, lm_head.result_dim, lm_head.extent) == (1, 1, 2, 1000)
    tall = dot_blocking(only_op(TALL_LHS), block_bytes=4096)
    assert (tall.argument, tall.dim, tall.result_dim, tall.extent) == (0, 0, 0, 900)
    batched = dot_blocking(only_op(BATCHED), block_bytes=4096)
    assert (batched.argument, batched.dim, batched.result_dim, batched.extent) == (1, 2, 2, 300)


def test_the_blocks_module_has_the_block_shapes():
    op = only_op(LM_HEAD)
    text = block_module(op.module_text, dot_blocking(op, block_bytes=4096), 7)
    assert "tensor<64x7xbf16>" in text and "-> tensor<1x8x7xbf16>" in text


def test_an_op_that_fits_or_is_no_matmul_runs_whole(golden):
    assert dot_blocking(only_op(LM_HEAD)) is None  # 128 KB: far below the default block
    log = only_op("""module {
  func.func @main(%a: tensor<4096xf32>) -> tensor<4096xf32> {
    %0 = stablehlo.log %a : tensor<4096xf32>
    return %0 : tensor<4096xf32>
  }
}""")
    assert dot_blocking(log, block_bytes=16) is None
    inputs = draw(log)
    np.testing.assert_array_equal(golden_outputs(golden, log, inputs)[0], golden.run(log.module_text, inputs)[0])
