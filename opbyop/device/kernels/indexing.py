"""Ops that address elements by index: tt-mlir's row gathers and scatters, dynamic slices, sort, topk.

`ttnn.rows_gather` / `ttnn.rows_scatter` are how this tt-mlir lowers StableHLO gather, scatter,
dynamic_update_slice and pad-like updates (read from the programs it emits; the ops are not in the
public tt-mlir sources this was checked against, so their semantics are taken from what the
compiler builds around them and checked against XLA through the corpus):
- the operand is (pre, *sizes, rest): `sizes` are the dimensions an index vector addresses (or a
  factoring of them: 1x64x64 over [2, 32]), `pre` what comes before them, `rest` what comes after
  (none when `column`: the vectors address single elements); a scatter on dimension 1 of a 3x5x4
  operand is 3, [5], 4. With index vectors per row, pre is their batch; else `rest` is the
  trailing dimensions the operand shares with the result (gather) or the updates (scatter):
  1x8x16x2 gathered over [8] into 1x3x16x2 is 1, [8], 16x2;
- indices are (batch, len(sizes), n): n index vectors, one coordinate per entry of `sizes`, the
  batch being 1 (the same vectors for every `pre` row) or `pre` (vectors of their own per row);
- each vector is the start of a window of `windows` elements over the `sizes` dimensions;
- gather: out (pre, n, *windows, rest); window starts are clamped into the operand as
  StableHLO's gather clamps them (or out-of-range elements are zero with `fill_out_of_bounds`);
- scatter: updates (pre, n, *windows, rest) combine into the operand with `reduce` (invalid =
  replace, sum, max, min, prod); a window that does not fit is skipped, as StableHLO's scatter does.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from opbyop.device.kernels.base import Call, NotSimulated


def pre_and_rest(shape: tuple[int, ...], sizes: list[int], result: tuple[int, ...], batch: int,
                 column: bool) -> tuple[int, int] | None:
    """Element counts before and after the `sizes` dimensions. With index vectors per row (batch
    above 1) there are `batch` rows; else the trailing dimensions the operand shares with `result`
    (as many as divide what is not `sizes`) come after, the rest before."""
    per_row = int(np.prod(sizes))
    if not per_row or int(np.prod(shape)) % per_row:
        return None
    outside = int(np.prod(shape)) // per_row
    if batch > 1:
        return (batch, outside // batch) if outside % batch == 0 else None
    if column:  # single elements: nothing comes after the addressed dimensions
        return outside, 1
    shared = 0
    for a, b in zip(reversed(shape), reversed(result)):
        if a != b:
            break
        shared += 1
    while shared >= 0:
        trail = int(np.prod(shape[len(shape) - shared:])) if shared else 1
        if outside % trail == 0:
            return outside // trail, trail
        shared -= 1
    return None


def _geometry(call: Call, x: np.ndarray, indices: np.ndarray, result: tuple[int, ...]
              ) -> tuple[list[int], list[int], int, int, np.ndarray]:
    """(sizes, windows, pre, rest, starts[pre, n, coords]): the operand read as (pre, *sizes, rest)."""
    sizes = [int(s) for s in call.attr("sizes")]
    windows = [int(w) for w in call.attr("windows", [1] * len(sizes))]
    if len(windows) != len(sizes):
        raise NotSimulated(f"{call.op.name} with windows {windows} over sizes {sizes}")
    batch = indices.shape[0] if indices.ndim == 3 else 1
    split = pre_and_rest(tuple(x.shape), sizes, tuple(result), batch, bool(call.attr("column", False)))
    if split is None or indices.size % (batch * len(sizes)):
        raise NotSimulated(f"{call.op.name} of {x.shape} by indices {indices.shape} over sizes {sizes} into {result}")
    pre, rest = split
    starts = indices.reshape(batch, len(sizes), -1).astype(np.int64).transpose(0, 2, 1)
    return sizes, windows, pre, rest, np.broadcast_to(starts, (pre,) + starts.shape[1:])


def _window_index(sizes: list[int], windows: list[int]) -> np.ndarray:
    """Offsets of every element of one window, as coordinates: (prod(windows), len(sizes))."""
    grids = np.meshgrid(*[np.arange(w) for w in windows], indexing="ij")
    return np.stack([g.reshape(-1) for g in grids], axis=1) if grids else np.zeros((1, 0), np.int64)


def _blocks(count: int, per_item: int) -> list[slice]:
    """Blocks of index vectors, in order: a model's gather or scatter holds millions of vectors,
    taken a block at once, each block bounding the index arrays to a few million entries."""
    step = max(1, (1 << 22) // max(1, per_item))
    return [slice(first, min(first + step, count)) for first in range(0, count, step)]


def _flat_cells(start: np.ndarray, offsets: np.ndarray, sizes: list[int]) -> np.ndarray:
    """Flat positions over `sizes` of every cell of the windows starting at `start` (m, len(sizes)):
    (m, cells per window)."""
    coords = start[:, None, :] + offsets[None, :, :]
    return np.ravel_multi_index(tuple(np.moveaxis(coords, -1, 0)), sizes)


def _rows_gather(call: Call) -> list:
    x, indices = (np.asarray(t) for t in call.tensors[:2])
    sizes, windows, pre, rest, starts = _geometry(call, x, indices, call.out_shape)
    table = x.reshape(pre, int(np.prod(sizes)), rest)
    offsets = _window_index(sizes, windows)
    limit = np.array(sizes) - np.array(windows)
    fill = bool(call.attr("fill_out_of_bounds", False))
    n = starts.shape[1]
    rows = starts.reshape(pre * n, len(sizes))  # one index vector per (b, i), b major
    out = np.empty((pre * n, offsets.shape[0], rest), dtype=x.dtype)
    for block in _blocks(pre * n, offsets.size):
        start = rows[block]
        row_of = np.arange(block.start, block.stop) // n
        out[block] = table[row_of[:, None], _flat_cells(np.clip(start, 0, np.maximum(limit, 0)), offsets, sizes)]
        if fill:  # a window that does not fit reads as zeros, whole
            out[block][~np.all((start >= 0) & (start <= limit), axis=-1)] = 0
    return [out.reshape(call.out_shape)]


_COMBINE: dict[str, np.ufunc | None] = {
    "invalid": None, "none": None, "sum": np.add, "add": np.add, "max": np.maximum, "min": np.minimum,
    "prod": np.multiply, "mul": np.multiply,
}


def _rows_scatter(call: Call) -> list:
    x, indices, updates = (np.asarray(t) for t in call.tensors[:3])
    sizes, windows, pre, rest, starts = _geometry(call, x, indices, updates.shape)
    reduce = str(call.attr("reduce", "invalid")).lower()
    if reduce not in _COMBINE:
        raise NotSimulated(f"ttnn.rows_scatter with reduce {reduce}")
    combine = _COMBINE[reduce]
    cells = int(np.prod(sizes))
    out = x.reshape(pre * cells, rest).copy()
    offsets = _window_index(sizes, windows)
    n = starts.shape[1]
    values = updates.astype(out.dtype, copy=False).reshape(pre * n, offsets.shape[0], rest)
    limit = np.array(sizes) - np.array(windows)
    rows = starts.reshape(pre * n, len(sizes))
    for block in _blocks(pre * n, offsets.size):
        start = rows[block]
        fits = np.all((start >= 0) & (start <= limit), axis=-1)  # a window that does not fit is skipped
        row_of = np.arange(block.start, block.stop)[fits] // n
        where = (row_of[:, None] * cells + _flat_cells(start[fits], offsets, sizes)).reshape(-1)
        update = values[block][fits].reshape(-1, rest)
        if combine is None:  # replace: with repeated indices the last update wins, as in order
            last = len(where) - 1 - np.unique(where[::-1], return_index=True)[1]
            out[where[last]] = update[last]
        else:  # ufunc.at combines repeated positions one after another, in order
            combine.at(out, where, update)
    return [out.reshape(call.out_shape)]


def _slice_dynamic(call: Call) -> list:
    """x[begins:ends:step] with begins and ends as device tensors (already clamped by the program)."""
    x = np.asarray(call.tensors[0])
    begins, ends = (np.asarray(t).reshape(-1).astype(np.int64) for t in call.tensors[1:3])
    steps = call.attr("step") or [1] * x.ndim
    index = tuple(slice(int(b), int(e), int(s)) for b, e, s in zip(begins, ends, steps))
    return [x[index].reshape(call.out_shape)]


def _stable_order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable argsort along `axis`; descending keeps equal elements in their original order too."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    _, codes = np.unique(x, return_inverse=True)  # ranks work for every dtype (no negation overflow)
    return np.argsort(-codes.reshape(x.shape), axis=axis, kind="stable")


def _sort(call: Call) -> list:
    x = np.asarray(call.tensors[0])
    axis = int(call.attr("dim", -1))
    order = _stable_order(x, axis, bool(call.attr("descending", False)))
    return [np.take_along_axis(x, order, axis=axis), order]


def _topk(call: Call) -> list:
    x = np.asarray(call.tensors[0])
    axis, k = int(call.attr("dim", -1)), int(call.attr("k"))
    order = _stable_order(x, axis, bool(call.attr("largest", True)))
    order = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, order, axis=axis), order]


KERNELS: dict[str, Callable[[Call], list]] = {
    "ttnn.rows_gather": _rows_gather, "ttnn.rows_scatter": _rows_scatter, "ttnn.slice_dynamic": _slice_dynamic,
    "ttnn.sort": _sort, "ttnn.topk": _topk,
}
