"""Replay a split model op by op on XLA:CPU, each op's outputs feeding its users.

If the single-op modules reproduce the framework's own output, the split lost nothing.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from opbyop.golden.xla_cpu import XlaCpu
from opbyop.ir.split import SplitResult
from opbyop.records import ValueRef


def replay(split: SplitResult, argument_values: Sequence[np.ndarray], golden: XlaCpu) -> list[np.ndarray]:
    """Outputs of the model's @main computed by running its single-op modules in program order."""
    if split.failed:
        names = ", ".join(f"{r.position}:{r.op_name}" for r in split.failed[:5])
        raise ValueError(f"{len(split.failed)} ops of {split.model} failed to split ({names})")
    last_use: dict[tuple[int, int], int] = {}
    for record in split.ops:
        for ref in record.input_sources:
            if ref.position is not None:
                last_use[(ref.position, ref.result)] = record.position
    kept = {(r.position, r.result) for r in split.outputs if r.position is not None}
    values: dict[tuple[int, int], np.ndarray] = {}

    def value(ref: ValueRef) -> np.ndarray:
        if ref.model_argument is not None:
            return argument_values[ref.model_argument]
        return values[(ref.position, ref.result)]

    for record in split.ops:
        inputs = [value(ref) for ref in record.input_sources]
        for j, out in enumerate(golden.run(record.module_text, inputs, key=record.signature)):
            values[(record.position, j)] = out
        for ref in record.input_sources:  # free what no later op reads
            key = (ref.position, ref.result)
            if ref.position is not None and last_use.get(key) == record.position and key not in kept:
                values.pop(key, None)
    return [value(ref) for ref in split.outputs]
