"""The constants inside an op's module whose element type the chip lacks (i64, ui64, f64).

The compiler narrows them (the chip's data formats have no f64 and no i64); whether the narrowing
lost anything depends on their values, which golden.narrowing reads from here.
"""

from __future__ import annotations

import re

import numpy as np

from opbyop.ir.dense import parse_dense
from opbyop.records import UniqueOp

# One constant per line in printed modules; a 64-bit element type has no nested '<' in its type.
_WIDE = re.compile(r"stablehlo\.constant (dense<[^>]*>) : (tensor<[0-9x]*(?:i64|ui64|f64)>)")


def wide_constants(op: UniqueOp) -> list[np.ndarray]:
    """Values of the i64 / ui64 / f64 constants kept inside the op's module, in order."""
    return [parse_dense(f"{m.group(1)} : {m.group(2)}") for m in _WIDE.finditer(op.module_text)]
