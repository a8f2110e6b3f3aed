"""How opbyop's device model and ttsim agree on an op's outputs: bit for bit, or within ulps.

Integers, booleans and bf16 are compared bitwise (bf16 is what both store: a differing bit is a
different value); f32 by units in the last place, since the two may sum in different orders.

Units in the last place alone cannot say how far apart two values are: an element that a sum
cancels to near zero may be 1e9 ulps apart and 1e-9 apart in value against the output's other
elements. So each comparison also gives the largest difference relative to the output's scale (its
largest magnitude on ttsim; `difference`) and what kind of difference that is: `rounding` (within
2**-10 of the scale, the chip's own TF32 precision: near-zero elements far apart in ulps land
here), `sign` (the two sides take opposite signs beyond that), `magnitude` (the same sign, apart
beyond that), `nonfinite` (NaN or infinity on one side only), `shape` (different outputs).

A program is compared on its outputs only, so a disagreement is put down to one op of it: its
principal op (principal_op), the op most likely to have produced the first differing value. A
conv2d program that also permutes and reshapes counts under ttnn.conv2d, never under the data
movement around it: the matrix engine first, then reductions, other math, data movement,
creation, and layout changes last; among ops of one rank, the first in program order.
"""

from __future__ import annotations

from typing import Sequence

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
ULPS_TOLERATED = 4.0  # f32 outputs this close are "within_ulps": a different summation order, not a bug
# Differences up to this fraction of the output's scale are "rounding": TF32's precision, which the
# chip's own partial sums and srcA/srcB operands keep
SCALE_ROUNDING = 2.0 ** -10

# TTNN op kinds by how likely they are to produce a differing value (rank 0 first): what rounds the
# most, then what only moves or makes values. Ops not listed are other math (rank 2).
MATRIX_ENGINE = {"ttnn.matmul", "ttnn.linear", "ttnn.conv2d", "ttnn.conv1d", "ttnn.conv_transpose2d"}
REDUCTIONS = {"ttnn.sum", "ttnn.mean", "ttnn.max", "ttnn.min", "ttnn.prod", "ttnn.argmax", "ttnn.softmax",
              "ttnn.layer_norm", "ttnn.rms_norm", "ttnn.batch_norm", "ttnn.group_norm", "ttnn.cumsum"}
DATA_MOVEMENT = {"ttnn.reshape", "ttnn.permute", "ttnn.transpose", "ttnn.concat", "ttnn.repeat",
                 "ttnn.repeat_interleave", "ttnn.slice_static", "ttnn.slice_dynamic", "ttnn.pad", "ttnn.typecast",
                 "ttnn.embedding", "ttnn.rows_gather", "ttnn.gather", "ttnn.squeeze", "ttnn.unsqueeze"}
CREATION = {"ttnn.full", "ttnn.ones", "ttnn.zeros", "ttnn.empty", "ttnn.arange", "ttnn.constant"}
LAYOUT = {"ttnn.to_layout", "ttnn.to_device", "ttnn.from_device", "ttnn.to_memory_config", "ttnn.to_dtype"}
PLUMBING = {"ttnn.deallocate", "ttnn.get_device", "ttcore.load_cached"}


def _rank(kind: str) -> int:
    for rank, kinds in enumerate((MATRIX_ENGINE, REDUCTIONS)):
        if kind in kinds:
            return rank
    return {**dict.fromkeys(DATA_MOVEMENT, 3), **dict.fromkeys(CREATION, 4), **dict.fromkeys(LAYOUT, 5)}.get(kind, 2)


def principal_op(kinds: Sequence[str]) -> str | None:
    """The op kind a program's agreement with ttsim is put down to, from its op kinds in program
    order (opbyop.device.program.emitted_ops); None for a program of plumbing only."""
    ops = [k for k in kinds if k not in PLUMBING]
    return min(ops, key=lambda k: (_rank(k), ops.index(k))) if ops else None


