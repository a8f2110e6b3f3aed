"""MLIR element types <-> numpy dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np

_MLIR_TO_NUMPY: dict[str, np.dtype] = {
    "f64": np.dtype(np.float64), "f32": np.dtype(np.float32), "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "i1": np.dtype(np.bool_), "i8": np.dtype(np.int8), "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32), "i64": np.dtype(np.int64),
    "ui8": np.dtype(np.uint8), "ui16": np.dtype(np.uint16), "ui32": np.dtype(np.uint32),
    "ui64": np.dtype(np.uint64),
    "complex<f32>": np.dtype(np.complex64), "complex<f64>": np.dtype(np.complex128),
}


_NUMPY_TO_MLIR: dict[np.dtype, str] = {v: k for k, v in _MLIR_TO_NUMPY.items()}


def mlir_dtype(dtype: np.dtype | str) -> str:
    """numpy dtype -> MLIR element type (float32 -> f32, int64 -> i64, bool -> i1 ...)."""
    try:
        return _NUMPY_TO_MLIR[np.dtype(dtype)]
    except KeyError:
        raise ValueError(f"no MLIR element type for numpy dtype {dtype}") from None


def numpy_dtype(mlir: str) -> np.dtype:
    try:
        return _MLIR_TO_NUMPY[mlir]
    except KeyError:
        raise ValueError(f"no numpy dtype for MLIR element type {mlir}") from None


def is_float(mlir: str) -> bool:
    return mlir in ("f64", "f32", "f16", "bf16")
