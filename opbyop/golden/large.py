"""compare's figures for outputs too large to copy whole to f64: the same verdicts, computed over
pieces of the flattened arrays (each piece converted on its own), so a comparison of gigabyte
outputs needs a few pieces' memory instead of several full-size f64 copies.

Maxima, allclose and the constant check are exact; PCC is the same formula with its sums taken
piece by piece (it can differ from the whole-array figure in the last digits).
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np

# Elements per piece; compare uses this module only for outputs larger than one piece.
PIECE = 1 << 22


def pieces(a: np.ndarray, e: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(device, golden) pieces of the flattened outputs as f64."""
    fa, fe = np.asarray(a).reshape(-1), np.asarray(e).reshape(-1)
    for start in range(0, fa.size, PIECE):
        yield (np.asarray(fa[start:start + PIECE], np.float64), np.asarray(fe[start:start + PIECE], np.float64))


def errors(a: np.ndarray, e: np.ndarray) -> tuple[float, float]:
    """(max abs error, max rel error) as compare._errors defines them (real outputs)."""
    max_abs, max_rel, any_finite = -math.inf, -math.inf, False
    for pa, pe in pieces(a, e):
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            same = (pa == pe) | (np.isnan(pa) & np.isnan(pe))
            diff = np.where(same, 0.0, np.abs(pa - pe))
            rel = np.where(same, 0.0, diff / (np.abs(pe) + 1e-12))
        any_finite |= bool(np.isfinite(diff).any())
        if not np.isnan(diff).all():
            max_abs = max(max_abs, float(np.nanmax(diff)))
        if not np.isnan(rel).all():
            max_rel = max(max_rel, float(np.nanmax(rel)))
    return (max_abs if any_finite else math.inf), (max_rel if max_rel > -math.inf else math.nan)


def allclose(a: np.ndarray, e: np.ndarray, rtol: float, atol: float) -> bool:
    return all(np.allclose(pa, pe, rtol=rtol, atol=atol, equal_nan=True) for pa, pe in pieces(a, e))


def constant(e: np.ndarray) -> bool:
    """True when the golden output's finite values are all equal (or there are none)."""
    first: float | None = None
    for _, pe in pieces(e, e):
        finite = pe[np.isfinite(pe)]
        if finite.size == 0:
            continue
        first = float(finite[0]) if first is None else first
        if not np.all(finite == first):
            return False
    return True


def pcc(a: np.ndarray, e: np.ndarray) -> float | None:
    """compare.pcc over pieces: the Pearson correlation of the finite values, 0.0 when the two
    outputs are not finite in the same places."""
    n, sum_a, sum_e = 0, 0.0, 0.0
    for pa, pe in pieces(a, e):
        fa, fe = np.isfinite(pa), np.isfinite(pe)
        if not np.array_equal(fa, fe):
            return 0.0
        n += int(fa.sum())
        sum_a += float(pa[fa].sum())
        sum_e += float(pe[fa].sum())
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
    if var_a == 0 or var_e == 0:
        return 1.0 if allclose(a, e, rtol=1e-6, atol=1e-9) else 0.0
    return float(np.clip(cov / math.sqrt(var_a * var_e), -1.0, 1.0))
