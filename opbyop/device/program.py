"""Load the TTNN program tt-mlir emits (its `ttnn_runtime` dump) into plain Python objects.

The dump prints ops in generic form inside two custom-form wrappers. Three textual normalisations
make jaxlib's MLIR parse it with unregistered dialects: drop the wrapper
lines, rewrite `ttcore.load_cached(@f, [args])` into generic form with the callee as an attribute,
and turn `<{...}>` properties into an attribute dictionary. tt attributes stay opaque to MLIR and
are read here from their text (`#ttnn.name<key = value, ...>`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
from jaxlib.mlir import ir

from opbyop.device.arch import DeviceSpec
from opbyop.device.layout import Layout, parse_layout
from opbyop.errors import OpbyopError
from opbyop.ir.attributes import to_value
from opbyop.ir.context import make_context
from opbyop.ir.dense import parse_dense

_LOAD_CACHED = re.compile(r"ttcore\.load_cached\((@[\w.]+), \[([^\]]*)\]\)")
_PROPERTIES = re.compile(r"\) <\{(.*)\}> :")
_MESH_SHAPE = (re.compile(r"meshShape = (\d+)x(\d+)"), re.compile(r"mesh_shape (\d+)x(\d+)"),
               re.compile(r'#ttcore\.meshes<\[<"\w+" = (\d+)x(\d+)>'))

_MLIR_TO_FORMAT = {"f32": "f32", "bf16": "bf16", "f16": "f16", "si32": "si32", "ui32": "u32", "ui16": "u16",
                   "ui8": "u8", "i32": "si32", "i1": "i1", "u32": "u32", "u16": "u16", "u8": "u8"}


class ProgramError(OpbyopError):
    pass


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str  # element type of the tensor (f32, bf16, si32 ...)
    layout: Layout | None  # None: a host-side tensor without a TTNN layout

    @property
    def storage(self) -> str:
        """The format the bytes are in (a tile's element type may differ from the tensor's)."""
        return self.layout.dtype if self.layout is not None else self.dtype


@dataclass
class Op:
    name: str
    operands: list[int]
    results: list[int]
    operand_types: list[TensorType | None]
    result_types: list[TensorType | None]
    attrs: dict[str, Any]
    location: str = ""
    raw: dict[str, ir.Attribute] = field(default_factory=dict, repr=False)


@dataclass
class Function:
    name: str
    kind: str  # forward_device | const_eval | ...
    arguments: list[int]
    argument_types: list[TensorType | None]
    ops: list[Op]
    returns: list[int]
    return_types: list[TensorType | None]
    # The framework's type of each result (`ttcore.local_shape`): what the runtime hands the host
    # when the program holds it otherwise (an i1 as bf16, an i8 as si32 ...); None where absent.
    host_return_types: list[TensorType | None] = field(default_factory=list)


@dataclass
class Program:
    functions: dict[str, Function]
    entry: str
    spec: DeviceSpec
    text: str

    @property
    def main(self) -> Function:
        return self.functions[self.entry]

    @functools.cached_property
    def mesh_shape(self) -> tuple[int, int]:
        """The mesh the program was compiled for ((1, 1): one chip), read from its text once."""
        return program_mesh_shape(self.text)

    def op_names(self) -> list[str]:
        return [op.name for f in self.functions.values() for op in f.ops]


def program_mesh_shape(text: str) -> tuple[int, int]:
    """The mesh a TTNN program was compiled for; (1, 1) for a single-chip program."""
    for pattern in _MESH_SHAPE:
        m = pattern.search(text)
        if m:
            return int(m.group(1)), int(m.group(2))
    return (1, 1)


def generic_form(text: str) -> str:
    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("ttcore.device_module {", "ttcore.device @")):
            continue
        lines.append(line)
    closers = [i for i, line in enumerate(lines) if line.strip().startswith("} loc(")]
    if len(closers) >= 2:
        del lines[closers[-2]]  # the device_module's closing brace
    out = "\n".join(lines)
    out = _LOAD_CACHED.sub(lambda m: f'"ttcore.load_cached"({m.group(2)}) {{callee = {m.group(1)}}}', out)
    return _PROPERTIES.sub(lambda m: ") {" + m.group(1) + "} :", out)


def tensor_type(t: ir.Type) -> TensorType | None:
    if not isinstance(t, ir.RankedTensorType):
        return None  # !ttnn.device and other opaque types
    dtype = _MLIR_TO_FORMAT.get(str(t.element_type), str(t.element_type))
    layout = parse_layout(str(t.encoding)) if t.encoding is not None else None
    return TensorType(shape=tuple(t.shape), dtype=dtype, layout=layout)


def parse_tt_attribute(text: str) -> Any:
    """`#ttnn.kind<a = 1, b = lofi>` -> {'a': 1, 'b': 'lofi'}; positional values -> a list."""
    text = text.strip()
    m = re.match(r"^#?[\w.]*<(.*)>$", text, re.S)
    if not m:
        return _scalar(text)
    parts = split_top(m.group(1))
    if parts and all(_split_key(p) is not None for p in parts):
        return {k: parse_tt_attribute(v) for k, v in (_split_key(p) for p in parts)}  # type: ignore[misc]
    if len(parts) == 1:
        return _scalar(parts[0])
    return [parse_tt_attribute(p) for p in parts]


def split_top(body: str) -> list[str]:
    """`body` split at its top-level commas (not those inside <>, (), [] or {}), each part stripped."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i].strip())
            start = i + 1
    tail = body[start:].strip()
    return parts + ([tail] if tail else [])


