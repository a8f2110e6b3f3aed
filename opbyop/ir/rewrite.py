"""Rewrite a module into the one shape the splitter, the compiler and XLA all accept.

- arith.constant -> stablehlo.constant: torch-mlir emits a few; the TT plugin refuses mixed dialects
  and the StableHLO interpreter aborts on them (a few per model, e.g. f64 scalars).
- func.call into private functions is inlined, so that no op hides behind a call.
- @main must exist and every shape must be static.
- test-harness checks (check.*) are replaced by the values they check, for the whole-model view.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func, stablehlo

from opbyop.errors import ModuleError
from opbyop.ir.context import make_context
from opbyop.ir.harness import HARNESS_PREFIXES
from opbyop.ir.parse import parse_module


def main_func(module: ir.Module, name: str = "<module>") -> ir.Operation:
    funcs = {
        ir.StringAttr(op.attributes["sym_name"]).value: op.operation
        for op in module.body.operations
        if op.operation.name == "func.func"
    }
    if "main" not in funcs:
        found = ", ".join(f"@{f}" for f in funcs) or "no functions at all"
        raise ModuleError(
            f"{name} has no func.func @main (it has {found})",
            "rename the entry function to @main (torch-mlir: func_name='main'; JAX lowering names it main)",
        )
    return funcs["main"]


def body_ops(func_op: ir.Operation) -> list[ir.Operation]:
    """The ops of a function's single block, terminator excluded."""
    ops = [op.operation for op in func_op.regions[0].blocks[0].operations]
    return ops[:-1]


def replace_arith_constants(module: ir.Module) -> int:
    """Rewrite every tensor-typed arith.constant as stablehlo.constant; returns how many."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "arith.constant" and isinstance(op.results[0].type, ir.ShapedType):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in found:
        with ir.InsertionPoint(op), op.location:
            new = stablehlo.ConstantOp(op.attributes["value"])
        op.results[0].replace_all_uses_with(new.result)
        op.erase()
    return len(found)


def inline_calls(module: ir.Module, main: ir.Operation) -> int:
    """Inline every func.call in @main (recursively); returns how many calls were inlined."""
    funcs = {
        ir.StringAttr(op.attributes["sym_name"]).value: op.operation
        for op in module.body.operations
        if op.operation.name == "func.func"
    }
    inlined = 0
    while True:
        call = next((op for op in body_ops(main) if op.name == "func.call"), None)
        if call is None:
            return inlined
        callee_name = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
        callee = funcs.get(callee_name)
        if callee is None:
            raise ModuleError(f"@main calls @{callee_name}, which the module does not define",
                              "export the module with its callees")
        _inline_one(call, callee)
        inlined += 1


def _inline_one(call: ir.Operation, callee: ir.Operation) -> None:
    block = callee.regions[0].blocks[0]
    mapping: dict[ir.Value, ir.Value] = {arg: call.operands[i] for i, arg in enumerate(block.arguments)}
    ops = [op.operation for op in block.operations]
    with ir.InsertionPoint(call):
        for op in ops[:-1]:
            clone = op.clone()
            remap_operands(clone, mapping)
            for old, new in zip(op.results, clone.results):
                mapping[old] = new
    returned = [mapping.get(v, v) for v in ops[-1].operands]
    for result, value in zip(call.results, returned):
        result.replace_all_uses_with(value)
    call.erase()


def remap_operands(op: ir.Operation, mapping: dict[ir.Value, ir.Value]) -> None:
    """Point op's operands, and those of every op nested in its regions, through `mapping`."""

    def visit(inner: ir.Operation) -> ir.WalkResult:
        for i, value in enumerate(inner.operands):
            if value in mapping:
                inner.operands[i] = mapping[value]
        return ir.WalkResult.ADVANCE

    op.walk(visit)


def captured_values(op: ir.Operation) -> list[ir.Value]:
    """Values used inside op's regions but defined outside op, in first-use order."""
    if len(op.regions) == 0:
        return []
    inner_values: set = set()

    def collect(o: ir.Operation) -> ir.WalkResult:
        for region in o.regions:
            for block in region.blocks:
                inner_values.update(block.arguments)
                for nested in block.operations:
                    inner_values.update(nested.results)
        return ir.WalkResult.ADVANCE

    op.walk(collect)
    found: list[ir.Value] = []

    def uses(o: ir.Operation) -> ir.WalkResult:
        for v in o.operands:
            if v not in inner_values and v not in found:
                found.append(v)
        return ir.WalkResult.ADVANCE

    for region in op.regions:
        for block in region.blocks:
            for nested in block.operations:
                nested.operation.walk(uses)
    return found


def check_static_shapes(main: ir.Operation, name: str = "<module>") -> None:
    values = list(main.regions[0].blocks[0].arguments)
    for op in body_ops(main):
        values.extend(op.results)
    for v in values:
        if isinstance(v.type, ir.ShapedType) and not v.type.has_static_shape:
            raise ModuleError(
                f"{name} has a dynamic shape ({v.type}); opbyop analyses static-shape programs only",
                "export with concrete example inputs (torch.export without dynamic_shapes, "
                "jax.jit(f).lower(concrete ShapeDtypeStructs))",
            )


def strip_harness_checks(main: ir.Operation) -> int:
    """Replace test-harness checks (`custom_call @check.*(%actual, %expected)`) by what they check:
    @main returns %actual where it returned the check's verdict; returns how many were removed."""
    checks = [op for op in body_ops(main) if op.name == "stablehlo.custom_call"
              and ir.StringAttr(op.attributes["call_target_name"]).value.startswith(HARNESS_PREFIXES)]
    if not checks:
        return 0
    checked = {r: (op.operands[0] if len(op.operands) else None) for op in checks for r in op.results}
    terminator = [op.operation for op in main.regions[0].blocks[0].operations][-1]
    returned = [checked.get(v, v) for v in terminator.operands]
    returned = [v for v in returned if v is not None]
    with ir.InsertionPoint(terminator), terminator.location:
        func.ReturnOp(returned)
    terminator.erase()
    inputs = [a.type for a in main.regions[0].blocks[0].arguments]
    main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, [v.type for v in returned]))
    if "res_attrs" in main.attributes:
        del main.attributes["res_attrs"]
    for op in checks:
        op.erase()
    _erase_dead(main)
    return len(checks)


def _erase_dead(main: ir.Operation) -> None:
    """Erase ops whose results nobody uses (the checks' expected values), side-effect free ones only."""
    changed = True
    while changed:
        changed = False
        for op in reversed(body_ops(main)):
            if op.name in _SIDE_EFFECTS or len(op.results) == 0:
                continue
            if all(_unused(r) for r in op.results):
                op.erase()
                changed = True


_SIDE_EFFECTS = {"stablehlo.custom_call", "stablehlo.outfeed", "stablehlo.send", "stablehlo.recv",
                 "stablehlo.infeed", "stablehlo.rng", "stablehlo.rng_bit_generator", "func.call"}


def _unused(value: ir.Value) -> bool:
    return next(iter(value.uses), None) is None


def rewritten_text(source: str | bytes, name: str = "<module>") -> str:
    """The whole module as the compiler should see it: constants rewritten, calls inlined, test-harness
    checks replaced by the values they check."""
    ctx = make_context()
    with ctx, ir.Location.unknown(ctx):
        module = parse_module(source, ctx, name)
        replace_arith_constants(module)
        main = main_func(module, name)
        inline_calls(module, main)
        check_static_shapes(main, name)
        strip_harness_checks(main)
        return module.operation.get_asm(enable_debug_info=True)
