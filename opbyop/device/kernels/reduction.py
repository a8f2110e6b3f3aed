"""Reductions and normalisations (accumulated in f32)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from opbyop.device.kernels.base import Call


def _dims(call: Call, ndim: int) -> tuple[int, ...] | None:
    dims = call.attr("dim_arg")
    if dims is None:
        return None
    dims = dims if isinstance(dims, list) else [dims]
    return tuple(int(d) % ndim for d in dims)


def _reduce(fn: Callable) -> Callable[[Call], list]:
    def kernel(call: Call) -> list:
        x = np.asarray(call.tensors[0])
        x = x if x.dtype.kind in "iu" else x.astype(np.float32)
        out = fn(x, axis=_dims(call, x.ndim), keepdims=bool(call.attr("keep_dim", False)))
        return [np.asarray(out).reshape(call.out_shape)]
    return kernel


def _argmax(call: Call) -> list:
    x = np.asarray(call.tensors[0], dtype=np.float32)
    dim = call.attr("dim")
    out = np.argmax(x, axis=None if dim is None else int(dim))
    return [np.asarray(out).reshape(call.out_shape)]


def _softmax(call: Call) -> list:
    x = np.asarray(call.tensors[0], dtype=np.float32)
    dim = int(call.attr("dimension", -1))
    shifted = x - x.max(axis=dim, keepdims=True)
    e = np.exp(shifted)
    return [e / e.sum(axis=dim, keepdims=True)]


def _affine(call: Call, normalised: np.ndarray) -> list:
    """A norm's optional weight (second operand) and bias (third)."""
    weight_bias = call.tensors[1:3]
    if len(weight_bias) >= 1:
        normalised = normalised * weight_bias[0]
    if len(weight_bias) >= 2:
        normalised = normalised + weight_bias[1]
    return [normalised]


def _rms_norm(call: Call) -> list:
    x = np.asarray(call.tensors[0], dtype=np.float32)
    eps = float(call.attr("epsilon", 1e-5))
    return _affine(call, x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def _layer_norm(call: Call) -> list:
    x = np.asarray(call.tensors[0], dtype=np.float32)
    eps = float(call.attr("epsilon", 1e-5))
    centred = x - x.mean(axis=-1, keepdims=True)
    return _affine(call, centred / np.sqrt((centred ** 2).mean(axis=-1, keepdims=True) + eps))


def _cumsum(call: Call) -> list:
    x = np.asarray(call.tensors[0])
    return [np.cumsum(x, axis=int(call.attr("dim", 0)), dtype=x.dtype if x.dtype.kind in "iu" else np.float32)]


KERNELS: dict[str, Callable[[Call], list]] = {
    "ttnn.sum": _reduce(np.sum), "ttnn.mean": _reduce(np.mean), "ttnn.max": _reduce(np.max),
    "ttnn.min": _reduce(np.min), "ttnn.prod": _reduce(np.prod), "ttnn.argmax": _argmax,
    "ttnn.softmax": _softmax, "ttnn.rms_norm": _rms_norm, "ttnn.layer_norm": _layer_norm,
    "ttnn.moreh_cumsum": _cumsum, "ttnn.cumsum": _cumsum,
}
