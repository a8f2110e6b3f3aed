"""Compare a device output with the golden one: PCC, max abs / relative error, allclose."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from opbyop.golden import large
from opbyop.records import GoldenComparison


class DtypeThreshold(BaseModel):
    pcc: float = Field(0.99, ge=-1.0, le=1.0, description="minimum Pearson correlation")
    atol: float = Field(1e-2, ge=0.0)
    rtol: float = Field(1e-2, ge=0.0)
    require_allclose: bool = Field(False, description="fail on allclose too, not only on PCC")


class Thresholds(BaseModel):
    """Per output element type; `default` covers every type not listed."""

    default: DtypeThreshold = Field(default_factory=DtypeThreshold)
    per_dtype: dict[str, DtypeThreshold] = Field(default_factory=dict)

    def for_dtype(self, dtype: str) -> DtypeThreshold:
        return self.per_dtype.get(dtype, self.default)


def pcc(actual: np.ndarray, expected: np.ndarray) -> float | None:
    """Pearson correlation of the flattened values; 1.0 for equal constants, None if undefined."""
    a = np.asarray(actual, dtype=np.float64).ravel()
    e = np.asarray(expected, dtype=np.float64).ravel()
    finite = np.isfinite(a) & np.isfinite(e)
    if a.size == 0 or not np.array_equal(np.isfinite(a), np.isfinite(e)):
        return None if a.size == 0 else 0.0
    a, e = a[finite], e[finite]
    if a.size == 0:
        return 1.0
    sa, se = a.std(), e.std()
    if sa == 0 or se == 0:
        return 1.0 if np.allclose(a, e, rtol=1e-6, atol=1e-9) else 0.0
    return float(np.clip(np.mean((a - a.mean()) * (e - e.mean())) / (sa * se), -1.0, 1.0))


def finite_pcc(a: np.ndarray, e: np.ndarray) -> float | None:
    """`pcc` of two float64 vectors whose every element is finite (the caller knows), in half its CPU
    time: a whole model's accuracy trace compares about a gigabyte of intermediate values. einsum's
    own loop, not BLAS's dot: BLAS's threads spin against the other workers on a busy machine."""
    if a.size == 0:
        return None
    ac, ec = a - a.mean(), e - e.mean()
    saa, see = float(np.einsum("i,i", ac, ac)), float(np.einsum("i,i", ec, ec))
    if saa == 0 or see == 0:
        return 1.0 if np.allclose(a, e, rtol=1e-6, atol=1e-9) else 0.0
    return float(np.clip(float(np.einsum("i,i", ac, ec)) / (np.sqrt(saa) * np.sqrt(see)), -1.0, 1.0))


class OutputMismatch(ValueError):
    """The device output cannot be compared with the golden one: a device failure, both shapes named."""


def as_golden_shape(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """The device's output in the golden output's representation, or OutputMismatch.

    Converted, because they are only how the device represents a value: a complex tensor as a
    trailing dimension of 2 (real, imaginary); a 64-bit integer as two 32-bit words (low, high); a
    rank-0 tensor as a 1-element tensor; size-1 dims.
    """
    a, e = np.asarray(actual), np.asarray(expected)
    if np.iscomplexobj(e) and not np.iscomplexobj(a) and a.shape == e.shape + (2,):
        a = a[..., 0] + 1j * a[..., 1]
    elif e.dtype.kind in "iu" and e.dtype.itemsize == 8 and a.shape == e.shape + (2,) and a.dtype.itemsize <= 4:
        words = a.astype(np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF)  # (low, high) 32-bit words
        a = (words[..., 0] | (words[..., 1] << np.uint64(32))).view(e.dtype)
    if a.shape == e.shape:
        return a
    if a.size == e.size and tuple(d for d in a.shape if d != 1) == tuple(d for d in e.shape if d != 1):
        return a.reshape(e.shape)
    raise OutputMismatch(f"device output shape {a.shape} differs from golden shape {e.shape}")


def _exact_equal(a: np.ndarray, e: np.ndarray) -> bool:
    """Integers and booleans compared by value, whatever their widths and signedness (ui64 included)."""
    if a.dtype == e.dtype:
        return bool(np.array_equal(a, e))
    return bool(np.array_equal(a.astype(object), e.astype(object)))


def _is_exact_type(dtype: str) -> bool:
    return dtype.startswith(("i", "ui"))  # integers and i1


@dataclass
class _Figures:
    max_abs: float = 0.0
    max_rel: float = 0.0


def _errors(a: np.ndarray, e: np.ndarray) -> _Figures:
    """Max absolute and relative error; equal infinities and NaN against NaN count as equal."""
    if a.size == 0:
        return _Figures()
    if np.iscomplexobj(a) or np.iscomplexobj(e):
        a, e = np.asarray(a, dtype=np.complex128), np.asarray(e, dtype=np.complex128)
    else:
        a, e = _float64(a), _float64(e)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (a == e) | (np.isnan(a) & np.isnan(e))
        diff = np.where(same, 0.0, np.abs(a - e))
    max_abs = float(np.nanmax(diff)) if np.isfinite(diff).any() else float("inf")
    with np.errstate(invalid="ignore", divide="ignore"):
        max_rel = float(np.nanmax(np.where(same, 0.0, diff / (np.abs(e) + 1e-12))))
    return _Figures(max_abs, max_rel)


def nonfinite_mismatches(a: np.ndarray, e: np.ndarray) -> list[str]:
    """NaN and infinities on one side only, counted: '3 NaN where XLA has none', 'XLA has 2 NaN
    where the device has numbers', '1 inf where XLA has a finite value' (a NaN never shows in a max
    abs error, so it must be said)."""
    if np.iscomplexobj(a) or np.iscomplexobj(e) or a.dtype.kind not in "fc" and e.dtype.kind not in "fc":
        return []
    counts = [0] * len(_NONFINITE)
    for pa, pe in large.pieces(a, e):  # f64 pieces: no full-size copy of a gigabyte output
        for i, mask in enumerate(_nonfinite_masks(pa, pe)):
            counts[i] += int(mask.sum())
    return [text.format(n) for n, text in zip(counts, _NONFINITE) if n]


_NONFINITE = ("{} NaN where XLA has none", "XLA has {} NaN where the device has numbers",
              "{} inf where XLA has a finite value", "XLA has {} inf where the device has finite values",
              "{} infinities of the opposite sign")


def _nonfinite_masks(a: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, ...]:
    """In _NONFINITE's order."""
    return (np.isnan(a) & ~np.isnan(e), np.isnan(e) & ~np.isnan(a), np.isinf(a) & np.isfinite(e),
            np.isinf(e) & np.isfinite(a), np.isinf(a) & np.isinf(e) & (np.sign(a) != np.sign(e)))


