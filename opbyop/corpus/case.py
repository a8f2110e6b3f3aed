"""One corpus case: a StableHLO op with its operand and result types, rendered as a module.

A case renders in two forms:
- `args`: every data operand is an argument of @main (what a model's activations look like);
- `const`: every data operand is a `stablehlo.constant` inside @main (what a model's weights,
  scalars and index tables look like when they are compile-time constants; the compiler may fold
  or hoist them into const-eval functions).
Operands whose value must be a compile-time constant (reduce init values, window inits) are
constants in both forms, with a fixed value.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from opbyop.dtypes import numpy_dtype


class Form(str, Enum):
    ARGS = "args"
    CONST = "const"


class Role(str, Enum):
    DATA = "data"  # an argument in the args form, a constant in the const form
    FIXED = "fixed"  # always a constant with `value` (init values)
    INDEX = "index"  # like DATA, its constant values drawn within `bound`


@dataclass(frozen=True)
class TType:
    shape: tuple[int, ...]
    dtype: str  # MLIR element type: f32, i1, ui64, complex<f32> ...

    def __str__(self) -> str:
        dims = "".join(f"{d}x" for d in self.shape)
        return f"tensor<{dims}{self.dtype}>"


@dataclass(frozen=True)
class Operand:
    type: TType
    role: Role = Role.DATA
    value: float | int | bool | tuple | None = None  # FIXED: a splat value, or the values
    bound: int | None = None  # INDEX: values in [0, bound)
    positive: bool = False  # DATA: values in the op's domain (log, sqrt, divisor ...)


@dataclass(frozen=True)
class Case:
    op: str  # stablehlo op name without the dialect: add, reduce ...
    variant: str  # what distinguishes cases of one op and dtype beyond shapes (sum, EQ, rows ...)
    dtype: str  # the dtype the case exercises (file name and per-dtype pass rates)
    operands: tuple[Operand, ...]
    results: tuple[TType, ...]
    attrs: str = ""  # generic-form attribute dictionary body
    regions: tuple[str, ...] = ()  # generic-form region bodies
    forms: tuple[Form, ...] = (Form.ARGS, Form.CONST)
    tags: tuple[str, ...] = field(default=())  # e.g. "random": no golden can match
    captures: tuple[Operand, ...] = ()  # values the regions use from outside, named %x0, %x1 ...

    @property
    def shape_key(self) -> str:
        return "_".join("x".join(map(str, o.type.shape)) or "s" for o in self.operands[:1]) or (
            "x".join(map(str, self.results[0].shape)) or "s")

    def name(self, form: Form) -> str:
        dtype = DTYPE_NAMES.get(self.dtype, self.dtype)
        variant = f"-{self.variant}" if self.variant else ""
        return f"{self.op}{variant}-{dtype}-{self.shape_key}-{form.value}"


DTYPE_NAMES = {"complex<f32>": "complex64", "complex<f64>": "complex128"}


def element_type(name: str) -> str:
    """A dtype as the corpus writes it in MLIR (complex64 -> complex<f32>); other names as given."""
    return next((mlir for mlir, short in DTYPE_NAMES.items() if short == name), name)


def render(case: Case, form: Form) -> str:
    """The case as a StableHLO module in generic op form (one op plus its constant operands)."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(case.name(form).encode()).digest()[:8], "little"))
    args: list[str] = []
    lines: list[str] = []
    names = [_define(o, f"%c{i}", form, rng, args, lines) for i, o in enumerate(case.operands)]
    for i, capture in enumerate(case.captures):
        _define(capture, f"%x{i}", form, rng, args, lines, name=f"%x{i}")
    results = ", ".join(str(r) for r in case.results)
    operand_types = ", ".join(str(o.type) for o in case.operands)
    regions = f" ({', '.join('{' + r + '}' for r in case.regions)})" if case.regions else ""
    attrs = f" {{{case.attrs}}}" if case.attrs else ""
    many = len(case.results) > 1
    lhs = f"%r:{len(case.results)}" if many else "%r"
    lines.append(f'    {lhs} = "stablehlo.{case.op}"({", ".join(names)}){regions}{attrs} : '
                 f"({operand_types}) -> ({results})")
    returned = ", ".join(f"%r#{i}" for i in range(len(case.results))) if many else "%r"
    lines.append(f"    return {returned} : {results}")
    body = "\n".join(lines)
    return f"module {{\n  func.func @main({', '.join(args)}) -> ({results}) {{\n{body}\n  }}\n}}\n"


def _define(operand: Operand, constant_name: str, form: Form, rng: np.random.Generator, args: list[str],
            lines: list[str], name: str | None = None) -> str:
    """Declare `operand` as a constant (appending a line) or an argument; its SSA name."""
    if operand.role is Role.FIXED or form is Form.CONST:
        value = _constant_values(operand, rng)
        lines.append(f"    {name or constant_name} = stablehlo.constant dense<{value}> : {operand.type}")
        return name or constant_name
    name = name or f"%arg{len(args)}"
    args.append(f"{name}: {operand.type}")
    return name


def _constant_values(operand: Operand, rng: np.random.Generator) -> str:
    t = operand.type
    if operand.role is Role.FIXED:
        if isinstance(operand.value, tuple):
            return _nested(np.asarray(operand.value), t.dtype)
        return _literal(operand.value, t.dtype)
    if operand.role is Role.INDEX:
        values = rng.integers(0, max(1, operand.bound or 1), size=t.shape)
    elif t.dtype == "i1":
        values = rng.integers(0, 2, size=t.shape).astype(bool)
    elif t.dtype.startswith("complex"):
        values = rng.standard_normal(size=t.shape) + 1j * rng.standard_normal(size=t.shape)
    elif t.dtype.startswith(("f", "bf")):
        drawn = rng.uniform(0.5, 2.0, size=t.shape) if operand.positive else rng.standard_normal(size=t.shape)
        # values exactly representable in the element type: the text says what the chip gets
        values = np.asarray(drawn).astype(numpy_dtype(t.dtype)).astype(np.float64)
    else:
        values = rng.integers(1 if operand.positive else 0, 8, size=t.shape)
    return _nested(np.asarray(values), t.dtype)


def _nested(values: np.ndarray, dtype: str) -> str:
    if values.ndim == 0:
        return _literal(values.item(), dtype)
    return "[" + ", ".join(_nested(v, dtype) for v in values) + "]"


def _literal(value: object, dtype: str) -> str:
    if dtype == "i1":
        return "true" if value else "false"
    if dtype.startswith("complex"):
        c = complex(value)  # type: ignore[arg-type]
        return f"({_float(c.real)}, {_float(c.imag)})"
    if dtype.startswith(("f", "bf")):
        x = float(value)  # type: ignore[arg-type]
        return _INFINITIES[dtype][x < 0] if np.isinf(x) else _float(x)
    return str(int(value))  # type: ignore[call-overload]


def _float(x: float) -> str:
    return repr(float(x))


# MLIR spells infinities as the element type's bit pattern in hex: (+inf, -inf)
_INFINITIES = {"f32": ("0x7F800000", "0xFF800000"), "f16": ("0x7C00", "0xFC00"), "bf16": ("0x7F80", "0xFF80"),
               "f64": ("0x7FF0000000000000", "0xFFF0000000000000")}
