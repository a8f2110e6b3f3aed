"""Walk a loaded TTNN program and evaluate it with the reference semantics: what the program means.

The same program the simulator runs (opbyop.device.program), op by op, with control flow
(ttcore.load_cached const-eval functions, ttcore.while_loop with a condition program or counted
bounds, ttcore.case) and memory ops (get_device, deallocate: no value). Every result is fitted to
the type the program declares for it; the host inputs to the entry's argument types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from opbyop.device.executor import MAX_LOOP_ITERATIONS, loop_iterations
from opbyop.device.kernels.base import NotSimulated
from opbyop.device.program import Function, Op, Program, TensorType
from opbyop.device.reference.semantics import SEMANTICS, Unreadable

_NO_VALUE = ("ttnn.get_device", "ttnn.deallocate")
_CONTROL = ("ttcore.load_cached", "ttcore.while_loop", "ttcore.case")
_INT_BITS = {"si32": (32, True), "i32": (32, True), "u32": (32, False), "u16": (16, False), "u8": (8, False),
             "si16": (16, True), "si8": (8, True), "i64": (64, True), "si64": (64, True)}
_FLOAT_MAX = {"f32": float(np.finfo(np.float32).max), "bf16": 3.3895313892515355e38,
              "f16": float(np.finfo(np.float16).max)}


def unreadable_ops(program: Program) -> list[str]:
    """TTNN ops of the program the reference has no reading of, sorted, each once."""
    return sorted({op.name for f in program.functions.values() for op in f.ops
                   if op.name not in SEMANTICS and op.name not in _NO_VALUE and op.name not in _CONTROL})


def fit(value: np.ndarray, t: TensorType | None) -> np.ndarray:
    """`value` as the declared type holds it: integers wrap to their width (two's complement), an f32
    is the exact value correctly rounded to f32; a bf16/f16 keeps its exact value (its rounding is
    the chip's numerics) but becomes infinite beyond the type's range. Floats are float64, integers
    int64."""
    x = np.asarray(value)
    if t is None:
        return x
    if t.dtype in _INT_BITS:
        bits, signed = _INT_BITS[t.dtype]
        if x.dtype.kind == "f":
            info = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2 ** bits - 1)
            x = np.clip(np.trunc(np.nan_to_num(x, nan=0.0)), *info)  # a float converts saturating
            return x.astype(np.int64)
        x = x.astype(np.int64)
        if bits == 64:
            return x
        wrapped = x & ((1 << bits) - 1)
        return np.where(signed & (wrapped >= 2 ** (bits - 1)), wrapped - 2 ** bits, wrapped).astype(np.int64)
    if t.dtype == "i1":
        return x != 0
    if t.dtype == "f32":  # an f32 result is the exact value correctly rounded, as IEEE (and XLA) define it
        with np.errstate(over="ignore"):
            return x.astype(np.float32).astype(np.float64)
    if t.dtype in _FLOAT_MAX:
        x = x.astype(np.float64)
        limit = _FLOAT_MAX[t.dtype]
        with np.errstate(invalid="ignore"):
            return np.where(np.abs(x) > limit, np.sign(x) * np.inf, x)
    return x


@dataclass
class Reading:
    """The reference's outputs of the entry, and every op's first result values (by result value id,
    in evaluation order: the same ids as the simulator's trace)."""

    outputs: list[np.ndarray]
    trace: dict[int, tuple[Op, np.ndarray]] = field(default_factory=dict)


class _Interpreter:
    def __init__(self, program: Program):
        self.program = program
        self.trace: dict[int, tuple[Op, np.ndarray]] = {}
        self.const_cache: dict[str, list[np.ndarray]] = {}

    def call(self, function: Function, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(args) != len(function.arguments):
            raise Unreadable(f"@{function.name} takes {len(function.arguments)} values, got {len(args)}")
        env: dict[int, np.ndarray | None] = {v: fit(a, t) for v, a, t in
                                             zip(function.arguments, args, function.argument_types)}
        for op in function.ops:
            self.step(op, env)
        return [env[v] for v in function.returns]  # type: ignore[misc]

    def step(self, op: Op, env: dict) -> None:
        if op.name in _NO_VALUE:
            for v in op.results:
                env[v] = None
            return
        inputs = [env.get(v) for v in op.operands]
        if op.name == "ttcore.load_cached":
            results = self.const_eval(op, [x for x in inputs if x is not None])
        elif op.name == "ttcore.while_loop":
            results = self.while_loop(op, [x for x in inputs if x is not None])
        elif op.name == "ttcore.case":
            results = self.case(op, inputs)
        else:
            semantics = SEMANTICS.get(op.name)
            if semantics is None:
                raise Unreadable(op.name)
            results = semantics([x for x in inputs if x is not None], op)
        for v, value, t in zip(op.results, results, op.result_types):
            fitted = fit(np.asarray(value).reshape(t.shape) if t is not None else value, t)
            env[v] = fitted
            if v not in self.trace:
                self.trace[v] = (op, fitted)

    def function(self, ref: object) -> Function:
        name = str(ref).lstrip("@")
        if name not in self.program.functions:
            raise Unreadable(f"a call of @{name}, which the program does not define")
        return self.program.functions[name]

    def const_eval(self, op: Op, args: list[np.ndarray]) -> list[np.ndarray]:
        callee = str(op.attrs["callee"]).lstrip("@")
        if args:  # depends on its arguments: evaluated each time
            return self.call(self.function(callee), args)
        if callee not in self.const_cache:
            self.const_cache[callee] = self.call(self.function(callee), [])
        return self.const_cache[callee]

    def while_loop(self, op: Op, operands: list[np.ndarray]) -> list[np.ndarray]:
        try:
            bound = loop_iterations(op)
        except NotSimulated as e:
            raise Unreadable(str(e)) from None
        body = self.function(op.attrs["body_program"])
        condition = None if bound is not None else self.function(op.attrs["condition_program"])
        count = int(op.attrs.get("state_count") or len(operands))
        state, invariant = list(operands[:count]), list(operands[count:])
        for iteration in range(MAX_LOOP_ITERATIONS):
            if bound is not None:
                go = iteration < bound
            else:
                flag = self.call(condition, state + invariant)  # type: ignore[arg-type]
                go = bool(np.asarray(flag[0]).reshape(-1)[0] != 0)
            if not go:
                break
            state = self.call(body, state + invariant)
        else:
            raise Unreadable(f"{op.name} did not finish in {MAX_LOOP_ITERATIONS:,} iterations")
        indices = op.attrs.get("output_indices") or list(range(len(op.results)))
        return [state[int(i)] for i in indices]

    def case(self, op: Op, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        branches = op.attrs["branch_programs"]
        branches = branches if isinstance(branches, list) else [branches]
        index = int(np.asarray(inputs[0]).reshape(-1)[0]) if inputs and inputs[0] is not None else 0
        chosen = branches[index if 0 <= index < len(branches) else -1]  # out of range: the last branch
        return self.call(self.function(chosen), [x for x in inputs[1:] if x is not None])


def read_program(program: Program, inputs: Sequence[np.ndarray]) -> Reading:
    """The entry's outputs in exact arithmetic; Unreadable names what the reference cannot read."""
    missing = unreadable_ops(program)
    if missing:
        raise Unreadable(", ".join(missing))
    interpreter = _Interpreter(program)
    outputs = interpreter.call(program.main, [_host_value(x, t) for x, t in zip(inputs, program.main.argument_types)])
    return Reading(outputs=outputs, trace=interpreter.trace)


def _host_value(x: np.ndarray, t: TensorType | None) -> np.ndarray:
    """A host input as the program's argument: a 64-bit integer or complex value the program holds as
    a trailing dimension of 2 is split as the runtime splits it; floats widen to float64."""
    x = np.asarray(x)
    if t is not None and tuple(t.shape) == x.shape + (2,):
        if np.iscomplexobj(x):
            return np.stack([x.real, x.imag], axis=-1).astype(np.float64)
        return np.ascontiguousarray(x).view(np.uint32).reshape(x.shape + (2,)).astype(np.int64)
    if np.iscomplexobj(x):
        raise Unreadable("a complex input the program does not hold as two words")
    return x.astype(np.float64) if x.dtype.kind == "f" else x
