"""Variants of a single-op module: its dimensions changed, or its element type, consistently.

The op's module (constant chain, then the op) is read once: every axis of every value gets an
equivalence class from the ops' own semantics, so axes that must stay equal change together (an
element-wise op's operands and result; dot_general's contracting dims on both sides and its batch
dims; a convolution's input channels on the input and the kernel; a broadcast's mapped axes). A
convolution's output spatial sizes are recomputed from its window. A variant is the module re-parsed
with new types on every value (splat constants re-made, full-axis slice bounds moved), then verified
by jaxlib's MLIR: a variant the op's own verifier refuses is skipped, never compiled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from jaxlib.mlir import ir

from opbyop.ir.context import make_context
from opbyop.ir.rewrite import body_ops, main_func
from opbyop.ir.parse import parse_module

# Element types the Tenstorrent chips hold (their data formats: f32, f16, bf16 ... u32, u16, u8, si32),
# in StableHLO spelling; a float op is tried in the other float types, an integer op in the others.
FLOAT_TYPES = ("f32", "bf16", "f16")
INTEGER_TYPES = ("i32", "ui32", "ui16", "ui8")
MAX_ELEMENTS = 1 << 22  # a grown tensor stays below this (16 MiB of f32): the simulator and XLA hold it

ValueKey = tuple[int, int]  # (-1, argument index) or (op position, result index)
AxisKey = tuple[ValueKey, int]


class Rejected(Exception):
    """A variant that cannot be made or does not verify: skipped, with the reason."""


@dataclass(frozen=True)
class Dimension:
    """One class of axes that change together."""

    index: int
    label: str  # e.g. "input channels", "contracting", "arg0 d1"
    size: int  # in the op as found
    axes: tuple[AxisKey, ...]


@dataclass
class _Values:
    """Every value of @main (arguments, then each op's results) with its ranked type."""

    keys: list[ValueKey] = field(default_factory=list)
    types: dict[ValueKey, ir.RankedTensorType] = field(default_factory=dict)
    values: dict[ValueKey, ir.Value] = field(default_factory=dict)


def _collect(main: ir.Operation, ops: list[ir.Operation]) -> _Values:
    found = _Values()
    entries = [((-1, i), a) for i, a in enumerate(main.regions[0].blocks[0].arguments)]
    entries += [((p, j), r) for p, op in enumerate(ops) for j, r in enumerate(op.results)]
    for key, value in entries:
        found.keys.append(key)
        found.values[key] = value
        if isinstance(value.type, ir.RankedTensorType):
            found.types[key] = ir.RankedTensorType(value.type)
    return found


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[AxisKey, AxisKey] = {}

    def find(self, a: AxisKey) -> AxisKey:
        self.parent.setdefault(a, a)
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: AxisKey, b: AxisKey) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _ints(op: ir.Operation, name: str) -> list[int] | None:
    if name not in op.attributes:
        return None
    attr = op.attributes[name]
    try:
        return list(ir.DenseI64ArrayAttr(attr))
    except (ValueError, TypeError):
        try:
            return [int(v) for v in ir.DenseIntElementsAttr(attr)]
        except (ValueError, TypeError):
            return None


@dataclass
class _Op:
    """What the tying rules need of one op."""

    op: ir.Operation
    operands: list[ValueKey | None]
    results: list[ValueKey]


