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


_BATCH_NORM_OPERANDS = ("input", "running_mean", "running_var", "weight", "bias")


def _batch_norm_operands(call: Call) -> dict[str, np.ndarray]:
    """ttnn.batch_norm_* operands by name; `operandSegmentSizes` says which optional ones are there."""
    sizes = call.attr("operandSegmentSizes") or [1] * len(call.tensors)
    names = [n for n, present in zip(_BATCH_NORM_OPERANDS, sizes) if int(present)]
    return {n: np.asarray(t, dtype=np.float32) for n, t in zip(names, call.tensors)}


def _affine_channels(x: np.ndarray, mean: np.ndarray, var: np.ndarray, eps: float, ops: dict) -> np.ndarray:
    out = (x - mean) / np.sqrt(var + np.float32(eps))
    if "weight" in ops:
        out = out * ops["weight"]
    if "bias" in ops:
        out = out + ops["bias"]
    return out


def _batch_norm_inference(call: Call) -> list:
    """Channels on dimension 1, statistics shaped (1, C, 1, 1) (ttnn.batch_norm, training=False)."""
    ops = _batch_norm_operands(call)
    eps = float(call.attr("epsilon", 1e-5))
    return [_affine_channels(ops["input"], ops["running_mean"], ops["running_var"], eps, ops)]


def _batch_norm_training(call: Call) -> list:
    """Normalised by the batch's own statistics (population variance, as StableHLO's
    batch_norm_training defines them); also returns them."""
    ops = _batch_norm_operands(call)
    x = ops["input"]
    axes = tuple(i for i in range(x.ndim) if i != 1)
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float32)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True, dtype=np.float32)
    eps = float(call.attr("epsilon", 1e-5))
    return [_affine_channels(x, mean, var, eps, ops), mean, var]


def _cumsum(call: Call) -> list:
    x = np.asarray(call.tensors[0])
    return [np.cumsum(x, axis=int(call.attr("dim", 0)), dtype=x.dtype if x.dtype.kind in "iu" else np.float32)]


KERNELS: dict[str, Callable[[Call], list]] = {
    "ttnn.sum": _reduce(np.sum), "ttnn.mean": _reduce(np.mean), "ttnn.max": _reduce(np.max),
    "ttnn.min": _reduce(np.min), "ttnn.prod": _reduce(np.prod), "ttnn.argmax": _argmax,
    "ttnn.softmax": _softmax, "ttnn.rms_norm": _rms_norm, "ttnn.layer_norm": _layer_norm,
    "ttnn.moreh_cumsum": _cumsum, "ttnn.cumsum": _cumsum,
    "ttnn.batch_norm_inference": _batch_norm_inference, "ttnn.batch_norm_training": _batch_norm_training,
}
