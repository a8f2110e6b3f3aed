"""MLIR attributes as structured, JSON-ready values (never a string to regex-parse later)."""

from __future__ import annotations

import hashlib
from typing import Any, Callable

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

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
    dense = ir.DenseElementsAttr(attr)
    shaped = ir.ShapedType(dense.type)
    out: dict[str, Any] = {"type": str(dense.type), "shape": list(shaped.shape)}
    if dense.is_splat:
        out["splat"] = _scalar(dense.get_splat_value())
        return out
    try:
        values = np.array(dense)
    except (TypeError, ValueError, RuntimeError):  # bf16, i1 ... have no buffer protocol
        out["sha256"] = hashlib.sha256(str(attr).encode()).hexdigest()
        return out
    if values.size <= _SMALL_ELEMENTS:
        out["values"] = values.reshape(-1).tolist()
    else:
        out["sha256"] = hashlib.sha256(values.tobytes()).hexdigest()
    return out


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
    return {name: to_value(op.attributes[name]) for name in op.attributes}