class OpModule:
    """A single-op module (as the splitter writes it), its dimensions and element type."""

    def __init__(self, text: str, name: str = "<op>"):
        self.text = text
        self.name = name
        with make_context() as ctx, ir.Location.unknown(ctx):
            module = parse_module(text, ctx, name)
            main = main_func(module, name)
            ops = body_ops(main)
            if not ops:
                raise Rejected(f"{name} has no op")
            values = _collect(main, ops)
            self.op_name = ops[-1].name
            self.shapes = {k: tuple(t.shape) for k, t in values.types.items()}
            self.element_types = {k: str(t.element_type) for k, t in values.types.items()}
            self.frozen = self._frozen(ops, values)
            uf = _UnionFind()
            index = {v: k for k, v in values.values.items()}
            described = [_Op(op, [index.get(v) for v in op.operands], [(p, j) for j in range(len(op.results))])
                         for p, op in enumerate(ops)]
            labels: dict[AxisKey, str] = {}
            for item in described:
                _tie(item, self.shapes, uf, labels)
            self.dimensions = self._dimensions(uf, labels, len(ops))
            self.dtype = self._primary_dtype(ops, values)

    @staticmethod
    def _frozen(ops: list[ir.Operation], values: _Values) -> set[ValueKey]:
        """Values whose shape cannot change: non-splat constants (their data has that shape)."""
        frozen = set()
        for p, op in enumerate(ops):
            if op.name == "stablehlo.constant":
                attr = op.attributes["value"]
                if not (isinstance(attr, ir.DenseElementsAttr) and ir.DenseElementsAttr(attr).is_splat):
                    frozen.add((p, 0))
        return frozen

    def _dimensions(self, uf: _UnionFind, labels: dict[AxisKey, str], n_ops: int) -> list[Dimension]:
        classes: dict[AxisKey, list[AxisKey]] = {}
        for key, shape in self.shapes.items():
            for axis in range(len(shape)):
                classes.setdefault(uf.find((key, axis)), []).append((key, axis))
        found = []
        for members in classes.values():
            sources = [a for a in members if a[0][0] == -1 or a[0][0] < n_ops - 1]  # arguments and constants
            if not sources or any(a[0] in self.frozen for a in members):
                continue
            sizes = {self.shapes[k][axis] for k, axis in members}
            if len(sizes) != 1:  # tied axes of different sizes: the rules misread this op
                continue
            label = next((labels[a] for a in members if a in labels), None) or _default_label(members, n_ops)
            found.append(Dimension(index=len(found), label=label, size=sizes.pop(), axes=tuple(sorted(members))))
        return found

    @staticmethod
    def _primary_dtype(ops: list[ir.Operation], values: _Values) -> str:
        """The element type of the op's first tensor operand (else of its first result)."""
        for v in list(ops[-1].operands) + list(ops[-1].results):
            if isinstance(v.type, ir.RankedTensorType):
                return str(ir.RankedTensorType(v.type).element_type)
        return ""

    def other_dtypes(self) -> list[str]:
        """The chip's other element types of the op's family (an f64 op is tried in f32, bf16, f16)."""
        for family, wide in ((FLOAT_TYPES, ("f64",)), (INTEGER_TYPES, ("i64", "i16", "i8", "ui64"))):
            if self.dtype in family or self.dtype in wide:
                return [t for t in family if t != self.dtype]
        return []

    def dimension(self, label_or_index: str | int) -> Dimension:
        for d in self.dimensions:
            if d.index == label_or_index or d.label == label_or_index:
                return d
        raise KeyError(label_or_index)

    def variant(self, sizes: dict[int, int] | None = None, dtype: str | None = None) -> str:
        """The module with dimension `index` -> size for each of `sizes`, and the op's element type
        replaced by `dtype`; Rejected when it cannot be made or does not verify."""
        sizes = sizes or {}
        new_axes: dict[AxisKey, int] = {}
        for index, size in sizes.items():
            if size < 1:
                raise Rejected(f"size {size} is not a dimension")
            for axis in self.dimension(index).axes:
                new_axes[axis] = size
        with make_context() as ctx, ir.Location.unknown(ctx):
            module = parse_module(self.text, ctx, self.name)
            main = main_func(module, self.name)
            ops = body_ops(main)
            values = _collect(main, ops)
            shapes = {k: [new_axes.get((k, a), d) for a, d in enumerate(s)] for k, s in self.shapes.items()}
            _derive(ops, values, shapes)
            for k, shape in shapes.items():
                if 0 in shape and 0 not in self.shapes[k]:  # e.g. an input shrunk below its window
                    raise Rejected(f"a tensor of {'x'.join(map(str, shape))} would be empty")
                if _elements(shape) > MAX_ELEMENTS:
                    raise Rejected(f"a tensor of {'x'.join(map(str, shape))} is above the {MAX_ELEMENTS:,}-element cap")
            retype = _element_mapper(ctx, self.dtype, dtype)
            for key in values.keys:
                if key not in values.types:
                    continue
                old = values.types[key]
                new = ir.RankedTensorType.get(shapes[key], retype(old.element_type), old.encoding)
                if new != old:
                    values.values[key].set_type(new)
                    if key[0] >= 0:
                        _fix_op(ops[key[0]], old, new, new_axes, key)
            if dtype is not None:
                for op in ops:
                    _retype_regions(op, retype)
            _fix_attributes(ops, values, self.shapes, shapes)
            _fix_signature(main)
            try:
                ok = module.operation.verify()
            except ir.MLIRError as e:
                details = [d.message for d in getattr(e, "error_diagnostics", [])]
                raise Rejected(f"does not verify: {_first_line(details[0] if details else str(e))}") from None
            if not ok:
                raise Rejected("does not verify")
            return module.operation.get_asm(enable_debug_info=True)


