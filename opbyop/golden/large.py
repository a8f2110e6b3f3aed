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


def figures(a: np.ndarray, e: np.ndarray, rtol: float, atol: float) -> Figures:
    """compare._errors' maxima, allclose, the constant check and compare.pcc of two real outputs."""
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
