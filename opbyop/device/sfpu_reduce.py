"""f32 sums on the vector unit (SFPU), bit for bit as ttsim runs tt-metal's accurate f32 reduction.

tt-metal reduces FLOAT32 data on the SFPU, not the matrix engine, unless asked for
`fast_and_approximate_mode` (ttnn/cpp/ttnn/kernel_lib/reduce_helpers_compute.inl,
is_sfpu_reduce_path; the kernels in tt_metal/hw/ckernels/blackhole/.../ckernel_sfpu_reduce.h):
- the input tiles along the reduced axis are copied into the destination register unchanged and
  folded element by element, one tile after another (add_binary_tile: ((t0 + t1) + t2) ...);
- the folded tile is then reduced within itself. Over a row (REDUCE_ROW): each SFPU lane holds the
  even (or odd) columns of a face row; for lane c of a row, v_c = x[2c] + (x[2c+1] + (x[16+2c] +
  x[17+2c])) (the recorded tree A1..A3), then a three-stage butterfly across the 8 lanes (distances
  4, 2, 1); column 0 holds ((v0 + v4) + (v2 + v6)) + ((v3 + v7) + (v1 + v5)). Over a column
  (REDUCE_COL): per face half, rows q, q+4, q+8, q+12 summed as r_q + (r_q+4 + (r_q+8 + r_q+12)),
  the upper half plus the lower, then the four partials s0 + (s1 + (s2 + s3)) after SFPTRANSP.
- Every addition is SFPADD, ttsim's fma_model_bh(1.0, a, b): the f32 sum rounded to nearest even,
  with denormal inputs and results flushed to zero.
- A mean is that sum times f32(1 / N) (the post-reduce scalar, SFPMUL, same rounding).
- Several axes: the last axis first, then the one before it; any other axis is moved next to the
  last and reduced as a column (ttnn reduces it as H), one after another from the innermost.
Tiles are padded with zeros, which change no sum.
"""

from __future__ import annotations

import numpy as np

TILE = 32
_SMALLEST_NORMAL = np.float32(np.finfo(np.float32).tiny)


def flush(x: np.ndarray) -> np.ndarray:
    """Denormals to (signed) zero, as the SFPU reads and writes f32."""
    x = np.asarray(x, np.float32)
    return np.where(np.abs(x) < _SMALLEST_NORMAL, x * np.float32(0), x).astype(np.float32)


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SFPADD: a + b rounded to nearest even, denormals flushed on the way in and out."""
    with np.errstate(over="ignore", invalid="ignore"):
        return flush(np.add(flush(a), flush(b), dtype=np.float32))


def multiply(a: np.ndarray, b: np.ndarray | np.float32) -> np.ndarray:
    """SFPMUL (fma with a zero addend): a * b rounded to nearest even, denormals flushed."""
    with np.errstate(over="ignore", invalid="ignore"):
        return flush(np.multiply(flush(a), flush(np.float32(b)), dtype=np.float32))


def _tiles(x: np.ndarray) -> np.ndarray:
    """(..., H, W) zero-padded to whole tiles, as (..., Ht, Wt, 32, 32)."""
    h, w = x.shape[-2:]
    x = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, -h % TILE), (0, -w % TILE)])
    ht, wt = x.shape[-2] // TILE, x.shape[-1] // TILE
    return x.reshape(x.shape[:-2] + (ht, TILE, wt, TILE)).swapaxes(-3, -2)


def _fold(tiles: np.ndarray, axis: int) -> np.ndarray:
    """add_binary_tile over the tiles along `axis`, first to last."""
    acc = np.take(tiles, 0, axis=axis)
    for k in range(1, tiles.shape[axis]):
        acc = add(acc, np.take(tiles, k, axis=axis))
    return acc


def _row_sums(t: np.ndarray) -> np.ndarray:
    """(..., 32, 32) tiles -> (..., 32) row sums, as perform_reduce_row_sum_tile leaves them in column 0."""
    v = add(t[..., 0:16:2], add(t[..., 1:16:2], add(t[..., 16::2], t[..., 17::2])))  # lanes c = 0..7
    pairs = add(v[..., 0:4], v[..., 4:8])  # butterfly distance 4: lanes c and c + 4
    return add(add(pairs[..., 0], pairs[..., 2]), add(pairs[..., 3], pairs[..., 1]))


def _column_sums(t: np.ndarray) -> np.ndarray:
    """(..., 32, 32) tiles -> (..., 32) column sums, as perform_reduce_col_sum_avg leaves them in row 0."""
    def tree(face_rows: np.ndarray) -> np.ndarray:
        return add(face_rows[..., 0:4, :], add(face_rows[..., 4:8, :],
                                               add(face_rows[..., 8:12, :], face_rows[..., 12:16, :])))
    s = add(tree(t[..., :16, :]), tree(t[..., 16:, :]))
    return add(s[..., 0, :], add(s[..., 1, :], add(s[..., 2, :], s[..., 3, :])))


def sum_last(x: np.ndarray) -> np.ndarray:
    """The sum over the last axis (REDUCE_ROW), keeping it (size 1)."""
    x = np.asarray(x, np.float32)
    x2 = x.reshape(x.shape[:-1] + (1,) + x.shape[-1:]) if x.ndim == 1 else x
    out = _row_sums(_fold(_tiles(x2), -3))  # (..., Ht, 32)
    out = out.reshape(out.shape[:-2] + (-1,))[..., :x2.shape[-2], None]
    return out.reshape(x.shape[:-1] + (1,))


def sum_rows(x: np.ndarray, axis: int) -> np.ndarray:
    """The sum over `axis` (not the last) as a column reduction (REDUCE_COL), keeping it (size 1)."""
    x = np.moveaxis(np.asarray(x, np.float32), axis, -2)
    out = _column_sums(_fold(_tiles(x), -4))  # (..., Wt, 32)
    out = out.reshape(out.shape[:-2] + (-1,))[..., None, :x.shape[-1]]
    return np.moveaxis(out, -2, axis)


def reduce_sum(x: np.ndarray, axes: tuple[int, ...], scale: float | None = None) -> np.ndarray:
    """The sum over `axes` (non-negative, kept as size 1), times f32 `scale` when given (a mean)."""
    out = np.asarray(x, np.float32)
    if out.ndim == 0:
        out = out.reshape(1)
    last = out.ndim - 1
    for axis in sorted(axes, reverse=True):
        out = sum_last(out) if axis == last else sum_rows(out, axis)
    return out if scale is None else multiply(out, np.float32(scale))
