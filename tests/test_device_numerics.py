"""tt-metal's numerics in the simulator: SFPU function modes, FPU fidelity on element-wise multiply
and reductions, tile padding in reductions; each against torch / numpy with the bound tt-metal's
own tests state for the hardware."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from opbyop.device.formats import fidelity_multiply, round_bf16, to_tf32, truncate_mantissa
from opbyop.device.kernels import KERNELS, Call, sfpu
from opbyop.device.kernels.reduction import tile_reduce
from opbyop.device.layout import Layout
from opbyop.device.program import Op, TensorType

RNG = np.random.default_rng(11)


def src_a(x: np.ndarray) -> np.ndarray:
    """What a multiplication sees of a value held in srcA: 8 of TF32's 10 mantissa bits."""
    return truncate_mantissa(to_tf32(x), 8)


def run(name: str, inputs: list, out_shape: tuple, fmt: str = "f32", **attrs) -> np.ndarray:
    types = [TensorType(tuple(np.shape(x)), fmt, Layout(tiled=True, dtype=fmt)) for x in inputs]
    op = Op(name=name, operands=list(range(len(inputs))), results=[len(inputs)], operand_types=types,
            result_types=[TensorType(tuple(out_shape), fmt, Layout(tiled=True, dtype=fmt))], attrs=attrs)
    return np.asarray(KERNELS[name](Call(op=op, inputs=inputs, out_types=op.result_types))[0])


def bf16_values(n: int, low: float, high: float) -> np.ndarray:
    return round_bf16(RNG.uniform(low, high, n).astype(np.float32))


def ulp_bf16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(round_bf16(a).view(np.int32) - round_bf16(b).view(np.int32)) >> 16


# -- SFPU ----------------------------------------------------------------------------------------
def test_exp_accurate_on_bf16_is_exp_21f_within_one_ulp():
    x = bf16_values(20_000, -87.0, 88.5)
    got = run("ttnn.exp", [x], x.shape, fmt="bf16")
    want = torch.exp(torch.from_numpy(x)).numpy()
    assert ulp_bf16(got, want).max() <= 1  # tt-metal's bound for the accurate path
    assert ulp_bf16(got, want).mean() > 0  # the algorithm's own rounding shows
    np.testing.assert_allclose(run("ttnn.exp", [x], x.shape, fmt="f32"), np.exp(x), rtol=1e-6)  # f32: exact


def test_exp_fast_mode_is_schraudolph_when_asked():
    x = RNG.uniform(-20, 10, 5000).astype(np.float32)
    fast = run("ttnn.exp", [x], x.shape, fast_and_approximate_mode=True)
    relative = np.abs(fast / np.exp(x) - 1)
    assert 0.005 < relative.max() < 0.05
    assert np.corrcoef(fast, np.exp(x))[0, 1] > 0.999  # tt-metal's bound for the fast path


def test_gelu_fast_lut_and_accurate():
    x = RNG.uniform(-10, 10, 20_000).astype(np.float32)
    want = F.gelu(torch.from_numpy(x)).numpy()
    fast = run("ttnn.gelu", [x], x.shape, fast_and_approximate_mode=True)
    assert np.corrcoef(fast, want)[0, 1] > 0.999 and 1e-3 < np.abs(fast - want).max() < 0.05
    np.testing.assert_allclose(run("ttnn.gelu", [x], x.shape), want, rtol=1e-5, atol=1e-6)
    tanh_form = run("ttnn.gelu", [x], x.shape, approximate="tanh")
    np.testing.assert_allclose(tanh_form, F.gelu(torch.from_numpy(x), approximate="tanh").numpy(), rtol=1e-5, atol=1e-5)


def test_without_an_approximation_attribute_the_accurate_path_runs():
    assert not sfpu.asks_for_approximation({})
    assert sfpu.asks_for_approximation({"fast_and_approximate_mode": True})


# -- FPU fidelity ---------------------------------------------------------------------------------
def test_a_bf16_multiply_runs_on_the_sfpu_and_rounds_to_nearest_even():
    """ttnn 0.81.1 multiplies bf16 on the vector unit (mul_binary_tile: SFPMUL, then
    float32_to_bf16_rne), whatever the compute config: the exact product rounded to nearest even."""
    a, b = bf16_values(4096, -4, 4).reshape(64, 64), bf16_values(4096, -4, 4).reshape(64, 64)
    exact = a.astype(np.float64) * b.astype(np.float64)
    got = run("ttnn.multiply", [a, b], a.shape, fmt="bf16", compute_config={"math_fidelity": "lofi"})
    np.testing.assert_array_equal(got, round_bf16(exact.astype(np.float32)))