def _elements(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _first_line(text: str) -> str:
    """The verifier's complaint, without the location that precedes it."""
    m = re.search(r"'[\w.]+' op [^\n]*", text)
    if m:
        return m.group(0)[:300]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines or [""])[0][:300]


def _default_label(members: list[AxisKey], n_ops: int) -> str:
    args = sorted(a for a in members if a[0][0] == -1)
    if args:
        (_, i), axis = args[0]
        return f"arg{i} d{axis}"
    (p, j), axis = sorted(members)[0]
    return f"constant {p} d{axis}"


# --------------------------------------------------------------------------- tying rules
def _tie(item: _Op, shapes: dict[ValueKey, tuple[int, ...]], uf: _UnionFind, labels: dict[AxisKey, str]) -> None:
    rule = _RULES.get(item.op.name)
    if rule is not None:
        rule(item, shapes, uf, labels)
        return
    _tie_elementwise(item, shapes, uf, labels)


def _tie_elementwise(item: _Op, shapes, uf: _UnionFind, labels) -> None:  # noqa: ANN001
    """Operands and results of one shape (scalars aside): axis k of each is one dimension."""
    ranked = [k for k in item.operands + item.results if k is not None and k in shapes and shapes[k]]
    if not ranked:
        return
    first = shapes[ranked[0]]
    if any(shapes[k] != first for k in ranked):
        return  # shapes differ and no rule knows this op: each axis on its own (verification decides)
    for k in ranked[1:]:
        for axis in range(len(first)):
            uf.union((ranked[0], axis), (k, axis))


def _tie_broadcast(item: _Op, shapes, uf, labels) -> None:  # noqa: ANN001
    src, out = item.operands[0], item.results[0]
    dims = _ints(item.op, "broadcast_dimensions") or []
    if src is None or src not in shapes:
        return
    for i, d in enumerate(dims):
        if shapes[src][i] == shapes[out][d]:  # an axis of 1 broadcast to more is the result's alone
            uf.union((src, i), (out, d))


def _tie_transpose(item: _Op, shapes, uf, labels) -> None:  # noqa: ANN001
    src, out = item.operands[0], item.results[0]
    perm = _ints(item.op, "permutation") or []
    if src is not None and src in shapes:
        for i, p in enumerate(perm):
            uf.union((src, p), (out, i))


def _tie_reshape(item: _Op, shapes, uf, labels) -> None:  # noqa: ANN001
    """Axes of equal size in the same order of non-unit axes (4x128 -> 4x1x128): tied."""
    src, out = item.operands[0], item.results[0]
    if src is None or src not in shapes:
        return
    a = [(i, d) for i, d in enumerate(shapes[src]) if d != 1]
    b = [(i, d) for i, d in enumerate(shapes[out]) if d != 1]
    if [d for _, d in a] == [d for _, d in b]:
        for (i, _), (j, _) in zip(a, b):
            uf.union((src, i), (out, j))


def _tie_dot(item: _Op, shapes, uf, labels) -> None:  # noqa: ANN001
    from jaxlib.mlir.dialects import stablehlo

    lhs, rhs = item.operands[:2]
    out = item.results[0]
    dn = stablehlo.DotDimensionNumbers(item.op.attributes["dot_dimension_numbers"])
    lb, rb = list(dn.lhs_batching_dimensions), list(dn.rhs_batching_dimensions)
    lc, rc = list(dn.lhs_contracting_dimensions), list(dn.rhs_contracting_dimensions)
    position = 0
    for i, j in zip(lb, rb):
        _union_labelled(uf, labels, "batch", (lhs, i), (rhs, j), (out, position))
        position += 1
    for i, j in zip(lc, rc):
        _union_labelled(uf, labels, "contracting (K)", (lhs, i), (rhs, j))
    for side, batch, contract, name in ((lhs, lb, lc, "rows (M)"), (rhs, rb, rc, "columns (N)")):
        if side is None or side not in shapes:
            continue
        for axis in range(len(shapes[side])):
            if axis not in batch and axis not in contract:
                _union_labelled(uf, labels, name if position < len(shapes[out]) else "", (side, axis), (out, position))
                position += 1


