"""Split a model's @main into standalone single-op modules, one record per op occurrence.

Each op becomes `func.func @main(<its operands>) -> <its results>`, holding that op and only what
must be a compile-time constant for it to compile:
- an operand that is a constant, or is formed from constants by constant-forming ops (iota,
  broadcast_in_dim, reshape, convert, transpose), keeps that chain inside the module: the compiler
  sees what it sees in the model (XLA and tt-mlir both assume e.g. a reduce's init value is a constant);
- every other producer becomes an argument, even one fed only by constants: a failure upstream (a
  while loop, a select_and_scatter) then never lands on this op. Where such an operand's value is
  fixed by the model's constants (OperandKind.COMPUTED), golden.upstream computes it for the inputs;
- values an op's regions use from outside (while / case bodies) become extra arguments;
- functions the op (or its kept chain) refers to travel with it;
- an op that cannot be extracted becomes a record with `split_error`; the others carry on.

A sharded module (Shardy's `sdy.mesh`, `#sdy.sharding`) has its shardings propagated first, as the
compiler does (ir.sharding); each op's module then carries the mesh, the number of partitions, and
that op's operand shardings (on its arguments) and result shardings (on its results), so the compiler
inserts the collectives it would for the op inside the model. Collectives already in the program
(all_reduce, all_gather ..., a shard_map's sdy.manual_computation) are ops of their own.
"""

from __future__ import annotations

import hashlib

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func
from pydantic import BaseModel

from opbyop.ir.attributes import op_attributes, safe_attributes
from opbyop.ir.context import make_context
from opbyop.ir.mesh import ModuleMesh, module_mesh
from opbyop.ir import sharding as sdy_sharding
from opbyop.ir.manual_split import MANUAL, body_op_name, mesh_axes_of, split_manual_bodies
from opbyop.ir.rewrite import (
    body_ops,
    captured_values,
    check_static_shapes,
    inline_calls,
    main_func,
    remap_operands,
    replace_arith_constants,
)
from opbyop.ir.parse import parse_module
from opbyop.ir.provenance import provenance_of
from opbyop.records import OperandDesc, OperandKind, OpRecord, TensorDesc, ValueRef

# Ops whose value is fixed at compile time although they are not constants themselves, when all
# their operands are. Random and opaque ops are excluded: their value is not the program's to fix.
_NOT_FOLDABLE = {"stablehlo.rng", "stablehlo.rng_bit_generator", "stablehlo.custom_call",
                 "stablehlo.infeed", "stablehlo.outfeed", "stablehlo.recv", "stablehlo.send"}
# Ops that only form constants (no arithmetic): with the constants they start from, they stay
# inside the module of an op they feed. Anything else is that op's argument.
CONSTANT_FORMING = frozenset({"stablehlo.constant", "stablehlo.iota", "stablehlo.broadcast_in_dim",
                              "stablehlo.broadcast", "stablehlo.reshape", "stablehlo.convert",
                              "stablehlo.transpose"})


class SplitResult(BaseModel):
    model: str
    arguments: list[TensorDesc]  # of the model's @main
    outputs: list[ValueRef]  # what the model's @main returns
    ops: list[OpRecord]
    arith_constants_rewritten: int = 0
    calls_inlined: int = 0

    @property
    def failed(self) -> list[OpRecord]:
        return [r for r in self.ops if not r.ok]


def tensor_desc(t: ir.Type) -> TensorDesc:
    if isinstance(t, ir.RankedTensorType):
        return TensorDesc(shape=tuple(t.shape), dtype=str(t.element_type))
    return TensorDesc(shape=(), dtype=str(t))  # tokens, tuples: described by their type


def canonical_text(module: ir.Module) -> str:
    """The module without locations; SSA names are renumbered by the printer."""
    return module.operation.get_asm(enable_debug_info=False)


def signature_of(canonical: str) -> str:
    return hashlib.sha256(canonical.encode()).hexdigest()


def split_module(source: str | bytes, model: str, ctx: ir.Context | None = None) -> SplitResult:
    """Parse, rewrite and split one model's module. Raises ModuleError for unusable modules."""
    ctx = ctx or make_context()
    with ctx, ir.Location.unknown(ctx):
        module = parse_module(source, ctx, model)
        rewritten = replace_arith_constants(module)
        main = main_func(module, model)
        inlined = inline_calls(module, main)
        mesh = module_mesh(module.operation.get_asm(enable_debug_info=False, large_elements_limit=16))
        if mesh is not None:
            split_manual_bodies(main, mesh_axes_of(module))  # each op of a shard_map body an op of its own
            module = sdy_sharding.propagate(module, model)
            main = main_func(module, model)
        check_static_shapes(main, model)
        splitter = _Splitter(main, model, mesh)
        records = [splitter.record(i) for i in range(len(splitter.ops))]
        terminator = [op.operation for op in main.regions[0].blocks[0].operations][-1]
        outputs = [splitter.ref(v) for v in terminator.operands]
        arguments = [tensor_desc(a.type) for a in main.regions[0].blocks[0].arguments]
    return SplitResult(model=model, arguments=arguments, outputs=outputs, ops=records,
                       arith_constants_rewritten=rewritten, calls_inlined=inlined)


