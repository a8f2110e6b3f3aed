"""Deterministic inputs for a single-op module: same op + same seed = same values, in any process.

Index operands (gather, scatter, dynamic_slice, dynamic_update_slice) are drawn within the bounds
of what they index; ops with a restricted domain (log, sqrt, rsqrt, divide's divisor ...) get
values inside it, so a golden NaN means a real problem, not a bad draw.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np

from opbyop.dtypes import is_float, numpy_dtype
from opbyop.records import OperandDesc, TensorDesc

# op name -> operand indices that must be drawn from (0.5, 2.0)
POSITIVE_OPERANDS: dict[str, tuple[int, ...]] = {
    "stablehlo.log": (0,), "stablehlo.sqrt": (0,), "stablehlo.rsqrt": (0,),
    "stablehlo.log_plus_one": (0,), "stablehlo.cbrt": (0,), "stablehlo.divide": (1,),
    "stablehlo.remainder": (1,), "stablehlo.power": (0,), "stablehlo.atan2": (1,),
}


def op_seed(seed: int, signature: str) -> int:
    digest = hashlib.sha256(f"{seed}:{signature}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _index_bounds(op_name: str, operand: int, operands: Sequence[OperandDesc],
                  attributes: dict[str, Any]) -> int | None:
    """Exclusive upper bound for an index operand, or None when the operand is not an index."""
    shapes = {o.index: o.tensor.shape for o in operands}
    if op_name == "stablehlo.gather" and operand == 1:
        dims = attributes.get("dimension_numbers", {}).get("start_index_map", [])
        sizes = attributes.get("slice_sizes", [1] * len(shapes[0]))
        return max(1, min((shapes[0][d] - sizes[d] + 1 for d in dims), default=1))
    if op_name == "stablehlo.scatter" and operand == 1:
        dims = attributes.get("scatter_dimension_numbers", {}).get("scattered_dims_to_operand_dims", [])
        return max(1, min((shapes[0][d] for d in dims), default=1))
    if op_name == "stablehlo.dynamic_slice" and operand >= 1:
        d = operand - 1
        return max(1, shapes[0][d] - attributes.get("slice_sizes", [1] * len(shapes[0]))[d] + 1)
    if op_name == "stablehlo.dynamic_update_slice" and operand >= 2:
        d = operand - 2
        return max(1, shapes[0][d] - shapes[1][d] + 1)
    return None


# Ops that sum their inputs: 8-bit integers are drawn from {0, 1} so that the sums stay in range
# (how the chip converts an out-of-range sum back to 8 bits is not the question these ops ask).
_ACCUMULATING = {"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution", "stablehlo.reduce",
                 "stablehlo.reduce_window"}


# Above this many elements a tensor is drawn in pieces of this size: the values are the same (the
# generator's stream is consumed in order), and no full-size f64 temporary is made (an 8192x128256
# bf16 weight is 2 GiB; drawn whole in f64 it would be 8 GiB).
DRAW_CHUNK = 1 << 22


def _draw(rng: np.random.Generator, desc: TensorDesc, positive: bool, bound: int | None) -> np.ndarray:
    size = int(np.prod(desc.shape, dtype=np.int64))
    if size <= DRAW_CHUNK or desc.dtype.startswith("complex"):
        return _draw_whole(rng, desc, desc.shape, positive, bound)
    out = aligned_empty(desc.shape, numpy_dtype(desc.dtype))
    flat = out.reshape(-1)
    for start in range(0, size, DRAW_CHUNK):
        piece = (min(DRAW_CHUNK, size - start),)
        flat[start:start + piece[0]] = _draw_whole(rng, desc, piece, positive, bound)
    return out


def aligned_empty(shape: Sequence[int], dtype: np.dtype, alignment: int = 64) -> np.ndarray:
    """An uninitialised array at a 64-byte boundary: XLA:CPU then uses it in place for the golden run
    instead of copying it (a gigabyte weight would be held twice)."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def _draw_whole(rng: np.random.Generator, desc: TensorDesc, shape: Sequence[int], positive: bool,
                bound: int | None) -> np.ndarray:
    dtype = numpy_dtype(desc.dtype)
    if desc.dtype == "i1":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if is_float(desc.dtype):
        values = rng.uniform(0.5, 2.0, size=shape) if positive else rng.standard_normal(size=shape)
        return np.asarray(values).astype(dtype)
    if desc.dtype.startswith("complex"):
        return (rng.standard_normal(size=shape) + 1j * rng.standard_normal(size=shape)).astype(dtype)
    high = bound if bound is not None else 8
    low = 1 if positive else 0
    return np.asarray(rng.integers(low, max(high, low + 1), size=shape)).astype(dtype)


def make_inputs(op_name: str, inputs: Sequence[TensorDesc], operands: Sequence[OperandDesc],
                attributes: dict[str, Any], signature: str, seed: int,
                known: dict[int, np.ndarray] | None = None) -> list[np.ndarray]:
    """One array per argument of the single-op module; `known` (argument -> value) wins over a draw."""
    known = known or {}
    rng = np.random.default_rng(op_seed(seed, signature))
    positive = POSITIVE_OPERANDS.get(op_name, ())
    by_argument: dict[int, OperandDesc] = {}
    for o in operands:
        if o.argument is not None:
            by_argument.setdefault(o.argument, o)
    arrays = []
    for arg, desc in enumerate(inputs):
        operand = by_argument.get(arg)
        index = operand.index if operand is not None else -1
        bound = _index_bounds(op_name, index, operands, attributes)
        if bound is None and op_name in _ACCUMULATING and desc.dtype in ("i8", "ui8"):
            bound = 2
        drawn = _draw(rng, desc, index in positive, bound)  # drawn anyway: the other draws stay as they were
        arrays.append(known[arg] if arg in known else drawn)
    return arrays
