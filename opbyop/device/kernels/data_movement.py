"""Ops that move, copy or reshape data; the values themselves do not change."""

from __future__ import annotations

from typing import Callable

import numpy as np

from opbyop.device.kernels.base import Call, NotSimulated, shape_attr


def _to_result_shape(call: Call) -> list:
    """reshape / squeeze / unsqueeze / to_layout / typecast / memory moves: same values."""
    x = np.asarray(call.tensors[0])
    return [x.reshape(call.out_shape)]


def _permute(call: Call) -> list:
    return [np.transpose(np.asarray(call.tensors[0]), call.attr("permutation"))]


def _transpose(call: Call) -> list:
    return [np.swapaxes(np.asarray(call.tensors[0]), int(call.attr("dim0")), int(call.attr("dim1")))]


def _slice(call: Call) -> list:
    x = np.asarray(call.tensors[0])
    begins, ends = call.attr("begins"), call.attr("ends")
    steps = call.attr("step") or [1] * x.ndim
    index = tuple(slice(int(b), int(e), int(s)) for b, e, s in zip(begins, ends, steps))
    return [x[index]]


def _concat(call: Call) -> list:
    return [np.concatenate([np.asarray(t) for t in call.tensors], axis=int(call.attr("dim", 0)))]


def _repeat(call: Call) -> list:
    return [np.tile(np.asarray(call.tensors[0]), shape_attr(call.attr("repeat_dims")))]


def _repeat_interleave(call: Call) -> list:
    return [np.repeat(np.asarray(call.tensors[0]), int(call.attr("repeats")), axis=int(call.attr("dim", 0)))]


def _pad(call: Call) -> list:
    x = np.asarray(call.tensors[0])
    flat = [int(p) for p in call.attr("padding")]
    pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    pairs = [(0, 0)] * (x.ndim - len(pairs)) + pairs
    return [np.pad(x, pairs, constant_values=call.attr("value", 0.0))]


def _embedding(call: Call) -> list:
    ids, weight = (np.asarray(t) for t in call.tensors[:2])
    return [weight[np.clip(ids.astype(np.int64), 0, weight.shape[0] - 1)].reshape(call.out_shape)]


def _rows_gather(call: Call) -> list:
    """tt-mlir's lowering of gathers: index vectors (one coordinate per entry of `sizes`) pick rows.

    The operand is viewed as (prod(sizes), rest): each index vector addresses one row; with
    `column` the rows are single elements. The indices tensor is (1, coordinates, n) as tt-mlir
    builds it. Only 1-element windows are supported.
    """
    x, indices = (np.asarray(t) for t in call.tensors[:2])
    sizes = [int(s) for s in call.attr("sizes")]
    windows = [int(w) for w in call.attr("windows")]
    if any(w != 1 for w in windows):
        raise NotSimulated(f"ttnn.rows_gather with windows {windows}")
    rows = int(np.prod(sizes))
    if indices.size % len(sizes) or x.size % rows:
        raise NotSimulated(f"ttnn.rows_gather of {x.shape} by indices {indices.shape} over sizes {sizes}")
    coords = indices.reshape(len(sizes), -1).astype(np.int64)
    linear = np.ravel_multi_index(tuple(np.clip(c, 0, s - 1) for c, s in zip(coords, sizes)), sizes)
    return [x.reshape(rows, -1)[linear].reshape(call.out_shape)]


KERNELS: dict[str, Callable[[Call], list]] = {
    **{name: _to_result_shape for name in (
        "ttnn.reshape", "ttnn.squeeze", "ttnn.unsqueeze", "ttnn.to_layout", "ttnn.typecast",
        "ttnn.to_memory_config", "ttnn.to_device", "ttnn.from_device", "ttnn.to_dtype", "ttnn.clone")},
    "ttnn.permute": _permute, "ttnn.transpose": _transpose, "ttnn.slice_static": _slice,
    "ttnn.concat": _concat, "ttnn.repeat": _repeat, "ttnn.repeat_interleave": _repeat_interleave,
    "ttnn.pad": _pad, "ttnn.embedding": _embedding, "ttnn.rows_gather": _rows_gather,
}
