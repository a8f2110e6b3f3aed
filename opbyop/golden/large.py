"""compare's figures for outputs too large to copy whole to f64: the same verdicts, computed over
pieces of the flattened arrays (each piece converted on its own), so a comparison of gigabyte
outputs needs a few pieces' memory instead of several full-size f64 copies.

Maxima, allclose and the constant check are exact; PCC is the same formula with its sums taken
piece by piece (it can differ from the whole-array figure in the last digits). Two passes in all:
everything but PCC's deviations in the first, those in the second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

# Elements per piece; compare uses this module only for outputs larger than one piece.
PIECE = 1 << 22


@dataclass
class Figures:
    max_abs: float
    max_rel: float
    allclose: bool
    constant: bool  # the golden output's finite values are all equal (or there are none)
    pcc: float | None


def pieces(a: np.ndarray, e: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(device, golden) pieces of the flattened outputs as f64."""
    fa, fe = np.asarray(a).reshape(-1), np.asarray(e).reshape(-1)
    for start in range(0, fa.size, PIECE):
        yield (np.asarray(fa[start:start + PIECE], np.float64), np.asarray(fe[start:start + PIECE], np.float64))


def identical(a: np.ndarray, e: np.ndarray) -> bool:
    """The two outputs hold the same bits (same dtype and shape), compared piece by piece in their
    own dtype: what an op that only moves data (transpose, reshape, gather, concatenate) gives."""
    a, e = np.asarray(a), np.asarray(e)
    if a.dtype != e.dtype or a.shape != e.shape or a.dtype.itemsize not in (1, 2, 4, 8):
        return False
    bits = np.dtype(f"u{a.dtype.itemsize}")
    fa, fe = a.reshape(-1), e.reshape(-1)
    for start in range(0, fa.size, PIECE):
        pa = np.ascontiguousarray(fa[start:start + PIECE]).view(bits)
        pe = np.ascontiguousarray(fe[start:start + PIECE]).view(bits)
        if not np.array_equal(pa, pe):
            return False
    return True


def _constant(e: np.ndarray) -> bool:
    """The finite values of `e` are all equal (or there are none)."""
    first: float | None = None
    flat = np.asarray(e).reshape(-1)
    for start in range(0, flat.size, PIECE):
        piece = flat[start:start + PIECE]
        finite = piece[np.isfinite(piece)]
        if finite.size:
            first = float(finite[0]) if first is None else first
            if not bool(np.all(finite == first)):
                return False
    return True


def figures(a: np.ndarray, e: np.ndarray, rtol: float, atol: float) -> Figures:
    """compare._errors' maxima, allclose, the constant check and compare.pcc of two real outputs.
    Outputs equal bit for bit get the figures the pieces would give (no error, PCC 1) from one pass
    in their own dtype: the f64 pieces took 45 s on a 4096x128256 bf16 transpose's output."""
    if identical(a, e):
        constant = _constant(e)
        return Figures(0.0, 0.0, True, constant, None if constant else 1.0)
    return _figures_in_pieces(a, e, rtol, atol)


def _figures_in_pieces(a: np.ndarray, e: np.ndarray, rtol: float, atol: float) -> Figures:
    max_abs, max_rel, any_finite, close = -math.inf, -math.inf, False, True
    first: float | None = None
    constant, same_finite = True, True
    n, sum_a, sum_e = 0, 0.0, 0.0
    for pa, pe in pieces(a, e):
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            same = (pa == pe) | (np.isnan(pa) & np.isnan(pe))
            diff = np.where(same, 0.0, np.abs(pa - pe))
            rel = np.where(same, 0.0, diff / (np.abs(pe) + 1e-12))
            close = close and bool(np.allclose(pa, pe, rtol=rtol, atol=atol, equal_nan=True))
        any_finite |= bool(np.isfinite(diff).any())
        if not np.isnan(diff).all():
            max_abs = max(max_abs, float(np.nanmax(diff)))
        if not np.isnan(rel).all():
            max_rel = max(max_rel, float(np.nanmax(rel)))
        fa, fe = np.isfinite(pa), np.isfinite(pe)
        finite = pe[fe]
        if finite.size:
            first = float(finite[0]) if first is None else first
            constant = constant and bool(np.all(finite == first))
        same_finite = same_finite and bool(np.array_equal(fa, fe))
        if same_finite:
            n += int(fa.sum())
            sum_a += float(pa[fa].sum())
            sum_e += float(pe[fa].sum())
    return Figures(max_abs if any_finite else math.inf, max_rel if max_rel > -math.inf else math.nan, close, constant,
                   None if constant else _pcc(a, e, same_finite, n, sum_a, sum_e, close))


def _pcc(a: np.ndarray, e: np.ndarray, same_finite: bool, n: int, sum_a: float, sum_e: float,
         close: bool) -> float | None:
    if not same_finite:
        return 0.0
    if n == 0:
        return 1.0
    mean_a, mean_e = sum_a / n, sum_e / n
    var_a = var_e = cov = 0.0
    for pa, pe in pieces(a, e):
        finite = np.isfinite(pa)
        da, de = pa[finite] - mean_a, pe[finite] - mean_e
        var_a += float(np.dot(da, da))
        var_e += float(np.dot(de, de))
        cov += float(np.dot(da, de))
    if var_a == 0 or var_e == 0:  # compare.pcc's test for equal constants
        return 1.0 if all(np.allclose(pa, pe, rtol=1e-6, atol=1e-9) for pa, pe in pieces(a, e)) else 0.0
    return float(np.clip(cov / math.sqrt(var_a * var_e), -1.0, 1.0))
