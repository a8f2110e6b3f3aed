"""Shardings of a sharded module, as the compiler sees them: Shardy's propagation, then per value.

The compiler (tt-mlir, like XLA) runs Shardy's propagation over the whole module before it
partitions it: every op then carries `sdy.sharding` for its results, derived from the shardings of
the arguments (and results) the user gave. opbyop runs the same pipeline
(`sdy-propagation-pipeline`, registered in jaxlib's MLIR) on the whole model before splitting it, so
each single-op module carries exactly the operand and result shardings the op has inside the model,
and the compiler inserts the reshards and collectives it would there.
"""

from __future__ import annotations

import re

from jaxlib.mlir import ir, passmanager

from opbyop.boards import mesh_boards
from opbyop.errors import ModuleError
from opbyop.ir.context import make_context

PROPAGATION = "builtin.module(sdy-propagation-pipeline)"
SHARDING = "sdy.sharding"
# Shardy's import turns stablehlo.constant into sdy.constant (same syntax), which neither the TT
# plugin's StableHLO serialiser nor XLA's golden expects in a single-op module: turned back.
_SDY_CONSTANT = re.compile(r"\bsdy\.constant\b")


def propagate(module: ir.Module, what: str) -> ir.Module:
    """`module` with Shardy's propagation applied (in its context); a new module, parsed again."""
    try:
        passmanager.PassManager.parse(PROPAGATION).run(module.operation)
    except Exception as e:  # an inconsistent sharding the user gave: the model's fault, named
        raise ModuleError(f"Shardy could not propagate the shardings of {what}: {e}",
                          "check the shardings given on its arguments (mesh axes, partition specs)") from None
    text = _SDY_CONSTANT.sub("stablehlo.constant", module.operation.get_asm(enable_debug_info=True))
    return ir.Module.parse(text)


def mesh_ops(module: ir.Module) -> list[ir.Operation]:
    """The module's `sdy.mesh` declarations."""
    return [op.operation for op in module.body.operations if op.operation.name == "sdy.mesh"]


def result_shardings(op: ir.Operation) -> list[ir.Attribute | None]:
    """The sharding of each result of `op` (None for a result without one)."""
    if SHARDING not in op.attributes:
        return [None] * len(op.results)
    from jaxlib.mlir.dialects import sdy

    per_value = list(sdy.TensorShardingPerValueAttr(op.attributes[SHARDING]).shardings)
    if len(per_value) != len(op.results):
        return [None] * len(op.results)
    return per_value


def argument_shardings(main: ir.Operation) -> list[ir.Attribute | None]:
    """The sharding of each argument of @main (None where it has none)."""
    count = len(main.regions[0].blocks[0].arguments)
    if "arg_attrs" not in main.attributes:
        return [None] * count
    found: list[ir.Attribute | None] = []
    for attrs in ir.ArrayAttr(main.attributes["arg_attrs"]):
        d = ir.DictAttr(attrs)
        found.append(d[SHARDING] if SHARDING in d else None)
    return found + [None] * (count - len(found))


def set_shardings(fn: ir.Operation, arguments: list[ir.Attribute | None], results: list[ir.Attribute | None]) -> None:
    """Give a single-op module's @main its argument (in_) and result (out) shardings."""
    def dicts(values: list[ir.Attribute | None]) -> ir.ArrayAttr:
        return ir.ArrayAttr.get([ir.DictAttr.get({SHARDING: v} if v is not None else {}) for v in values])

    if any(v is not None for v in arguments):
        fn.attributes["arg_attrs"] = dicts(arguments)
    if any(v is not None for v in results):
        fn.attributes["res_attrs"] = dicts(results)


def text_of(sharding: ir.Attribute | None) -> str:
    return "" if sharding is None else str(sharding)


def strip_shardings(text: str, what: str) -> str:
    """`text` for one device: no mesh, no shardings, one partition (the explicit --unshard choice).
    A shard_map body (sdy.manual_computation) has per-device shapes and cannot be made global."""
    with make_context():
        module = ir.Module.parse(text)
        manual: list[str] = []

        def clean(op: ir.Operation) -> ir.WalkResult:
            if op.name == "sdy.manual_computation":
                manual.append(op.name)
            for name in (SHARDING, "sdy.sharding_rule"):
                if name in op.attributes:
                    del op.attributes[name]
            for key in ("arg_attrs", "res_attrs"):
                if key in op.attributes:
                    kept = [ir.DictAttr.get({e.name: e.attr for e in ir.DictAttr(d) if e.name != SHARDING})
                            for d in ir.ArrayAttr(op.attributes[key])]
                    op.attributes[key] = ir.ArrayAttr.get(kept)
            return ir.WalkResult.ADVANCE

        module.operation.walk(clean)
        if manual:
            raise ModuleError(f"{what} holds a shard_map body (sdy.manual_computation) with per-device shapes: "
                              "it cannot be analysed as one chip",
                              f"analyse it on a mesh target (--chip {', '.join(mesh_boards())})")
        for op in mesh_ops(module):
            op.erase()
        for name in ("mhlo.num_partitions",):
            if name in module.operation.attributes:
                del module.operation.attributes[name]
        return module.operation.get_asm(enable_debug_info=True)
