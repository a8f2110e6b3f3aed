"""StableHLO ops XLA:CPU cannot run, rewritten as ops it can that compute the same values.

- `stablehlo.collective_broadcast` (XLA:CPU: "HLO opcode `collective-broadcast` is not supported"):
  every device of a replica group receives the operand of the group's first device. The same is an
  all_gather of the operand (with a leading dimension of 1) over the same groups, sliced at index 0
  (the group's first device), reshaped back.
- `stablehlo.compare` of booleans (i1) typed SIGNED (what a frontend writes for a model's own compare
  of bool tensors; XLA's HLO verifier: "Invalid comparison type SIGNED for PRED"): booleans have one
  order, false < true, which StableHLO spells UNSIGNED; the same compare typed UNSIGNED.
"""

from __future__ import annotations

import re

from jaxlib.mlir import ir

from opbyop.ir.context import make_context

BROADCAST = "stablehlo.collective_broadcast"
COMPARE = "stablehlo.compare"
_SIGNED = "#stablehlo<comparison_type SIGNED>"
_UNSIGNED = "#stablehlo<comparison_type UNSIGNED>"
# A line that may hold a SIGNED compare of booleans, in the pretty or the generic form (not UNSIGNED)
_SIGNED_BOOLEANS = re.compile(r"stablehlo\.compare[^\n]*(?<!UN)SIGNED[^\n]*i1>")


def for_xla_cpu(module_text: str) -> str:
    """`module_text` with the ops XLA:CPU lacks rewritten; unchanged when it has none."""
    if BROADCAST not in module_text and not _SIGNED_BOOLEANS.search(module_text):
        return module_text  # the common case, without parsing: nothing to rewrite

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(module_text)
        broadcasts: list[ir.Operation] = []
        compares: list[ir.Operation] = []

        def collect(op: ir.Operation) -> ir.WalkResult:
            if op.name == BROADCAST:
                broadcasts.append(op)
            elif op.name == COMPARE and _signed_booleans(op):
                compares.append(op)
            return ir.WalkResult.ADVANCE

        module.operation.walk(collect)
        if not broadcasts and not compares:
            return module_text
        for op in broadcasts:
            _as_all_gather(op)
        for op in compares:
            op.attributes["compare_type"] = ir.Attribute.parse(_UNSIGNED)
        return module.operation.get_asm(enable_debug_info=True)


def _signed_booleans(op: ir.Operation) -> bool:
    """A compare of i1 operands typed SIGNED."""
    kind = op.attributes["compare_type"] if "compare_type" in op.attributes else None
    if kind is None or str(kind) != _SIGNED:
        return False
    return str(ir.RankedTensorType(op.operands[0].type).element_type) == "i1"


def _as_all_gather(op: ir.Operation) -> None:
    t = ir.RankedTensorType(op.results[0].type)
    groups = ir.DenseElementsAttr(op.attributes["replica_groups"])
    size = ir.RankedTensorType(groups.type).shape[-1]
    one = ir.RankedTensorType.get([1, *t.shape], t.element_type)
    many = ir.RankedTensorType.get([size, *t.shape], t.element_type)
    i64 = ir.IntegerType.get_signless(64)
    with ir.InsertionPoint(op), op.location:
        lifted = ir.Operation.create("stablehlo.reshape", results=[one], operands=[op.operands[0]])
        attributes = {"all_gather_dim": ir.IntegerAttr.get(i64, 0), "replica_groups": op.attributes["replica_groups"],
                      "use_global_device_ids": ir.UnitAttr.get()}
        if "channel_handle" in op.attributes:
            attributes["channel_handle"] = op.attributes["channel_handle"]
        gathered = ir.Operation.create("stablehlo.all_gather", results=[many], operands=[lifted.result],
                                       attributes=attributes)
        first = ir.Operation.create("stablehlo.slice", results=[one], operands=[gathered.result], attributes={
            "start_indices": ir.DenseI64ArrayAttr.get([0] * (t.rank + 1)),
            "limit_indices": ir.DenseI64ArrayAttr.get([1, *t.shape]),
            "strides": ir.DenseI64ArrayAttr.get([1] * (t.rank + 1))})
        back = ir.Operation.create("stablehlo.reshape", results=[t], operands=[first.result])
    op.results[0].replace_all_uses_with(back.result)
    op.erase()
