"""A shard_map body (`sdy.manual_computation`) as its ops: each op of the body its own manual
computation, at its per-device (local) shapes, so that the split makes every op of the body (the
collectives too) a single-op module of its own instead of one module holding the whole body.

Between two of these, a value of the body lives at the global level as the concatenation of every
device's local value along dimension 0, the devices in mesh order (the sharding `[{manual axes},
{}, ...]`): any device-local value has this form, and the next op's manual computation hands each
device back exactly its own. A value the body returns keeps the body's out_sharding; the body's
arguments keep its in_shardings. Constants (and what only they form) are cloned into each op that
uses them, as the split keeps them inside a single-op module.

A body stays whole (and is analysed as one op) where this cannot be said exactly: a rank-0 value
between two ops, a value returned twice or returned as it came in, an op whose regions use values of
the body.
"""

from __future__ import annotations

import math
import re

from jaxlib.mlir import ir

from opbyop.ir.mesh import axis_sizes
from opbyop.ir.rewrite import captured_values, remap_operands
from opbyop.ir.sharding import mesh_ops

MANUAL = "sdy.manual_computation"
_CONSTANT_OPS = {"stablehlo.constant", "stablehlo.iota"}


def split_manual_bodies(main: ir.Operation, mesh_axes: dict[str, dict[str, int]]) -> int:
    """Split every top-level manual computation of `main` with more than one op; returns how many
    were split. `mesh_axes`: per sdy.mesh name, its axes and their sizes, in mesh order."""
    block = main.regions[0].blocks[0]
    split = 0
    for op in [o.operation for o in block.operations]:
        if op.name == MANUAL and _split(op, mesh_axes):
            split += 1
    return split


def mesh_axes_of(module: ir.Module) -> dict[str, dict[str, int]]:
    """Each sdy.mesh's axes and sizes, in mesh order."""
    return {ir.StringAttr(op.attributes["sym_name"]).value: axis_sizes(str(op.attributes["mesh"]))
            for op in mesh_ops(module)}


def _split(mc: ir.Operation, mesh_axes: dict[str, dict[str, int]]) -> bool:
    from jaxlib.mlir.dialects import sdy

    body = mc.regions[0].blocks[0]
    inner = [o.operation for o in body.operations]
    terminator, inner = inner[-1], inner[:-1]
    constant = _constant_formed(inner)
    work = [o for o in inner if o not in constant]
    if len(work) < 2:
        return False
    in_shardings = list(sdy.TensorShardingPerValueAttr(mc.attributes["in_shardings"]).shardings)
    out_shardings = list(sdy.TensorShardingPerValueAttr(mc.attributes["out_shardings"]).shardings)
    mesh = re.match(r"#sdy\.sharding<@(\w+)", str(in_shardings[0] if in_shardings else out_shardings[0]))
    manual = re.findall(r'"([^"]+)"', str(mc.attributes["manual_axes"]))
    if mesh is None or mesh.group(1) not in mesh_axes:
        return False
    axes = mesh_axes[mesh.group(1)]
    devices = math.prod(axes[a] for a in manual)
    returned = list(terminator.operands)
    made = {r for o in work for r in o.results}
    if len(set(returned)) != len(returned) or any(v not in made for v in returned):
        return False  # a value returned twice, or an argument or a constant returned as it is
    if any(not isinstance(r.type, ir.RankedTensorType) or ir.RankedTensorType(r.type).rank == 0
           for r in made if r not in returned):
        return False
    if any(captured_values(o) for o in inner):
        return False
    order = ", ".join(f'"{a}"' for a in axes if a in manual)

    def stacked(t: ir.Type) -> tuple[ir.Type, str]:
        ranked_t = ir.RankedTensorType(t)
        shape = [ranked_t.shape[0] * devices, *ranked_t.shape[1:]]
        dims = ", ".join(["{" + order + "}"] + ["{}"] * (ranked_t.rank - 1))
        return ir.RankedTensorType.get(shape, ranked_t.element_type), f"<@{mesh.group(1)}, [{dims}]>"

    # each value of the body: (its global value outside, its sharding text)
    outside: dict[ir.Value, tuple[ir.Value, str]] = {
        arg: (mc.operands[i], _per_value_item(in_shardings[i])) for i, arg in enumerate(body.arguments)}
    fixed = {r for c in constant for r in c.results}
    with ir.InsertionPoint(mc), mc.location:
        for op in work:
            operands = list(dict.fromkeys(v for v in op.operands if v not in fixed))
            results = []
            for r in op.results:
                if r in returned:
                    j = returned.index(r)
                    results.append((mc.results[j].type, _per_value_item(out_shardings[j])))
                else:
                    results.append(stacked(r.type))
            new = ir.Operation.create(
                MANUAL, results=[t for t, _ in results], operands=[outside[v][0] for v in operands],
                attributes={
                    "in_shardings": ir.Attribute.parse(
                        "#sdy.sharding_per_value<[" + ", ".join(outside[v][1] for v in operands) + "]>"),
                    "out_shardings": ir.Attribute.parse(
                        "#sdy.sharding_per_value<[" + ", ".join(s for _, s in results) + "]>"),
                    "manual_axes": mc.attributes["manual_axes"]},
                regions=1)
            entry = new.regions[0].blocks.append(*[v.type for v in operands])
            mapping = dict(zip(operands, entry.arguments))
            with ir.InsertionPoint(entry):
                for c in _constants_used(op, constant):
                    _clone(c, mapping)
                clone = _clone(op, mapping)
                ir.Operation.create("sdy.return", operands=list(clone.results))
            for r, g, (_, s) in zip(op.results, new.results, results):
                outside[r] = (g, s)
    for j, v in enumerate(returned):
        mc.results[j].replace_all_uses_with(outside[v][0])
    mc.erase()
    return True


def body_op_name(op: ir.Operation) -> str | None:
    """The one op (constants aside) a manual computation holds, by name; None for any other op."""
    if op.name != MANUAL:
        return None
    inner = [o.operation for o in op.regions[0].blocks[0].operations][:-1]
    constant = _constant_formed(inner)
    work = [o for o in inner if o not in constant]
    return work[0].name if len(work) == 1 else None


def _per_value_item(sharding: ir.Attribute) -> str:
    """`#sdy.sharding<@mesh, [...]>` as an item of a sharding_per_value: `<@mesh, [...]>`."""
    return str(sharding).removeprefix("#sdy.sharding")


def _constant_formed(ops: list[ir.Operation]) -> list[ir.Operation]:
    """The body's constants and the ops (without regions) formed from them alone, in body order."""
    formed: list[ir.Operation] = []
    values: set = set()
    for op in ops:
        if op.name in _CONSTANT_OPS or (len(op.regions) == 0 and len(op.operands) > 0
                                         and all(v in values for v in op.operands)):
            formed.append(op)
            values.update(op.results)
    return formed


def _constants_used(op: ir.Operation, constant: list[ir.Operation]) -> list[ir.Operation]:
    """The constant-formed ops `op` needs, in body order."""
    producers = {r: c for c in constant for r in c.results}
    needed: set = set()
    stack = [producers[v] for v in op.operands if v in producers]
    while stack:
        c = stack.pop()
        if id(c) in needed:
            continue
        needed.add(id(c))
        stack.extend(producers[v] for v in c.operands if v in producers)
    return [c for c in constant if id(c) in needed]


def _clone(op: ir.Operation, mapping: dict) -> ir.Operation:
    clone = op.clone()
    remap_operands(clone, mapping)
    for old, new in zip(op.results, clone.results):
        mapping[old] = new
    return clone
