"""Compare a device output with the golden one: PCC, max abs / relative error, allclose."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, Field

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


def compare(actual: list[np.ndarray], expected: list[np.ndarray], dtypes: list[str],
            thresholds: Thresholds) -> GoldenComparison:
    """Every output must pass; the figures reported are the worst over the outputs."""
    if len(actual) != len(expected):
        raise ValueError(f"{len(actual)} device outputs for {len(expected)} golden outputs")
    worst_pcc: float | None = 1.0
    max_abs = max_rel = 0.0
    all_close = passed = True
    used = thresholds.default.pcc
    for a, e, dtype in zip(actual, expected, dtypes):
        t = thresholds.for_dtype(dtype)
        used = t.pcc
        a64, e64 = np.asarray(a).astype(np.float64), np.asarray(e).astype(np.float64)
        if a64.shape != e64.shape:
            raise ValueError(f"device output shape {a64.shape} differs from golden shape {e64.shape}")
        with np.errstate(invalid="ignore"):
            same = (a64 == e64) | (np.isnan(a64) & np.isnan(e64))  # equal infinities, NaN for NaN
            diff = np.where(same, 0.0, np.abs(a64 - e64))
        if diff.size:
            max_abs = max(max_abs, float(np.nanmax(diff)) if np.isfinite(diff).any() else float("inf"))
            with np.errstate(invalid="ignore", divide="ignore"):
                max_rel = max(max_rel, float(np.nanmax(np.where(same, 0.0, diff / (np.abs(e64) + 1e-12)))))
        close = bool(np.allclose(a64, e64, rtol=t.rtol, atol=t.atol, equal_nan=True))
        all_close &= close
        if dtype.startswith(("i", "ui")):  # integers and booleans: exact
            ok = bool(np.array_equal(a64, e64))
            p = 1.0 if ok else 0.0
        else:
            p = pcc(a64, e64)
            ok = p is not None and p >= t.pcc and (close or not t.require_allclose)
        passed &= ok
        if p is None or worst_pcc is None:
            worst_pcc = None
        else:
            worst_pcc = min(worst_pcc, p)
    return GoldenComparison(pcc=worst_pcc, max_abs_error=max_abs, max_rel_error=max_rel,
                            allclose=all_close, passed=passed, pcc_threshold=used)
