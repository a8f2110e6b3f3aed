"""The vector unit's (SFPU) transcendental functions, in the modes a program can ask for.

tt-metal's unary ops take `fast_and_approximate_mode` (default False: the accurate path). The TTNN
programs this tt-mlir emits carry no such attribute, so the accurate path applies unless an op's
attributes say otherwise. Accurate paths are within 1-2 ULP of the true function in the
destination register's precision, so they are modelled as the exact f32 function, except where
the algorithm's own rounding is visible:
- exp with a 16-bit destination (bf16 data without fp32_dest_acc_en) runs `exp_21f` (Moroz et al.
  2022) and rounds its result to bf16 (ckernel_sfpu_exp.h, _sfpu_exp_21f_bf16_).
Fast modes:
- exp: Schraudolph's bit trick, i = round_u16(x * 256/ln2 + 32500.818359375) << 15, inputs
  clamped at -88.5 (ckernel_sfpu_exp.h, exp_init<APPROXIMATION_MODE, CLAMP_NEGATIVE>);
- gelu: 0.5 x + a 6-segment piecewise-linear LUT of |x| (ckernel_sfpu_gelu.h, gelu_init and
  calculate_gelu_appx); its coefficients are held in 16-bit LUT registers.
Sources: tenstorrent/tt-metal tt_metal/hw/ckernels/wormhole_b0/metal/llk_api/llk_sfpu/.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from opbyop.device.formats import round_bf16

APPROXIMATION_ATTRIBUTES = ("fast_and_approximate_mode", "approximate_mode", "approx")

# calculate_gelu_appx: (slope, intercept) per |x| segment [0, .5) [.5, 1) [1, 1.5) [1.5, 2) [2, 3) [3, inf)
_GELU_LUT = np.array([(0.1928, -0.00010443), (0.4939, -0.1604), (0.6188, -0.2796), (0.6099, -0.2635),
                      (0.5402, -0.1194), (0.5, 0.0)], np.float64)
_GELU_EDGES = np.array([0.5, 1.0, 1.5, 2.0, 3.0])


def asks_for_approximation(attrs: dict) -> bool:
    return any(attrs.get(name) is True for name in APPROXIMATION_ATTRIBUTES)


def gelu_accurate(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + special.erf(x / np.sqrt(2.0)))).astype(np.float32)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """The tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (calculate_gelu_tanh)."""
    x = np.asarray(x, np.float32)
    return (0.5 * x * (1.0 + np.tanh(np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x ** 3))))


def gelu_fast(x: np.ndarray) -> np.ndarray:
    """0.5 x + LUT(|x|): GELU(x) - x/2 = x erf(x/sqrt 2)/2 is even, one line per segment of |x|."""
    x = np.asarray(x, np.float32)
    coefficients = _GELU_LUT.astype(np.float16).astype(np.float32)  # 16-bit LUT registers
    segment = np.searchsorted(_GELU_EDGES, np.abs(x), side="right")
    slope, intercept = coefficients[segment, 0], coefficients[segment, 1]
    return (np.float32(0.5) * x + (slope * np.abs(x) + intercept)).astype(np.float32)


def exp_fast(x: np.ndarray) -> np.ndarray:
    """Schraudolph: the float whose bits are round(A x + (B - C)) << 15."""
    x = np.maximum(np.asarray(x, np.float32), np.float32(-88.5))
    scaled = x * np.float32(256.0 * 1.4426950408889634) + np.float32(32500.818359375)
    integer = np.clip(np.rint(scaled), 0, 65535).astype(np.uint32)
    return (integer << np.uint32(15)).view(np.float32)


def exp_21f(x: np.ndarray) -> np.ndarray:
    """exp via 2**(x/ln2): integer part into the exponent, the fraction through a degree-2
    polynomial (Moroz et al. 2022, 'exp_21f'), computed in f32 as the SFPU does."""
    x = np.asarray(x, np.float32)
    xlog2 = np.clip(x * np.float32(1.4426950216293334961) + np.float32(127.0), np.float32(0.0), np.float32(255.0))
    z = np.floor(xlog2.astype(np.float64) * 2.0 ** 23).astype(np.int64)  # _float_to_int32_for_exp_21f_
    exponent = (z >> 23) & 0xFF
    fraction = (z & 0x7FFFFF).astype(np.float32)
    poly = np.float32(1.0017248) + fraction * (np.float32(7.839635491371155e-08) +
                                               fraction * np.float32(4.791750143340323e-15))
    mantissa = poly.view(np.uint32) & np.uint32(0x7FFFFF)  # setexp keeps the polynomial's mantissa
    y = (mantissa | (exponent.astype(np.uint32) << np.uint32(23))).view(np.float32)
    y = np.where(exponent >= 255, np.float32(np.inf), y)
    return np.where(np.isnan(x), x, y).astype(np.float32)


def exp(x: np.ndarray, approximate: bool, bf16_destination: bool) -> np.ndarray:
    if approximate:
        return exp_fast(x)
    if bf16_destination:
        return round_bf16(exp_21f(x))
    with np.errstate(all="ignore"):
        return np.exp(np.asarray(x, np.float32))


def gelu(x: np.ndarray, approximate: bool | str) -> np.ndarray:
    if approximate == "tanh":
        return gelu_tanh(x)
    return gelu_fast(x) if approximate is True else gelu_accurate(np.asarray(x, np.float32))
