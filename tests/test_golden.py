"""Golden reference: deterministic inputs, XLA:CPU execution, and the comparison figures."""

from __future__ import annotations

import numpy as np
import pytest

from opbyop.golden.compare import DtypeThreshold, Thresholds, compare, pcc
from opbyop.golden.inputs import make_inputs
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.ir.dedupe import dedupe
from opbyop.ir.split import split_module

GATHER = """module {
  func.func @main(%table: tensor<100x8xf32>, %ids: tensor<1x32xi64>) -> tensor<1x32x8xf32> {
    %0 = "stablehlo.gather"(%table, %ids) <{dimension_numbers = #stablehlo.gather<offset_dims = [2],
      collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false,
      slice_sizes = array<i64: 1, 8>}> : (tensor<100x8xf32>, tensor<1x32xi64>) -> tensor<1x32x8xf32>
    return %0 : tensor<1x32x8xf32>
  }
}"""
LOG = """module {
  func.func @main(%a: tensor<64xf32>) -> tensor<64xf32> {
    %0 = stablehlo.log %a : tensor<64xf32>
    return %0 : tensor<64xf32>
  }
}"""


def only_op(text: str):
    return dedupe(split_module(text, "t").ops)[0]


def draw(op, seed: int = 0) -> list[np.ndarray]:
    return make_inputs(op.op_name, op.inputs, op.operands, op.attributes, op.signature, seed)


def test_inputs_are_deterministic_per_op_and_seed():
    op = only_op(LOG)
    assert all(np.array_equal(a, b) for a, b in zip(draw(op), draw(op)))
    assert not np.array_equal(draw(op, 0)[0], draw(op, 1)[0])


def test_index_operands_stay_in_range_and_domains_are_respected():
    gather = only_op(GATHER)
    table, ids = draw(gather)
    assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < 100 and len(np.unique(ids)) > 5
    (values,) = draw(only_op(LOG))
    assert values.min() > 0  # log's argument is drawn from its domain: a NaN would mean a real bug


def test_golden_runs_xla_and_caches_by_signature():
    golden = XlaCpu()
    op = only_op(GATHER)
    table, ids = draw(op)
    (out,) = golden.run(op.module_text, [table, ids], key=op.signature)
    assert np.array_equal(out[0], table[ids[0]])
    golden.run(op.module_text, [table, ids], key=op.signature)
    assert golden.compiles == 1


def test_comparison_figures():
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    same = compare([x], [x], ["f32"], Thresholds())
    assert same.passed and same.pcc == pytest.approx(1.0) and same.max_abs_error == 0
    noisy = compare([x + 0.5 * np.sin(40 * x)], [x], ["f32"], Thresholds())
    assert not noisy.passed and noisy.pcc < 0.99 and noisy.max_abs_error > 0.4
    assert compare([np.array([1, 2, 3])], [np.array([1, 2, 4])], ["i32"], Thresholds()).passed is False
    strict = Thresholds(per_dtype={"f32": DtypeThreshold(pcc=0.9, atol=1e-6, rtol=0, require_allclose=True)})
    assert not compare([x + 1e-3], [x], ["f32"], strict).passed  # correlated, but not close


def test_pcc_handles_constants_and_nans():
    assert pcc(np.ones(8), np.ones(8)) == 1.0
    assert pcc(np.ones(8), np.zeros(8)) == 0.0
    both_nan = np.array([1.0, np.nan, 3.0, 4.0])
    assert pcc(both_nan, both_nan) == pytest.approx(1.0)
    assert pcc(np.array([1.0, 2.0, 3.0, 4.0]), both_nan) == 0.0  # a NaN the golden does not have


def test_a_cpu_only_process_runs_golden_without_loading_the_tt_plugin():
    """prepare_jax() with no descriptor: XLA:CPU works (64-bit included) and libtt is never mapped
    into the process (loading it costs seconds and unpacks the compiler's runtime)."""
    import subprocess
    import sys

    code = ("from opbyop.jaxenv import prepare_jax\nprepare_jax()\nimport jax.numpy as jnp\n"
            "print(jnp.arange(3, dtype=jnp.int64).sum().dtype, jnp.float64(0.5) * 2)\n"
            "print(any('libtt' in line for line in open('/proc/self/maps')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.split() == ["int64", "1.0", "False"]


def test_xlas_info_lines_stay_off_the_terminal_when_the_mlir_bindings_loaded_jaxlib_first_unless_the_user_asks():
    import os
    import subprocess
    import sys

    code = ("import jaxlib.mlir.ir\nfrom opbyop.jaxenv import prepare_jax\nprepare_jax()\n"
            "import jax.numpy as jnp\nprint(jnp.ones(2).sum())\n")

    def stderr(**env: str) -> str:
        environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
        return subprocess.run([sys.executable, "-c", code], env={**environ, **env}, capture_output=True, text=True,
                              check=True, timeout=300).stderr

    assert "pjrt_client" not in stderr()
    assert "pjrt_client" in stderr(TF_CPP_MIN_LOG_LEVEL="0")


SIGNED_BOOL_COMPARE = """module {
  func.func @main(%a: tensor<4xi1>, %b: tensor<4xi1>) -> tensor<4xi1> {
    %0 = stablehlo.compare  LT, %a, %b,  SIGNED : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
    return %0 : tensor<4xi1>
  }
}"""


def test_a_signed_compare_of_booleans_gets_the_golden_of_false_before_true():
    # XLA's HLO verifier refuses SIGNED on PRED; booleans have one order, which StableHLO spells UNSIGNED
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])
    (out,) = XlaCpu().run(SIGNED_BOOL_COMPARE, [a, b])
    assert out.tolist() == [False, True, False, False]