def _tie_convolution(item: _Op, shapes, uf, labels) -> None:  # noqa: ANN001
    from jaxlib.mlir.dialects import stablehlo

    lhs, rhs = item.operands[:2]
    out = item.results[0]
    dn = stablehlo.ConvDimensionNumbers(item.op.attributes["dimension_numbers"])
    groups = _int_attr(item.op, "feature_group_count")
    batch_groups = _int_attr(item.op, "batch_group_count")
    if batch_groups == 1:
        _union_labelled(uf, labels, "batch", (lhs, dn.input_batch_dimension), (out, dn.output_batch_dimension))
    if groups == 1:
        _union_labelled(uf, labels, "input channels", (lhs, dn.input_feature_dimension),
                        (rhs, dn.kernel_input_feature_dimension))
    _union_labelled(uf, labels, "output channels", (rhs, dn.kernel_output_feature_dimension),
                    (out, dn.output_feature_dimension))
    names = ("height", "width") if len(dn.input_spatial_dimensions) == 2 else \
        tuple(f"spatial {i}" for i in range(len(dn.input_spatial_dimensions)))
    for name, i, k in zip(names, dn.input_spatial_dimensions, dn.kernel_spatial_dimensions):
        labels.setdefault(uf.find((lhs, i)), f"input {name}")
        labels.setdefault(uf.find((rhs, k)), f"kernel {name}")


