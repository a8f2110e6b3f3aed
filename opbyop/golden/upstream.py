"""Real values for the arguments of an op that do not depend on the model's weights.

The splitter keeps only constant-forming chains inside an op's module; any other producer becomes
an argument, so that an upstream failure never lands on this op. Where such an argument's value
matters (indices, masks, positions, loop counters, divisors, small tensors) and it is computed only
from the model's constants and its real values (its inputs and buffers: iota and position chains,
attention masks, rotary tables), it is computed here, once per model, by replaying the upstream
ops' own single-op modules on XLA:CPU in program order. A weight, an argument known by shape and
dtype only, a random op or an upstream op XLA cannot run make everything after them synthetic:
such an argument gets deterministic data, and the unique op says why (UniqueOp.synthetic_reasons).
Only one occurrence per unique op is planned: 80 identical layers replay one layer's chains.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import numpy as np

from opbyop.artifacts import ArtifactStore
from opbyop.dtypes import numpy_dtype
from opbyop.golden.inputs import POSITIVE_OPERANDS
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.ir.split import SplitResult
from opbyop.records import OpRecord, UniqueOp, ValueRef

SMALL_ELEMENTS = 65536  # a computed float operand up to this size gets its real value anyway
RANDOM_OPS = frozenset({"stablehlo.rng", "stablehlo.rng_bit_generator"})

Key = tuple[int, int]  # (position of the producing op, result index)


def value_matters(record: OpRecord, operand_index: int, dtype: str, elements: int) -> bool:
    """Whether an operand's real value (rather than a random draw) decides the op's behaviour."""
    if not dtype.startswith(("f", "bf", "complex")):  # integers and booleans: indices, masks, counters
        return True
    if operand_index in POSITIVE_OPERANDS.get(record.op_name, ()):  # divisors, log/sqrt inputs ...
        return True
    return elements <= SMALL_ELEMENTS


def mattering_arguments(record: OpRecord) -> dict[int, ValueRef]:
    """argument index -> the model value that feeds it, for the arguments whose value matters."""
    out: dict[int, ValueRef] = {}
    for o in record.operands:
        if o.argument is None or o.argument in out:
            continue
        elements = int(np.prod(o.tensor.shape)) if o.tensor.shape else 1
        if value_matters(record, o.index, o.tensor.dtype, elements):
            out[o.argument] = record.input_sources[o.argument]
    return out


def synthetic_causes(split: SplitResult, real_arguments: Iterable[int], argument_names: Mapping[int, str]) -> dict[int, str]:
    """position -> why its results are not real (absent: computed only from constants and real values)."""
    real = set(real_arguments)
    causes: dict[int, str] = {}
    for record in split.ops:
        if not record.ok:
            causes[record.position] = f"op {record.position} ({record.op_name}) could not be split"
            continue
        if record.op_name in RANDOM_OPS:
            causes[record.position] = f"op {record.position} ({record.op_name}) draws random values"
            continue
        for ref in record.input_sources:
            if ref.model_argument is not None and ref.model_argument not in real:
                name = argument_names.get(ref.model_argument, f"argument {ref.model_argument}, known by shape and dtype only")
                causes[record.position] = f"it depends on {name}"
                break
            if ref.position is not None and ref.position in causes:
                causes[record.position] = causes[ref.position]
                break
    return causes


@dataclass
class UpstreamValues:
    """What one model's replay produced: values by (position, result), and the ops XLA refused."""

    values: dict[Key, np.ndarray] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)  # position -> XLA's message


def compute(split: SplitResult, golden: XlaCpu, wanted: Iterable[Key],
            arguments: Mapping[int, np.ndarray] | None = None) -> UpstreamValues:
    """Replay the ops that `wanted` values depend on, in program order; `arguments` are the model's
    real argument values (an op fed by any other argument is never replayed)."""
    arguments = arguments or {}
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
            if ref.position is not None:
                last_use[(ref.position, ref.result)] = p
    out = UpstreamValues()
    live: dict[Key, np.ndarray] = {}

    def value(ref: ValueRef) -> np.ndarray | None:
        if ref.model_argument is not None:
            return arguments.get(ref.model_argument)
        return live.get((ref.position, ref.result))

    for p in sorted(closure):
        record = split.ops[p]
        if not record.ok or any(ref.model_argument is not None and ref.model_argument not in arguments
                                for ref in record.input_sources):
            out.failed[p] = record.split_error or "fed by an argument without a real value"  # never planned
            continue
        inputs = [value(ref) for ref in record.input_sources]
        if any(v is None for v in inputs):
            continue  # an upstream op failed: its dependents keep random data
        try:
            results = golden.run(record.module_text or "", inputs, key=record.signature)
        except Exception as e:  # XLA refusing one op must not stop the others
            out.failed[p] = f"{type(e).__name__}: {e}"
            continue
        for j, result in enumerate(results):
            live[(p, j)] = result
            if (p, j) in wanted:
                out.values[(p, j)] = result
        for ref in record.input_sources:  # drop what no later op of the replay reads
            k = (ref.position, ref.result)
            if ref.position is not None and last_use.get(k) == p and k not in wanted:
                live.pop(k, None)
    return out