def _split_key(part: str) -> tuple[str, str] | None:
    m = re.match(r"^(\w+) = (.*)$", part, re.S)
    return (m.group(1), m.group(2)) if m else None


def _scalar(text: str) -> Any:
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    for cast in (int, float):
        try:
            return cast(text.split(" : ")[0])
        except ValueError:
            pass
    return text


def _attribute(attr: ir.Attribute) -> Any:
    if isinstance(attr, ir.DenseElementsAttr):
        return None  # a constant's values: read from `raw` by the kernel that needs them (dense_values)
    return _tt_values(to_value(attr))


def _tt_values(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("#"):
        return parse_tt_attribute(value)
    if isinstance(value, list):
        return [_tt_values(v) for v in value]
    return value


# Element types as TTNN programs spell them -> numpy (si32 is the chip's int32).
_DENSE_DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
                 "si32": np.int32, "i32": np.int32, "si16": np.int16, "i16": np.int16, "si8": np.int8, "i8": np.int8,
                 "i64": np.int64, "si64": np.int64, "ui32": np.uint32, "ui16": np.uint16, "ui8": np.uint8,
                 "ui64": np.uint64, "i1": np.bool_}
_DENSE_TOKEN = re.compile(r"true|false|[-+]?0x[0-9A-Fa-f]+|[-+]?(?:inf|nan)|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def dense_values(attr: ir.Attribute) -> np.ndarray:
    """The numpy value of a DenseElementsAttr (ttnn.constant), exactly, for every element type
    (hex-encoded bf16, i1, ui64 ... are read from the printed form by opbyop.ir.dense)."""
    if not isinstance(attr, ir.DenseElementsAttr):
        raise ProgramError(f"expected dense elements, got {attr}", "this constant form is not simulated")
    shape = tuple(attr.type.shape)
    try:
        return np.array(attr).reshape(shape)
    except (TypeError, ValueError, RuntimeError):  # no buffer protocol (bf16 ...)
        return parse_dense(str(attr))


# Programs a reused context parses before it is made anew: a context keeps every type and attribute it
# ever interned (2,000 distinct op programs grew a process by 5 MB, against 1.6 MB with a context each).
RENEW_AFTER = 2048


class ReusedContext:
    """One MLIR context for the programs parsed one after another, made anew every RENEW_AFTER of them.
    A new context costs more than the parse of a single op's program: 4.5 ms a program with a context
    each, 0.9 ms with one reused (benchmarks/bench_program_load.py --workspace, 2,000 programs of a
    breadth run)."""

    def __init__(self, renew_after: int = RENEW_AFTER):
        self._renew_after = renew_after
        self._ctx: ir.Context | None = None
        self._served = 0

    def get(self) -> ir.Context:
        """The context for the next parse."""
        if self._ctx is None or self._served >= self._renew_after:
            self._ctx, self._served = make_context(allow_unregistered=True), 0
        self._served += 1
        return self._ctx


def load_program(text: str, ctx: ir.Context | None = None) -> Program:
    """Parse a ttnn_runtime dump; the entry is the function marked forward_device (or @main)."""
    ctx = ctx or make_context(allow_unregistered=True)
    try:
        module = ir.Module.parse(generic_form(text), ctx)
    except ir.MLIRError as e:
        raise ProgramError(f"cannot read the TTNN program: {e}", "pass an unmodified ttnn_runtime dump") from None
    functions: dict[str, Function] = {}
    ids: dict[ir.Value, int] = {}

    def vid(v: ir.Value) -> int:
        return ids.setdefault(v, len(ids))

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "func.func" and len(op.regions[0].blocks) > 0:
            functions[ir.StringAttr(op.attributes["sym_name"]).value] = _function(op, vid)
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    # @main when it is a device program; control flow adds forward_device functions of its own
    # (while bodies, case branches) that are never the entry
    entry = "main" if functions.get("main") is not None and functions["main"].kind in ("forward_device", "") else \
        next((n for n, f in functions.items() if f.kind == "forward_device"), "main")
    if entry not in functions:
        raise ProgramError("the TTNN program has no entry function", "pass a ttnn_runtime dump of tt-mlir")
    return Program(functions=functions, entry=entry, spec=DeviceSpec.from_system_desc(text), text=text)


def _function(op: ir.Operation, vid: Any) -> Function:
    types: dict[ir.Type, TensorType | None] = {}  # MLIR types are uniqued: read each layout once

    def ttype(t: ir.Type) -> TensorType | None:
        if t not in types:
            types[t] = tensor_type(t)
        return types[t]

    name = ir.StringAttr(op.attributes["sym_name"]).value
    kind = ir.StringAttr(op.attributes["tt.function_type"]).value if "tt.function_type" in op.attributes else ""
    block = op.regions[0].blocks[0]
    ops: list[Op] = []
    returns: list[int] = []
    return_types: list[TensorType | None] = []
    for inner in _body(op):
        if inner.name == "func.return":
            returns = [vid(v) for v in inner.operands]
            return_types = [ttype(v.type) for v in inner.operands]
            continue
        raw = {n: inner.attributes[n] for n in inner.attributes}
        ops.append(Op(name=inner.name, operands=[vid(v) for v in inner.operands], results=[vid(v) for v in inner.results],
                      operand_types=[ttype(v.type) for v in inner.operands],
                      result_types=[ttype(v.type) for v in inner.results],
                      attrs={n: _attribute(a) for n, a in raw.items()}, location=str(inner.location), raw=raw))
    return Function(name=name, kind=kind, arguments=[vid(a) for a in block.arguments],
                    argument_types=[ttype(a.type) for a in block.arguments], ops=ops, returns=returns,
                    return_types=return_types, host_return_types=_local_types(op, "res_attrs", len(returns)))


def _body(function: ir.Operation) -> list[ir.Operation]:
    """The function's own ops, in order, as plain Operations. A pre-order walk that skips nested
    regions: iterating `block.operations` builds an OpView per op instead, and for an unregistered
    dialect (ttnn, ttcore) each one tries, and fails, to import three Python modules (1 s on a
    bert-base program)."""
    ops: list[ir.Operation] = []

    def visit(inner: ir.Operation) -> ir.WalkResult:
        if inner == function:
            return ir.WalkResult.ADVANCE
        ops.append(inner)
        return ir.WalkResult.SKIP

    function.walk(visit, ir.WalkOrder.PRE_ORDER)
    return ops


_LOCAL_SHAPE = re.compile(r"local_shape = tensor<([^>]*(?:<[^>]*>)?)>")


def _local_types(op: ir.Operation, attribute: str, count: int) -> list[TensorType | None]:
    """`ttcore.local_shape = #ttcore<local_shape local_shape = tensor<13xi1>>` of each argument or
    result: the framework's shape and element type."""
    out: list[TensorType | None] = [None] * count
    if attribute not in op.attributes:
        return out
    for i, entry in enumerate(ir.ArrayAttr(op.attributes[attribute])):
        m = _LOCAL_SHAPE.search(str(entry))
        if m is None or i >= count:
            continue
        parts = m.group(1).split("x")
        dims = []
        while parts and parts[0].isdigit():
            dims.append(int(parts.pop(0)))
        out[i] = TensorType(shape=tuple(dims), dtype="x".join(parts), layout=None)
    return out


_EMITTED = re.compile(r'"((?:ttnn|ttcore)\.\w+)"\(|\b(ttcore\.load_cached)\(')


def emitted_ops(text: str) -> list[str]:
    """The TTNN / ttcore ops a ttnn_runtime dump uses, each once, in order of first use (read from the
    text: ops print in generic form, `"ttnn.add"(...)`, load_cached in custom form)."""
    return list(dict.fromkeys(m.group(1) or m.group(2) for m in _EMITTED.finditer(text)))
