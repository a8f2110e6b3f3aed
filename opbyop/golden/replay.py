"""Replay a split model op by op on XLA:CPU, each op's outputs feeding its users.

If the single-op modules reproduce the framework's own output, the split lost nothing.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from opbyop.graph import ModelGraph
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


def worst_error(outputs: Sequence[np.ndarray], references: Sequence[np.ndarray]) -> float:
    """The largest |output - reference| of any output, over that output's largest |reference|."""
    if len(outputs) != len(references):
        raise ValueError(f"{len(outputs)} outputs against {len(references)} references")
    worst = 0.0
    for got, want in zip(outputs, references):
        if got.shape != want.shape:
            raise ValueError(f"an output of shape {got.shape} against a reference of shape {want.shape}")
        scale = float(np.max(np.abs(want))) or 1.0
        worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) / scale)
    return worst


def replay_error(graph: ModelGraph, split: SplitResult, golden: XlaCpu) -> float:
    """How far the model's single ops (`split`, of `graph`), replayed in program order, are from the
    framework's eager output (worst_error); a sharded model's ops need as many XLA:CPU devices as its mesh."""
    if not split.ops:
        raise ValueError(f"{graph.name} split into no ops")
    return worst_error(replay(split, graph.argument_values, golden), graph.reference_outputs)