class _Splitter:
    def __init__(self, main: ir.Operation, model: str, mesh: ModuleMesh | None = None):
        self.model = model
        self.mesh = mesh
        module_ops = [op.operation for op in main.parent.regions[0].blocks[0].operations]
        self.mesh_ops = [op for op in module_ops if op.name == "sdy.mesh"]
        self.arg_shardings = sdy_sharding.argument_shardings(main) if mesh is not None else []
        self.functions = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in module_ops
                          if op.name == "func.func" and "sym_name" in op.attributes}
        self.ops = body_ops(main)
        self.arg_index = {a: i for i, a in enumerate(main.regions[0].blocks[0].arguments)}
        self.producer: dict[ir.Value, tuple[int, int]] = {}
        for i, op in enumerate(self.ops):
            for j, r in enumerate(op.results):
                self.producer[r] = (i, j)
        self._descs: dict[ir.Type, TensorDesc] = {}  # MLIR types are uniqued: describe each once
        self.constant_fed: list[bool] = []  # the op's value is fixed by the model's constants
        self.kept: list[bool] = []  # ... and it only forms a constant: kept inside the modules it feeds
        for i in range(len(self.ops)):  # in program order: producers are decided first
            self.constant_fed.append(self._is_constant_fed(i))
            self.kept.append(self._is_kept(i))

    def desc(self, t: ir.Type) -> TensorDesc:
        found = self._descs.get(t)
        if found is None:
            found = self._descs[t] = tensor_desc(t)
        return found

    def ref(self, value: ir.Value) -> ValueRef:
        if value in self.arg_index:
            return ValueRef(model_argument=self.arg_index[value])
        position, result = self.producer[value]
        return ValueRef(position=position, result=result)

    def _is_constant_fed(self, i: int) -> bool:
        op = self.ops[i]
        if op.name in _NOT_FOLDABLE:
            return False
        for v in list(op.operands) + captured_values(op):
            if v in self.arg_index or v not in self.producer:
                return False
            if not self.constant_fed[self.producer[v][0]]:
                return False
        return True

    def _is_kept(self, i: int) -> bool:
        op = self.ops[i]
        if op.name not in CONSTANT_FORMING or len(op.regions) > 0:
            return False
        return all(v in self.producer and self.kept[self.producer[v][0]] for v in op.operands)

    def _constant_chain(self, values: list[ir.Value]) -> list[int]:
        """Positions of the constant-forming ops that form `values`, in program order."""
        needed: set[int] = set()
        stack = [self.producer[v][0] for v in values]
        while stack:
            p = stack.pop()
            if p in needed:
                continue
            needed.add(p)
            op = self.ops[p]
            stack.extend(self.producer[v][0] for v in list(op.operands) + captured_values(op))
        return sorted(needed)

    def record(self, i: int) -> OpRecord:
        op = self.ops[i]
        try:
            # a shard_map body's op (split_manual_bodies) is named for itself: the module holds it alone
            base = OpRecord(model=self.model, position=i, op_name=body_op_name(op) or op.name,
                            provenance=provenance_of(op), outputs=[self.desc(r.type) for r in op.results])
        except Exception as e:  # opbyop could not describe the op: that op says so, never the whole model
            return OpRecord(model=self.model, position=i, op_name=op.name,
                            split_error=f"describing the op failed: {type(e).__name__}: {e}")
        try:
            return self._extract(i, base)
        except Exception as e:  # one op that cannot be extracted never stops the others
            return base.model_copy(update={"split_error": f"{type(e).__name__}: {e}"})

    def _extract(self, i: int, base: OpRecord) -> OpRecord:
        op = self.ops[i]
        own = list(op.operands)
        captured = captured_values(op)
        arguments: list[ir.Value] = []  # distinct non-constant values, in first-use order
        constants: list[ir.Value] = []
        operands: list[OperandDesc] = []
        for index, v in enumerate(own + captured):
            producer = self.producer[v][0] if v in self.producer else None
            if producer is not None and self.constant_fed[producer] and not self.kept[producer]:
                kind = OperandKind.COMPUTED
            else:
                kind = OperandKind.CAPTURED if index >= len(own) else OperandKind.ARGUMENT
            desc = self.desc(v.type)
            if producer is not None and self.kept[producer]:
                constants.append(v)
                operands.append(OperandDesc(index=index, kind=OperandKind.CONSTANT, tensor=desc))
                continue
            if v not in arguments:
                arguments.append(v)
            operands.append(OperandDesc(index=index, kind=kind, tensor=desc,
                                        argument=arguments.index(v)))

        chain = self._constant_chain(constants)
        callees = self._callees([op] + [self.ops[p] for p in chain])
        module = ir.Module.create(op.location)
        sharded = self.mesh is not None
        if sharded:  # compiled for the model's mesh: as many partitions as it has devices
            i32 = ir.IntegerType.get_signless(32)
            module.operation.attributes["mhlo.num_partitions"] = ir.IntegerAttr.get(i32, self.mesh.devices)
            module.operation.attributes["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, 1)
        with ir.InsertionPoint(module.body), op.location:
            for mesh in self.mesh_ops:
                mesh.clone()
            for name in callees:  # functions the op refers to (custom_call's called_computations ...)
                self.functions[name].clone()
            fn = func.FuncOp("main", ([v.type for v in arguments], [r.type for r in op.results]))
            entry = fn.add_entry_block()
            mapping: dict[ir.Value, ir.Value] = dict(zip(arguments, entry.arguments))
            with ir.InsertionPoint(entry):
                for p in chain:
                    self._clone_into(self.ops[p], mapping)
                clone = self._clone_into(op, mapping)
                func.ReturnOp(list(clone.results))
            in_shardings = [self._sharding_of(v) for v in arguments] if sharded else []
            out_shardings = self._result_shardings(op) if sharded else []
            if sharded:
                sdy_sharding.set_shardings(fn.operation, in_shardings, out_shardings)
        if not module.operation.verify():
            raise ValueError("the extracted module does not verify")
        canonical = canonical_text(module)
        return base.model_copy(update={
            "signature": signature_of(canonical),
            "attributes": op_attributes(op),
            "operands": operands,
            "inputs": [self.desc(v.type) for v in arguments],
            "input_sources": [self.ref(v) for v in arguments],
            "module_text": module.operation.get_asm(enable_debug_info=True),
            "mesh": str(self.mesh) if sharded else None,
            "operand_shardings": [sdy_sharding.text_of(s) for s in in_shardings],
            "result_shardings": [sdy_sharding.text_of(s) for s in out_shardings],
        })

    def _sharding_of(self, value: ir.Value) -> ir.Attribute | None:
        """The sharding `value` has in the model after propagation (None: none, i.e. replicated)."""
        if value in self.arg_index:
            return self.arg_shardings[self.arg_index[value]]
        position, result = self.producer[value]
        return self._result_shardings(self.ops[position])[result]

    @staticmethod
    def _result_shardings(op: ir.Operation) -> list[ir.Attribute | None]:
        """Each result's sharding: a shard_map's (sdy.manual_computation) what it declares."""
        if op.name == MANUAL and "out_shardings" in op.attributes:
            from jaxlib.mlir.dialects import sdy

            return list(sdy.TensorShardingPerValueAttr(op.attributes["out_shardings"]).shardings)
        return sdy_sharding.result_shardings(op)

    def _callees(self, ops: list[ir.Operation]) -> list[str]:
        """Functions of the model that `ops` (or anything nested in them) refer to, transitively."""
        found: list[str] = []
        pending = list(ops)
        while pending:
            for name in _symbol_refs(pending.pop()):
                if name not in self.functions:
                    raise ValueError(f"{ops[0].name} refers to @{name}, which the module does not define")
                if name not in found:
                    found.append(name)
                    pending.append(self.functions[name])
        return found

    @staticmethod
    def _clone_into(op: ir.Operation, mapping: dict[ir.Value, ir.Value]) -> ir.Operation:
        clone = op.clone()
        remap_operands(clone, mapping)
        for old, new in zip(op.results, clone.results):
            mapping[old] = new
        return clone


def _symbol_refs(op: ir.Operation) -> list[str]:
    """Names of the symbols referenced by op's attributes and by the ops nested in it."""
    names: list[str] = []

    def collect(attr: ir.Attribute) -> None:
        if isinstance(attr, ir.FlatSymbolRefAttr):
            names.append(attr.value)
        elif isinstance(attr, ir.ArrayAttr):
            for item in attr:
                collect(item)

    def visit(inner: ir.Operation) -> ir.WalkResult:
        for attr in safe_attributes(inner):  # a complex constant's value is no symbol reference
            collect(attr)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return names