def test_a_bf16_multiply_asked_to_be_fast_follows_the_compute_config_fidelity_on_the_fpu():
    a, b = bf16_values(4096, -4, 4).reshape(64, 64), bf16_values(4096, -4, 4).reshape(64, 64)
    exact = a.astype(np.float64) * b.astype(np.float64)
    lofi = run("ttnn.multiply", [a, b], a.shape, fmt="bf16", fast_and_approximate_mode=True,
               compute_config={"math_fidelity": "lofi", "fp32_dest_acc_en": True})
    hifi4 = run("ttnn.multiply", [a, b], a.shape, fmt="bf16", fast_and_approximate_mode=True)  # tt-metal's HiFi4
    np.testing.assert_allclose(hifi4, exact, rtol=1e-6)  # bf16 operands fit the TF32 phases exactly
    assert np.abs(lofi - exact).mean() > 100 * np.abs(hifi4 - exact).mean()
    np.testing.assert_array_equal(lofi, fidelity_multiply(a, b, "lofi"))


def test_f32_multiply_runs_on_the_sfpu_exactly():
    a, b = RNG.standard_normal((2, 33)).astype(np.float32)
    got = run("ttnn.multiply", [a, b], a.shape, compute_config={"math_fidelity": "lofi", "fp32_dest_acc_en": True})
    np.testing.assert_array_equal(got, a * b)


# -- reductions on tiles ----------------------------------------------------------------------------
def test_max_over_negative_values_with_a_padded_width_is_the_true_max():
    """The tile's padding takes part: with tt-metal's neutral -inf it never wins, a zero would."""
    x = -RNG.uniform(1, 2, (3, 50)).astype(np.float32)
    got = run("ttnn.max", [x], (3,), dim_arg=[1], keep_dim=False)
    np.testing.assert_array_equal(got, x.max(axis=1))  # f32 maxima keep every bit (as on ttsim)
    assert np.all(got < 0)


def test_bf16_sum_with_bf16_accumulation_rounds_in_the_destination():
    x = round_bf16(RNG.uniform(0.5, 1.5, (4, 1000)).astype(np.float32))
    fp32 = tile_reduce(x, (1,), "sum", "hifi4", True, storage="bf16")[:, 0]
    bf16 = tile_reduce(x, (1,), "sum", "hifi4", False, storage="bf16")[:, 0]
    exact = x.astype(np.float64).sum(axis=1)
    np.testing.assert_allclose(fp32, exact, rtol=1e-6)
    np.testing.assert_array_equal(bf16, round_bf16(bf16))
    assert np.abs(bf16 - exact).mean() > 10 * np.abs(fp32 - exact).mean()


def test_lofi_row_sum_of_bf16_loses_srcb_low_mantissa_bits_hifi3_does_not():
    """Summed over columns the data sits in srcB: its last mantissa bits join in HiFi3's phase."""
    x = round_bf16(RNG.uniform(1, 2, (2, 64)).astype(np.float32))
    hifi4 = tile_reduce(x, (1,), "sum", "hifi4", True, storage="bf16")[:, 0]
    np.testing.assert_array_equal(tile_reduce(x, (1,), "sum", "hifi3", True, storage="bf16")[:, 0], hifi4)
    lofi = tile_reduce(x, (1,), "sum", "lofi", True, storage="bf16")[:, 0]
    exact = x.astype(np.float64).sum(axis=1)
    assert np.abs(lofi - exact).max() > 10 * np.abs(hifi4 - exact).max()


def test_f32_sums_keep_every_bit_of_their_operands():
    """ttnn's f32 reductions do not go through TF32 srcA registers (ttsim's sums are f32 sums)."""
    x = RNG.uniform(1, 2, (2, 64)).astype(np.float32)
    got = tile_reduce(x, (1,), "sum", "lofi", True)[:, 0]
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=1), rtol=1e-6)


def test_an_f32_mean_scales_its_sum_by_an_f32_one_over_n_not_a_bf16_one():
    """On the vector unit the mean's 1/N is a full f32 (ttsim: bit-equal); 1/50 differs from its bf16 by 0.2%."""
    x = RNG.standard_normal((2, 50)).astype(np.float32)
    got = run("ttnn.mean", [x], (2, 1), dim_arg=[1], keep_dim=True)
    np.testing.assert_allclose(got[:, 0], x.sum(axis=1) * np.float32(1 / 50), rtol=1e-5)
    assert np.abs(got[:, 0] - x.sum(axis=1) * round_bf16(np.float32(1 / 50))).max() > 1e-5