def _tie_reduce(item: _Op, shapes, uf, labels) -> None:  # noqa: ANN001
    dims = set(_ints(item.op, "dimensions") or [])
    inputs = item.operands[: len(item.operands) // 2]  # then as many init values
    for src, out in zip(inputs, item.results):
        if src is None or src not in shapes:
            continue
        kept = [a for a in range(len(shapes[src])) if a not in dims]
        for position, axis in enumerate(kept):
            uf.union((src, axis), (out, position))
        for axis in dims:
            labels.setdefault(uf.find((src, axis)), f"reduced d{axis}")
    for a, b in zip(inputs, inputs[1:]):
        if a is not None and b is not None and a in shapes and b in shapes:
            for axis in range(len(shapes[a])):
                uf.union((a, axis), (b, axis))


def _tie_windowed(item: _Op, shapes, uf, labels) -> None:  # noqa: ANN001
    """reduce_window / select_and_scatter: an axis with a window of 1, stride 1 and no padding is the
    same dimension in and out; the others are the window's (not changed here)."""
    window = _ints(item.op, "window_dimensions") or []
    strides = _ints(item.op, "window_strides") or [1] * len(window)
    padding = _ints(item.op, "padding") or [0] * (2 * len(window))
    ranked = [k for k in item.operands + item.results if k is not None and k in shapes and len(shapes[k]) == len(window)]
    for axis, (w, s) in enumerate(zip(window, strides)):
        if w == 1 and s == 1 and padding[2 * axis] == padding[2 * axis + 1] == 0:
            for k in ranked[1:]:
                uf.union((ranked[0], axis), (k, axis))


def _tie_concatenate(item: _Op, shapes, uf, labels) -> None:  # noqa: ANN001
    axis = _int_attr(item.op, "dimension")
    ranked = [k for k in item.operands + item.results if k is not None and k in shapes]
    for k in ranked[1:]:
        for a in range(len(shapes[k])):
            if a != axis:
                uf.union((ranked[0], a), (k, a))


def _tie_full_axes(item: _Op, shapes, uf, labels) -> None:  # noqa: ANN001
    """slice, dynamic_slice, gather ...: an axis taken whole is the same dimension in and out."""
    src, out = item.operands[0], item.results[0]
    if src is None or src not in shapes or len(shapes[src]) != len(shapes[out]):
        return
    for axis, (a, b) in enumerate(zip(shapes[src], shapes[out])):
        if a == b:
            uf.union((src, axis), (out, axis))


def _tie_square(item: _Op, shapes, uf, labels) -> None:  # noqa: ANN001
    """cholesky, triangular_solve: element-wise in the batch dims, and each matrix is square."""
    _tie_elementwise(item, shapes, uf, labels)
    for k in item.operands + item.results:
        if k is not None and k in shapes and len(shapes[k]) >= 2 and shapes[k][-1] == shapes[k][-2]:
            _union_labelled(uf, labels, "matrix size", (k, len(shapes[k]) - 1), (k, len(shapes[k]) - 2))


def _union_labelled(uf: _UnionFind, labels: dict[AxisKey, str], label: str, *axes: tuple) -> None:
    axes = tuple(a for a in axes if a[0] is not None)
    for a in axes[1:]:
        uf.union(axes[0], a)
    if axes and label:
        labels.setdefault(uf.find(axes[0]), label)
        for a in axes:
            labels.setdefault(a, label)


def _int_attr(op: ir.Operation, name: str) -> int:
    if name not in op.attributes:
        return 0 if name == "dimension" else 1
    return ir.IntegerAttr(op.attributes[name]).value


_RULES: dict[str, Callable] = {
    "stablehlo.broadcast_in_dim": _tie_broadcast,
    "stablehlo.transpose": _tie_transpose,
    "stablehlo.reshape": _tie_reshape,
    "stablehlo.dot_general": _tie_dot,
    "stablehlo.convolution": _tie_convolution,
    "stablehlo.reduce": _tie_reduce,
    "stablehlo.reduce_window": _tie_windowed,
    "stablehlo.select_and_scatter": _tie_windowed,
    "stablehlo.concatenate": _tie_concatenate,
    "stablehlo.slice": _tie_full_axes,
    "stablehlo.dynamic_slice": _tie_full_axes,
    "stablehlo.gather": _tie_full_axes,
    "stablehlo.pad": _tie_full_axes,
    "stablehlo.cholesky": _tie_square,
    "stablehlo.triangular_solve": _tie_square,
    "stablehlo.iota": lambda *a: None,
    "stablehlo.constant": lambda *a: None,
}


# --------------------------------------------------------------------------- rewriting
def _derive(ops: list[ir.Operation], values: _Values, shapes: dict[ValueKey, list[int]]) -> None:
    """Result sizes that follow from their operands': a convolution's or a reduce_window's output
    (window arithmetic), a concatenation's axis."""
    from jaxlib.mlir.dialects import stablehlo

    index = {v: k for k, v in values.values.items()}
    for p, op in enumerate(ops):
        operands = [index.get(v) for v in op.operands]
        if op.name == "stablehlo.convolution" and all(o in shapes for o in operands[:2]):
            dn = stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
            lhs, rhs, out = shapes[operands[0]], shapes[operands[1]], shapes[(p, 0)]
            n = len(dn.input_spatial_dimensions)
            strides = _ints(op, "window_strides") or [1] * n
            padding = _ints(op, "padding") or [0] * (2 * n)
            lhs_dil = _ints(op, "lhs_dilation") or [1] * n
            rhs_dil = _ints(op, "rhs_dilation") or [1] * n
            for s, (i, k, o) in enumerate(zip(dn.input_spatial_dimensions, dn.kernel_spatial_dimensions,
                                              dn.output_spatial_dimensions)):
                size = (lhs[i] - 1) * lhs_dil[s] + 1 + padding[2 * s] + padding[2 * s + 1]
                window = (rhs[k] - 1) * rhs_dil[s] + 1
                out[o] = max(0, (size - window) // strides[s] + 1)
        elif op.name == "stablehlo.reduce_window" and operands and operands[0] in shapes:
            src = shapes[operands[0]]
            n = len(src)
            window = _ints(op, "window_dimensions") or [1] * n
            strides = _ints(op, "window_strides") or [1] * n
            padding = _ints(op, "padding") or [0] * (2 * n)
            base = _ints(op, "base_dilations") or [1] * n
            dilations = _ints(op, "window_dilations") or [1] * n
            for r in range(len(op.results)):
                for a in range(n):
                    size = (src[a] - 1) * base[a] + 1 + padding[2 * a] + padding[2 * a + 1]
                    shapes[(p, r)][a] = max(0, (size - ((window[a] - 1) * dilations[a] + 1)) // strides[a] + 1)
        elif op.name == "stablehlo.concatenate" and all(o in shapes for o in operands):
            axis = _int_attr(op, "dimension")
            shapes[(p, 0)][axis] = sum(shapes[o][axis] for o in operands)


def _element_mapper(ctx: ir.Context, old: str, new: str | None) -> Callable[[ir.Type], ir.Type]:
    if new is None or new == old:
        return lambda t: t
    target = ir.Type.parse(new, ctx)

    def retype(t: ir.Type) -> ir.Type:
        return target if str(t) == old else t

    return retype


def _fix_op(op: ir.Operation, old: ir.RankedTensorType, new: ir.RankedTensorType,
            new_axes: dict[AxisKey, int], key: ValueKey) -> None:
    """A constant's value re-made for its new type (a splat keeps its value)."""
    if op.name != "stablehlo.constant":
        return
    attr = ir.DenseElementsAttr(op.attributes["value"])
    if attr.is_splat:
        scalar = attr.get_splat_value()
        op.attributes["value"] = ir.DenseElementsAttr.get_splat(new, _scalar(scalar, new.element_type))
        return
    import numpy as np

    if tuple(old.shape) != tuple(new.shape):
        raise Rejected("a constant operand that is not a splat cannot change shape")
    try:
        data = np.array(attr)
        converted = data.astype(_numpy_type(str(new.element_type)))
        op.attributes["value"] = ir.DenseElementsAttr.get(converted, type=new.element_type, shape=list(new.shape))
    except Exception as e:
        raise Rejected(f"the constant operand cannot be converted to {new.element_type}: {e}") from None


def _numpy_type(name: str):  # noqa: ANN202
    import ml_dtypes
    import numpy as np

    table = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64,
             "i32": np.int32, "i64": np.int64, "ui32": np.uint32, "ui16": np.uint16, "ui8": np.uint8,
             "i16": np.int16, "i8": np.int8, "i1": np.bool_}
    return table[name]


def _scalar(value: ir.Attribute, element: ir.Type) -> ir.Attribute:
    """A splat value for `element` (float <-> float, integer <-> integer, across them by value)."""
    if isinstance(value, ir.FloatAttr):
        number = ir.FloatAttr(value).value
    elif isinstance(value, ir.IntegerAttr):
        number = ir.IntegerAttr(value).value
    else:
        raise Rejected(f"a splat constant of {value} cannot be re-made")
    if isinstance(element, ir.IntegerType):
        width = ir.IntegerType(element).width
        if width == 1:
            return ir.IntegerAttr.get(element, 1 if number else 0)
        if not float(number).is_integer() and not isinstance(number, int):
            raise Rejected(f"the constant {number} has no {element} value")
        number = int(number)
        if ir.IntegerType(element).is_unsigned and number < 0:
            raise Rejected(f"the constant {number} has no {element} value")
        return ir.IntegerAttr.get(element, number)
    return ir.FloatAttr.get(element, float(number))


def _retype_regions(op: ir.Operation, retype: Callable[[ir.Type], ir.Type]) -> None:
    """Reduction bodies and the like follow the new element type (their values are scalars)."""
    for region in op.regions:
        for block in region.blocks:
            for arg in block.arguments:
                _retype_value(arg, retype)
            for inner in block.operations:
                for r in inner.results:
                    _retype_value(r, retype)
                if inner.operation.name == "stablehlo.constant":
                    t = ir.RankedTensorType(inner.results[0].type)
                    attr = ir.DenseElementsAttr(inner.attributes["value"])
                    if attr.is_splat:
                        inner.attributes["value"] = ir.DenseElementsAttr.get_splat(
                            t, _scalar(attr.get_splat_value(), t.element_type))
                _retype_regions(inner.operation, retype)


def _retype_value(value: ir.Value, retype: Callable[[ir.Type], ir.Type]) -> None:
    if isinstance(value.type, ir.RankedTensorType):
        t = ir.RankedTensorType(value.type)
        element = retype(t.element_type)
        if element != t.element_type:
            value.set_type(ir.RankedTensorType.get(list(t.shape), element, t.encoding))


def _fix_attributes(ops: list[ir.Operation], values: _Values, old: dict[ValueKey, tuple[int, ...]],
                    new: dict[ValueKey, list[int]]) -> None:
    """Bounds that named a whole axis move with it (slice limits, dynamic_slice sizes, gather sizes)."""
    index = {v: k for k, v in values.values.items()}
    for op in ops:
        if op.name not in ("stablehlo.slice", "stablehlo.dynamic_slice", "stablehlo.gather") or not op.operands:
            continue
        src = index.get(op.operands[0])
        if src is None or src not in old:
            continue
        for name in ("limit_indices", "slice_sizes"):
            bounds = _ints(op, name)
            if bounds is None or len(bounds) != len(old[src]):
                continue
            moved = [new[src][a] if b == old[src][a] else b for a, b in enumerate(bounds)]
            if moved != bounds:
                op.attributes[name] = ir.DenseI64ArrayAttr.get(moved)


def _fix_signature(main: ir.Operation) -> None:
    block = main.regions[0].blocks[0]
    terminator = list(block.operations)[-1]
    fn = ir.FunctionType.get([a.type for a in block.arguments], [v.type for v in terminator.operands])
    main.attributes["function_type"] = ir.TypeAttr.get(fn)
