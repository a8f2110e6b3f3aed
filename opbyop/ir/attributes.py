"""MLIR attributes as structured, JSON-ready values (never a string to regex-parse later)."""

from __future__ import annotations

import hashlib
from typing import Any, Callable

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from opbyop.ir.dense import parse_dense

_SMALL_ELEMENTS = 16  # dense constants up to this many elements are recorded by value


def _fields(cls: type, names: list[str]) -> Callable[[ir.Attribute], dict[str, Any]]:
    def convert(attr: ir.Attribute) -> dict[str, Any]:
        typed = cls(attr)
        return {n: _plain(getattr(typed, n)) for n in names}

    return convert


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _dense(attr: ir.Attribute) -> dict[str, Any]:
    return dense_summary(str(attr))


def dense_summary(text: str) -> dict[str, Any]:
    """A dense constant as JSON-ready data: type and shape, and its value (splat, up to 16 values)
    or the sha256 of its values. Every element type: bf16, f16, i1, ui64, complex ([re, im])."""
    values = parse_dense(text)
    out: dict[str, Any] = {"type": text[text.rindex(":") + 1:].strip(), "shape": list(values.shape)}
    flat = values.reshape(-1)
    if flat.size > 1 and bool(np.all(flat == flat[0])):
        out["splat"] = _json_scalar(flat[0])
    elif flat.size == 1:
        out["splat"] = _json_scalar(flat[0])
    elif flat.size <= _SMALL_ELEMENTS:
        out["values"] = [_json_scalar(v) for v in flat]
    else:
        out["sha256"] = hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest()
    return out


def _json_scalar(value: Any) -> Any:
    """A numpy scalar as a JSON value: complex as [re, im], NaN and infinities as their names."""
    if isinstance(value, (complex, np.complexfloating)):
        return [_json_scalar(float(value.real)), _json_scalar(float(value.imag))]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    number = float(value)
    return number if np.isfinite(number) else str(number)


def _scalar(attr: ir.Attribute) -> Any:
    if isinstance(attr, (ir.BoolAttr, ir.IntegerAttr, ir.FloatAttr)):
        return attr.value
    return str(attr)


# Checked in order; the first class whose isinstance() accepts the attribute converts it.
_CONVERTERS: list[tuple[type, Callable[[ir.Attribute], Any]]] = [
    (ir.BoolAttr, lambda a: ir.BoolAttr(a).value),
    (ir.IntegerAttr, lambda a: ir.IntegerAttr(a).value),
    (ir.FloatAttr, lambda a: ir.FloatAttr(a).value),
    (ir.StringAttr, lambda a: ir.StringAttr(a).value),
    (ir.DenseI64ArrayAttr, lambda a: list(ir.DenseI64ArrayAttr(a))),
    (ir.DenseI32ArrayAttr, lambda a: list(ir.DenseI32ArrayAttr(a))),
    (ir.DenseBoolArrayAttr, lambda a: list(ir.DenseBoolArrayAttr(a))),
    (ir.DenseElementsAttr, _dense),
    (ir.ArrayAttr, lambda a: [to_value(x) for x in ir.ArrayAttr(a)]),
    (ir.TypeAttr, lambda a: str(ir.TypeAttr(a).value)),
    (ir.FlatSymbolRefAttr, lambda a: ir.FlatSymbolRefAttr(a).value),
    (stablehlo.ComparisonDirectionAttr, lambda a: stablehlo.ComparisonDirectionAttr(a).value),
    (stablehlo.ComparisonTypeAttr, lambda a: stablehlo.ComparisonTypeAttr(a).value),
    (stablehlo.PrecisionAttr, lambda a: stablehlo.PrecisionAttr(a).value),
    (stablehlo.TransposeAttr, lambda a: stablehlo.TransposeAttr(a).value),
    (stablehlo.DotDimensionNumbers, _fields(stablehlo.DotDimensionNumbers, [
        "lhs_batching_dimensions", "rhs_batching_dimensions",
        "lhs_contracting_dimensions", "rhs_contracting_dimensions"])),
    (stablehlo.ConvDimensionNumbers, _fields(stablehlo.ConvDimensionNumbers, [
        "input_batch_dimension", "input_feature_dimension", "input_spatial_dimensions",
        "kernel_input_feature_dimension", "kernel_output_feature_dimension",
        "kernel_spatial_dimensions", "output_batch_dimension", "output_feature_dimension",
        "output_spatial_dimensions"])),
    (stablehlo.GatherDimensionNumbers, _fields(stablehlo.GatherDimensionNumbers, [
        "offset_dims", "collapsed_slice_dims", "operand_batching_dims",
        "start_indices_batching_dims", "start_index_map", "index_vector_dim"])),
    (stablehlo.ScatterDimensionNumbers, _fields(stablehlo.ScatterDimensionNumbers, [
        "update_window_dims", "inserted_window_dims", "input_batching_dims",
        "scatter_indices_batching_dims", "scattered_dims_to_operand_dims", "index_vector_dim"])),
]


def _is(kind: type, attr: ir.Attribute) -> bool:
    # Builtin attributes arrive downcast (Python isinstance); dialect ones offer a static isinstance.
    return kind.isinstance(attr) if hasattr(kind, "isinstance") else isinstance(attr, kind)


def to_value(attr: ir.Attribute) -> Any:
    """Convert one attribute; unknown kinds fall back to their MLIR spelling."""
    for kind, convert in _CONVERTERS:
        if _is(kind, attr):
            return convert(attr)
    return str(attr)


def op_attributes(op: ir.Operation) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in op.attributes:
        try:
            out[name] = to_value(op.attributes[name])
        except TypeError:  # an attribute the bindings cannot hand over (complex dense): read its text
            text = attribute_text(op, name)
            out[name] = dense_summary(text) if text.startswith("dense<") else text
    return out


def safe_attributes(op: ir.Operation) -> list[ir.Attribute]:
    """The attributes the Python bindings can hand over (a complex constant's value they cannot)."""
    found = []
    for name in op.attributes:
        try:
            found.append(op.attributes[name])
        except TypeError:
            continue
    return found


def attribute_text(op: ir.Operation, name: str) -> str:
    """The printed value of attribute `name` of `op`, read from the op's generic form."""
    asm = op.get_asm(print_generic_op_form=True, large_elements_limit=None)
    key = f"{name} = "
    start = asm.find(key)
    while start > 0 and asm[start - 1] not in "{ ,":
        start = asm.find(key, start + 1)
    if start < 0:
        raise KeyError(name)
    i = start + len(key)
    depth, j, quoted = 0, i, False
    while j < len(asm):
        ch = asm[j]
        if ch == '"' and asm[j - 1] != "\\":
            quoted = not quoted
        elif not quoted:
            if ch in "<([{":
                depth += 1
            elif ch in ">)]}":
                if depth == 0:
                    break
                depth -= 1
            elif ch == "," and depth == 0:
                break
        j += 1
    return asm[i:j].strip()
