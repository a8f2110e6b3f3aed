"""Real values for the arguments that a model's constants determine.

The splitter keeps only constant-forming chains inside an op's module; an operand computed from
constants by any other op (an add of two constants, a while loop, an iota compared with a
constant) becomes an argument (OperandKind.COMPUTED), so that an upstream failure never lands on
this op. Where its value matters (indices, masks, loop counters, divisors, small tensors) it is
computed here, once per model, by replaying the upstream ops' own single-op modules on XLA:CPU in
program order; large float activations keep deterministic random data, like any other argument.
An upstream op XLA cannot run leaves its dependents to random data, never the model without ops.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from opbyop.artifacts import ArtifactStore
from opbyop.golden.dtypes import numpy_dtype
from opbyop.golden.inputs import POSITIVE_OPERANDS
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.ir.split import SplitResult
from opbyop.records import OperandKind, OpRecord, UniqueOp

SMALL_ELEMENTS = 65536  # a computed float operand up to this size gets its real value anyway

Key = tuple[int, int]  # (position of the producing op, result index)


def value_matters(record: OpRecord, operand_index: int, dtype: str, elements: int) -> bool:
    """Whether an operand's real value (rather than a random draw) decides the op's behaviour."""
    if not dtype.startswith(("f", "bf", "complex")):  # integers and booleans: indices, masks, counters
        return True
    if operand_index in POSITIVE_OPERANDS.get(record.op_name, ()):  # divisors, log/sqrt inputs ...
        return True
    return elements <= SMALL_ELEMENTS


def needed_values(record: OpRecord) -> dict[int, Key]:
    """argument index -> the model value that feeds it, for the COMPUTED operands whose value matters."""
    out: dict[int, Key] = {}
    for o in record.operands:
        if o.kind is not OperandKind.COMPUTED or o.argument is None:
            continue
        ref = record.input_sources[o.argument]
        if ref.position is None:
            continue
        elements = int(np.prod(o.tensor.shape)) if o.tensor.shape else 1
        if value_matters(record, o.index, o.tensor.dtype, elements):
            out[o.argument] = (ref.position, ref.result)
    return out


@dataclass
class UpstreamValues:
    """What one model's replay produced: values by (position, result), and the ops XLA refused."""

    values: dict[Key, np.ndarray] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)  # position -> XLA's message


def compute(split: SplitResult, golden: XlaCpu, wanted: Iterable[Key]) -> UpstreamValues:
    """Replay the ops that `wanted` values depend on (all fed by constants), in program order."""
    wanted = set(wanted)
    closure: set[int] = set()
    stack = [position for position, _ in wanted]
    while stack:
        p = stack.pop()
        if p in closure:
            continue
        closure.add(p)
        stack.extend(ref.position for ref in split.ops[p].input_sources if ref.position is not None)
    last_use: dict[Key, int] = {}
    for p in sorted(closure):
        for ref in split.ops[p].input_sources:
            last_use[(ref.position, ref.result)] = p
    out = UpstreamValues()
    live: dict[Key, np.ndarray] = {}
    for p in sorted(closure):
        record = split.ops[p]
        if not record.ok or any(ref.model_argument is not None for ref in record.input_sources):
            out.failed[p] = record.split_error or "fed by a model argument"  # cannot happen for constant-fed ops
            continue
        keys = [(ref.position, ref.result) for ref in record.input_sources]
        if any(k not in live for k in keys):
            continue  # an upstream op failed: its dependents keep random data
        try:
            results = golden.run(record.module_text or "", [live[k] for k in keys], key=record.signature)
        except Exception as e:  # XLA refusing one op must not stop the others
            out.failed[p] = f"{type(e).__name__}: {e}"
            continue
        for j, value in enumerate(results):
            live[(p, j)] = value
            if (p, j) in wanted:
                out.values[(p, j)] = value
        for k in keys:  # drop what no later op of the replay reads
            if last_use.get(k) == p and k not in wanted:
                live.pop(k, None)
    return out


def attach(unique: list[UniqueOp], splits: dict[str, SplitResult], golden: XlaCpu,
           artifacts: ArtifactStore) -> dict[str, dict[int, str]]:
    """Give each unique op the real values of its COMPUTED arguments (from its first occurrence whose
    values could be computed); returns model -> {position: XLA's message} for upstream ops XLA refused."""
    plans: dict[str, dict[int, dict[int, Key]]] = {}  # model -> position -> argument -> key
    for op in unique:
        for occurrence in op.occurrences:
            split = splits.get(occurrence.model)
            if split is None:
                continue
            needed = needed_values(split.ops[occurrence.position])
            if needed:
                plans.setdefault(occurrence.model, {})[occurrence.position] = needed
    computed: dict[str, UpstreamValues] = {}
    for model, by_position in plans.items():
        wanted = {k for needed in by_position.values() for k in needed.values()}
        computed[model] = compute(splits[model], golden, wanted)
    for op in unique:
        for occurrence in op.occurrences:
            needed = plans.get(occurrence.model, {}).get(occurrence.position)
            if not needed:
                continue
            values = computed[occurrence.model].values
            if all(k in values for k in needed.values()):
                op.input_values = {arg: artifacts.put(_npy(values[k]), ".npy") for arg, k in needed.items()}
                break
    return {model: u.failed for model, u in computed.items() if u.failed}


def _npy(array: np.ndarray) -> bytes:
    array = np.asarray(array)
    if array.dtype.kind == "V" or array.dtype.name == "bfloat16":  # ml_dtypes: .npy has no name for them
        array = array.view(f"u{array.dtype.itemsize}")
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def load(op: UniqueOp, artifacts: ArtifactStore) -> dict[int, np.ndarray]:
    """The real argument values of `op` (argument index -> array, in the argument's element type)."""
    out = {}
    for arg, digest in op.input_values.items():
        array = np.load(artifacts.path(digest), allow_pickle=False)
        dtype = numpy_dtype(op.inputs[arg].dtype)
        out[arg] = array.view(dtype) if array.dtype != dtype and array.dtype.itemsize == dtype.itemsize else array
    return out