def _float64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _judge(a: np.ndarray, e: np.ndarray, dtype: str, t: DtypeThreshold) -> tuple[bool, float | None, bool, str]:
    """(passed, pcc, allclose, method) for one output of the golden's shape."""
    if a.size == 0:
        return True, None, True, "exact"  # nothing to compare: equal shapes are the whole verdict
    if _is_exact_type(dtype) or e.dtype == np.bool_:
        ok = _exact_equal(a, e)
        return ok, 1.0 if ok else 0.0, ok, "exact"
    if np.iscomplexobj(e):  # PCC over real and imaginary parts together
        a = np.stack([np.real(a), np.imag(a)], axis=-1)
        e = np.stack([np.real(e), np.imag(e)], axis=-1)
    a64, e64 = _float64(a), _float64(e)
    close = bool(np.allclose(a64, e64, rtol=t.rtol, atol=t.atol, equal_nan=True))
    finite = e64[np.isfinite(e64)]
    if e64.size == 1 or finite.size == 0 or np.all(finite == finite[0]):
        return close, None, close, "allclose"  # PCC says nothing about a scalar or a constant
    p = pcc(a64, e64)
    ok = p is not None and p >= t.pcc and (close or not t.require_allclose)
    return ok, p, close, "pcc"


def _is_large(a: np.ndarray, e: np.ndarray, dtype: str) -> bool:
    return (a.size > large.PIECE and e.size > 1 and not _is_exact_type(dtype) and e.dtype != np.bool_
            and not (np.iscomplexobj(a) or np.iscomplexobj(e)))