def as_model_dtype(ttsim: np.ndarray, model: np.ndarray | None, program_dtype: str) -> np.ndarray:
    """ttsim's output in the element type the model's run handed over (lossless: ttsim reads bf16 as f32)."""
    if model is not None and model.size == ttsim.size:  # a rank-0 value may come back as [1]
        return ttsim.reshape(model.shape).astype(model.dtype)
    return ttsim.astype(BF16) if program_dtype == "bf16" else ttsim


def ulps(a: np.ndarray, b: np.ndarray) -> float:
    """The largest distance in f32 units in the last place (NaN beside NaN: 0; NaN beside a number: inf)."""
    x = np.ascontiguousarray(a, dtype=np.float32).view(np.int32).astype(np.int64)
    y = np.ascontiguousarray(b, dtype=np.float32).view(np.int32).astype(np.int64)
    # order the bit patterns along the number line: negatives count down from zero
    x = np.where(x < 0, -(x & 0x7FFFFFFF), x)
    y = np.where(y < 0, -(y & 0x7FFFFFFF), y)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    distance = np.abs(x - y).astype(np.float64)
    distance[nan_a & nan_b] = 0.0
    distance[nan_a ^ nan_b] = np.inf
    return float(distance.max()) if distance.size else 0.0


def bit_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """The same bits, element by element (a NaN beside a NaN counts as equal, whatever its payload)."""
    b = b.astype(a.dtype)
    if a.dtype.kind == "f" or a.dtype == BF16:
        both_nan = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
        a, b = np.where(both_nan, 0, a).astype(a.dtype), np.where(both_nan, 0, b).astype(a.dtype)
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def agreement(model: Sequence[np.ndarray], ttsim: Sequence[np.ndarray]) -> tuple[str, float | None]:
    """("bit_equal" | "within_ulps" | "differ", the largest f32 ulps distance, None without f32 outputs)."""
    if len(model) != len(ttsim):
        return "differ", None
    worst: float | None = None
    for a, b in zip(model, ttsim):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return "differ", None
        if a.dtype != np.float32 and a.dtype != np.float64:  # integers, booleans, bf16: bit for bit
            if not bit_equal(a, b):
                return "differ", None
            continue
        distance = ulps(a, b)
        worst = distance if worst is None else max(worst, distance)
    if not worst:
        return "bit_equal", worst
    return ("within_ulps" if worst <= ULPS_TOLERATED else "differ"), worst


def difference(model: Sequence[np.ndarray], ttsim: Sequence[np.ndarray]) -> tuple[float | None, str | None]:
    """(the largest |model - ttsim| relative to its output's scale, its kind: rounding | sign |
    magnitude | nonfinite | shape), over every output; (0.0, None) when they are the same values.
    An output's scale is its largest finite magnitude on ttsim (the model's where ttsim's is 0; 1
    where both are 0)."""
    if len(model) != len(ttsim):
        return None, "shape"
    worst, kind = 0.0, None
    for a, b in zip(model, ttsim):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return None, "shape"
        if a.dtype.kind not in "fiub" and a.dtype != BF16 or a.size == 0:
            continue
        x, y = np.asarray(a, np.float64).reshape(-1), np.asarray(b, np.float64).reshape(-1)
        nan_x, nan_y = np.isnan(x), np.isnan(y)
        finite = np.isfinite(x) & np.isfinite(y)
        if np.any(nan_x ^ nan_y) or np.any(~finite & ~(nan_x & nan_y) & (x != y)):
            return float("inf"), "nonfinite"
        if not finite.any():
            continue
        x, y = x[finite], y[finite]
        scale = np.abs(y).max() or np.abs(x).max() or 1.0
        apart = np.abs(x - y) / scale
        at = int(np.argmax(apart))
        if apart[at] <= worst:
            continue
        worst = float(apart[at])
        if worst <= SCALE_ROUNDING:
            kind = "rounding"
        else:
            kind = "sign" if np.sign(x[at]) * np.sign(y[at]) < 0 else "magnitude"
    return worst, kind if worst > 0 else None
