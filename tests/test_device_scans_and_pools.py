"""Running sums and products, pools and an argmin as opbyop's device model computes them: each as
tt-metal computes it (its accumulation kernel on ttsim, bit for bit), or the device's own verdict
where tt-metal refuses the compiled program. The StableHLO files are single ops of openxla/stablehlo's
testdata (tests/data/stablehlo)."""

from __future__ import annotations

import numpy as np
import pytest
from core_fixtures import DATA

from opbyop.device.kernels.reduction import scan
from opbyop.pipeline import prepare
from opbyop.records import Fault, Status, TtsimOutcome

STABLEHLO = DATA / "stablehlo"


def scan_module(reducer: str, dtype: str, rows: int = 32, cols: int = 33) -> str:
    """jax.lax.cumsum / cumprod along dimension 0, in the reduce_window form they lower to."""
    init = "1.000000e+00" if reducer == "multiply" else "0.000000e+00"
    t = f"tensor<{rows}x{cols}x{dtype}>"
    return f"""func.func @main(%arg0: {t}) -> {t} {{
  %cst = stablehlo.constant dense<{init}> : tensor<{dtype}>
  %0 = "stablehlo.reduce_window"(%arg0, %cst) <{{padding = dense<[[{rows - 1}, 0], [0, 0]]> : tensor<2x2xi64>,
      window_dimensions = array<i64: {rows}, 1>}}> ({{
  ^bb0(%a: tensor<{dtype}>, %b: tensor<{dtype}>):
    %1 = stablehlo.{reducer} %a, %b : tensor<{dtype}>
    stablehlo.return %1 : tensor<{dtype}>
  }}) : ({t}, tensor<{dtype}>) -> {t}
  return %0 : {t}
}}
"""


def results_of(workspace, worker, settings, path) -> dict:
    run = prepare([str(path)], artifacts=workspace.artifacts)
    assert not run.errors
    return {op.op_name: worker.analyze(op, settings, timeout=600) for op in run.unique}


@pytest.mark.slow
@pytest.mark.parametrize("reducer, dtype", [("add", "f32"), ("add", "bf16"), ("multiply", "f32"),
                                            ("multiply", "bf16")])
def test_running_sums_and_products_on_the_model_equal_ttsims_bit_for_bit(
        tmp_path, workspace, worker, on_ttsim, ttsim_ready, reducer, dtype):
    """The compiler's ttnn.cumsum / ttnn.cumprod: an f32 accumulator on the vector unit (a Kahan sum for
    f32 data), each position packed into the tensor's format."""
    path = tmp_path / f"scan_{reducer}_{dtype}.mlir"
    path.write_text(scan_module(reducer, dtype))
    result = results_of(workspace, worker, on_ttsim, path)["stablehlo.reduce_window"]
    assert result.ttsim is not None and result.ttsim.outcome is TtsimOutcome.RAN, result.ttsim.message
    assert result.ttsim.agreement == "bit_equal", f"{result.ttsim.agreement}, {result.ttsim.max_ulps} ulps"


def test_an_f32_running_sum_keeps_what_each_addition_rounds_away():
    """calculate_kahan_step: 1e-8 (under half of 1's ulp) added to 1 a thousand times reaches 1.00001,
    where a plain f32 sum stays at 1."""
    x = np.concatenate([[1.0], np.full(1000, 1e-8)]).astype(np.float32)
    assert scan(x, 0, "sum", "f32")[-1] == pytest.approx(1.00001, abs=2e-7)
    assert scan(x, 0, "sum", "bf16")[-1] == np.float32(1.0)  # bf16 data: no compensation, each step rounds


@pytest.mark.parametrize("file", ["cumprod_bfloat16_8_9.mlir", "cumlogsumexp_float16_8_9.mlir"])
def test_stablehlos_cumulative_products_and_logsumexps_run_on_the_model_and_match_xla(
        workspace, worker, settings, file):
    result = results_of(workspace, worker, settings, STABLEHLO / file)["stablehlo.reduce_window"]
    assert result.status is Status.SUCCESS, result.message


def test_an_argmin_over_uint32_compares_the_integers_not_their_f32_roundings(workspace, worker, settings):
    """argmin_uint32_15: values near 2**32 tie once read through f32; the program's argmax over ~x must
    not."""
    result = results_of(workspace, worker, settings, STABLEHLO / "argmin_uint32_15.mlir")["stablehlo.reduce"]
    assert result.status is Status.SUCCESS, result.message


def test_a_max_pool_whose_padding_tt_metal_reads_in_another_order_is_the_devices_run_failure(
        workspace, worker, settings):
    """padding (0, 1) on both axes compiles to ttnn.max_pool2d padding [0, 0, 1, 1]: tt-metal reads it
    as (top, bottom, left, right), pools to 55x56 where the program holds 56x56, and the reshape after it
    fails (ttsim: reshape_common.cpp 'Invalid arguments to reshape')."""
    result = results_of(workspace, worker, settings,
                        STABLEHLO / "reduce_window_max_float32_112_112.mlir")["stablehlo.reduce_window"]
    assert result.status is Status.RUN_FAILED and result.status.fault is Fault.DEVICE, result.message
    assert "padding [0, 0, 1, 1]" in result.message and "55x56" in result.message


def test_an_f32_average_pool_is_the_devices_run_failure_naming_bf16(workspace, worker, settings):
    """tt-metal's pool2d validates its input as bf16 (ttsim: pool_op.cpp 'Only BFLOAT16 supported')."""
    result = results_of(workspace, worker, settings,
                        STABLEHLO / "reduce_window_add_float32_112_112.mlir")["stablehlo.reduce_window"]
    assert result.status is Status.RUN_FAILED and result.status.fault is Fault.DEVICE, result.message
    assert "bf16 input only" in result.message