def _judge_large(a: np.ndarray, e: np.ndarray, t: DtypeThreshold) -> tuple[_Figures, tuple[bool, float | None, bool, str]]:
    f = large.figures(a, e, t.rtol, t.atol)
    if f.constant:  # PCC says nothing about a constant
        return _Figures(f.max_abs, f.max_rel), (f.allclose, None, f.allclose, "allclose")
    ok = f.pcc is not None and f.pcc >= t.pcc and (f.allclose or not t.require_allclose)
    return _Figures(f.max_abs, f.max_rel), (ok, f.pcc, f.allclose, "pcc")


def compare(actual: list[np.ndarray], expected: list[np.ndarray], dtypes: list[str],
            thresholds: Thresholds) -> GoldenComparison:
    """Every output must pass; the figures reported are the worst over the outputs. Outputs whose
    shapes differ for real fail, naming both shapes (OutputMismatch is never raised from here)."""
    if len(actual) != len(expected):
        return _mismatch(f"{len(actual)} device outputs for {len(expected)} golden outputs", thresholds)
    worst_pcc: float | None = 1.0
    figures = _Figures()
    all_close = passed = True
    used = thresholds.default.pcc
    methods: list[str] = []
    notes: list[str] = []
    for a, e, dtype in zip(actual, expected, dtypes):
        t = thresholds.for_dtype(dtype)
        used = t.pcc
        e = np.asarray(e)
        try:
            a = as_golden_shape(a, e)
        except OutputMismatch as mismatch:
            return _mismatch(str(mismatch), thresholds)
        if _is_large(a, e, dtype):  # gigabyte outputs: the same verdict, piece by piece
            errors, (ok, p, close, method) = _judge_large(a, e, t)
        else:
            errors = _errors(a, e)
            ok, p, close, method = _judge(a, e, dtype, t)
        figures = _Figures(max(figures.max_abs, errors.max_abs), max(figures.max_rel, errors.max_rel))
        if not ok:
            notes += [f"output {len(methods)}: {n}" if len(actual) > 1 else n for n in nonfinite_mismatches(a, e)]
        passed &= ok
        all_close &= close
        methods.append(method)
        if method == "pcc":
            worst_pcc = None if p is None or worst_pcc is None else min(worst_pcc, p)
    if "pcc" not in methods:
        worst_pcc = None
    method = "pcc" if "pcc" in methods else ("allclose" if "allclose" in methods else "exact")
    return GoldenComparison(pcc=worst_pcc, max_abs_error=figures.max_abs, max_rel_error=figures.max_rel,
                            allclose=all_close, passed=passed, pcc_threshold=used, method=method,
                            nonfinite="; ".join(notes) or None)


def _mismatch(message: str, thresholds: Thresholds) -> GoldenComparison:
    return GoldenComparison(pcc=None, max_abs_error=float("inf"), max_rel_error=float("inf"), allclose=False,
                            passed=False, pcc_threshold=thresholds.default.pcc, method="shape", message=message)


def verdict(comparison: GoldenComparison) -> str:
    """One line saying why a comparison failed, by the method that judged it."""
    if comparison.message:
        return comparison.message
    if comparison.nonfinite:  # counted; a max abs error of 0 (NaN never counts in it) would say nothing
        error = comparison.max_abs_error
        tail = f", max abs error {error:.3g} elsewhere" if error > 0 and np.isfinite(error) else ""
        pcc = f", pcc {comparison.pcc} < {comparison.pcc_threshold}" if comparison.method == "pcc" else ""
        return f"output mismatch: {comparison.nonfinite}{pcc}{tail}"
    if comparison.method == "exact":
        return f"output mismatch: values differ (exact comparison), max abs error {comparison.max_abs_error:.3g}"
    if comparison.method == "allclose":
        return f"output mismatch: not allclose, max abs error {comparison.max_abs_error:.3g}"
    if comparison.pcc is not None and comparison.pcc >= comparison.pcc_threshold:  # failed on allclose alone
        return f"output mismatch: not allclose (pcc {comparison.pcc:.6g}), max abs error {comparison.max_abs_error:.3g}"
    return (f"output mismatch: pcc {comparison.pcc} < {comparison.pcc_threshold}, "
            f"max abs error {comparison.max_abs_error:.3g}")