@dataclass
class _Plan:
    """One unique op's occurrence chosen for real values: argument -> the model value feeding it."""

    op: UniqueOp
    model: str
    needed: dict[int, ValueRef]


def attach(unique: list[UniqueOp], splits: dict[str, SplitResult], golden: Callable[[], XlaCpu],
           artifacts: ArtifactStore, real_arguments: Mapping[str, Mapping[int, np.ndarray]] | None = None,
           argument_names: Mapping[str, Mapping[int, str]] | None = None) -> dict[str, dict[int, str]]:
    """Give each unique op the real values of its arguments that matter and do not depend on the
    weights (from the first occurrence where they all can be computed; else the one missing fewest);
    `golden` makes the XLA:CPU replayer when something is to be replayed; `real_arguments`: model ->
    its real @main argument values (inputs, buffers); `argument_names`: model -> argument -> how a
    record names it (`weight layers.0.mlp.up_proj.weight`). Returns model ->
    {position: XLA's message} for upstream ops XLA refused."""
    real_arguments = real_arguments or {}
    argument_names = argument_names or {}
    causes = {model: synthetic_causes(split, real_arguments.get(model, {}), argument_names.get(model, {}))
              for model, split in splits.items()}
    plans: list[_Plan] = []
    for op in unique:
        best: _Plan | None = None
        best_missing = -1
        for occurrence in op.occurrences:
            split = splits.get(occurrence.model)
            if split is None or op.frontend_error is not None:
                continue
            needed = mattering_arguments(split.ops[occurrence.position])
            if not needed:
                break
            model_causes = causes[occurrence.model]
            synthetic = {arg: model_causes[ref.position] for arg, ref in needed.items()
                         if ref.position is not None and ref.position in model_causes}
            synthetic.update({arg: _argument_cause(ref.model_argument, argument_names.get(occurrence.model, {}))
                              for arg, ref in needed.items() if ref.model_argument is not None
                              and ref.model_argument not in real_arguments.get(occurrence.model, {})})
            if best is None or len(synthetic) < best_missing:
                best = _Plan(op, occurrence.model, {a: r for a, r in needed.items() if a not in synthetic})
                best_missing = len(synthetic)
                op.synthetic_reasons = synthetic
            if not synthetic:
                break  # every value that matters is real here: the other occurrences cost nothing
        if best is not None and best.needed:
            plans.append(best)
    wanted: dict[str, set[Key]] = {}
    for plan in plans:
        wanted.setdefault(plan.model, set()).update((r.position, r.result) for r in plan.needed.values()
                                                    if r.position is not None)
    replayer = golden() if any(wanted.values()) else None
    computed = {model: compute(splits[model], replayer, keys, real_arguments.get(model, {}))
                for model, keys in wanted.items() if keys and replayer is not None}
    for plan in plans:
        values = computed[plan.model].values if plan.model in computed else {}
        arguments = real_arguments.get(plan.model, {})
        got: dict[int, str] = {}
        for arg, ref in plan.needed.items():
            array = arguments.get(ref.model_argument) if ref.model_argument is not None \
                else values.get((ref.position, ref.result))
            if array is None:
                plan.op.synthetic_reasons[arg] = f"op {ref.position} upstream could not be replayed on XLA:CPU"
                continue
            got[arg] = artifacts.put(_npy(array), ".npy")
        plan.op.input_values = got
    return {model: u.failed for model, u in computed.items() if u.failed}


def _argument_cause(index: int | None, names: Mapping[int, str]) -> str:
    return f"it is {names.get(index, f'argument {index}, known by shape and dtype only')}"


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
