"""Name the element types the compiled program changed: the chip has no f64, i64, ui64 or complex.

tt-mlir narrows what the chip lacks (i64 -> si32, ui64 -> u32, f64 -> f32 ...). A result that
differs because of it is still the device's result, but the record must say so by name, in its own
field, so that such ops can be counted and queried: "input 0 i64 compiled as si32: value
-9223372036854775808 not representable".
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from opbyop.dtypes import mlir_dtype

# What the program's element type is called in the StableHLO the op came from.
_SAME = {("f32", "f32"), ("bf16", "bf16"), ("f16", "f16"), ("i32", "si32"), ("i1", "i1"), ("ui32", "u32"),
         ("ui16", "u16"), ("ui8", "u8")}
# Ranges of the program's integer types.
_INT_RANGE = {"si32": (-2**31, 2**31 - 1), "u32": (0, 2**32 - 1), "u16": (0, 2**16 - 1), "u8": (0, 2**8 - 1)}
_FLOAT_MAX = {"f32": float(np.finfo(np.float32).max), "bf16": float(np.finfo(np.float32).max),
              "f16": float(np.finfo(np.float16).max)}


def changed(source: str, compiled: str) -> bool:
    return source != compiled and (source, compiled) not in _SAME


def unrepresentable(values: np.ndarray, compiled: str) -> str | None:
    """The first value that the compiled type cannot hold (as text), or None."""
    v = np.asarray(values)
    if v.size == 0 or np.iscomplexobj(v):
        return None
    if compiled in _INT_RANGE and v.dtype.kind in "iub":
        low, high = _INT_RANGE[compiled]
        bad = v[(v < low) | (v > high)] if v.dtype.kind != "u" else v[v > high]
        return str(bad.reshape(-1)[0]) if bad.size else None
    if compiled in _FLOAT_MAX and v.dtype.kind == "f":
        finite = v[np.isfinite(v)]
        bad = finite[np.abs(finite.astype(np.float64)) > _FLOAT_MAX[compiled]]
        return repr(float(bad.reshape(-1)[0])) if bad.size else None
    return None


def describe(kind: str, index: int, source: str, compiled: str, values: np.ndarray | None = None) -> str:
    text = f"{kind} {index} {source} compiled as {compiled}"
    bad = unrepresentable(values, compiled) if values is not None else None
    return text + (f": value {bad} not representable" if bad is not None else "")


class Typed(Protocol):
    shape: tuple[int, ...]
    dtype: str


def split_in_words(source: Typed, compiled: Typed) -> bool:
    """A 64-bit integer or a complex value held as a trailing dimension of 2 (lossless, not narrowed)."""
    return tuple(compiled.shape) == tuple(source.shape) + (2,)


def narrowing(source_inputs: Sequence[Typed], compiled_inputs: Sequence[Typed | None],
              source_outputs: Sequence[Typed], compiled_outputs: Sequence[Typed | None],
              inputs: Sequence[np.ndarray] = (), constants: Sequence[tuple[str, np.ndarray]] = ()) -> str | None:
    """Every type the program changed, '; '-joined, or None when it kept them all.

    `constants`: (compiled type, value) of 64-bit constants inside the op's module that the program
    narrows (their values decide whether the narrowing lost anything)."""
    parts: list[str] = []
    for i, (src, dst) in enumerate(zip(source_inputs, compiled_inputs)):
        if dst is not None and changed(src.dtype, dst.dtype) and not split_in_words(src, dst):
            parts.append(describe("input", i, src.dtype, dst.dtype, inputs[i] if i < len(inputs) else None))
    for i, (src, dst) in enumerate(zip(source_outputs, compiled_outputs)):
        if dst is not None and changed(src.dtype, dst.dtype) and not split_in_words(src, dst):
            parts.append(describe("output", i, src.dtype, dst.dtype))
    for i, (dst_dtype, value) in enumerate(constants):
        src_dtype = _mlir_name(value)
        if changed(src_dtype, dst_dtype):
            parts.append(describe("constant", i, src_dtype, dst_dtype, value))
    return "; ".join(parts) or None


def narrowed_type(source: str) -> str | None:
    """What tt-mlir compiles a type the chip lacks as (for constants inside a module)."""
    return {"i64": "si32", "ui64": "u32", "f64": "f32"}.get(source)


def _mlir_name(value: np.ndarray) -> str:
    return mlir_dtype(np.asarray(value).dtype)
