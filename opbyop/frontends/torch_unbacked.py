"""Data-dependent values in an exported torch graph, made the example inputs' own.

torch.export names a value it cannot know while tracing (the count of a boolean mask's true
elements, a `.item()`, `.tolist()` split sizes) by an unbacked symbol (u0): shapes that depend on it
stay symbolic, and `.item()`, `sym_ite`, `_assert_scalar` nodes compute and check it. A Python
branch on such a value (`if not mask.any():`) stops the export altogether ("Could not guard on
data-dependent expression"); torch's real-tensor propagation traces beside the real values and
takes the branch they take.

The StableHLO the compiler reads has static shapes, and torch-mlir lowers no symbolic scalar. With
the model's real values, the graph is run once (its nodes say where each symbol is bound in their
results), every symbol takes its value, and the graph is rewritten with it: scalars as constants,
shapes static, torch's checks of the symbols dropped. What is analysed is the model on its example
inputs, as an eager run of them computes it.

A boolean mask's true elements (`nonzero`, and indexing or writing by a mask, which torch does through
them) keep a size only their values decide even once it is known: torch-mlir lowers them to
StableHLO of dynamic shape. With the count known they are written in static shapes instead
(`static_nonzero`): the mask's running count says which true element each of the k results is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
from torch.export.graph_signature import InputKind, OutputKind
from torch._subclasses.fake_tensor import DataDependentOutputException
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
from torch.fx.passes.shape_prop import _extract_tensor_metadata
from torch.utils import _pytree as pytree

from opbyop.errors import ExportError

aten = torch.ops.aten

# torch's checks of what it assumed about a symbol: nothing computed, nothing for the compiler.
_CHECKS = {aten._assert_scalar.default, aten.sym_constrain_range.default,
           aten.sym_constrain_range_for_size.default, aten._assert_async.msg}
# Errors torch.export raises on a value it cannot know while tracing.
DATA_DEPENDENT = (GuardOnDataDependentSymNode, DataDependentOutputException)


_SYMBOLIC_SCALARS = (torch.SymInt, torch.SymBool, torch.SymFloat)


def _symbolic(value: Any) -> bool:
    """A symbolic scalar, or a tensor with a symbolic size: torch-mlir lowers neither, even one whose
    expression real-tensor propagation already fixed to a number (`Eq(u1, 2)` asserted)."""
    if isinstance(value, _SYMBOLIC_SCALARS):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(size, torch.SymInt) for size in (*value.shape, *value.stride()))
    if isinstance(value, (list, tuple)):
        return any(map(_symbolic, value))
    return False


def _bound(value: Any, result: Any) -> dict[sympy.Symbol, Any]:
    """The symbols a node's value is named by, with the values its result gives them: a scalar that
    is a symbol, a tensor's size that is one (where torch kept no `unbacked_bindings` for them)."""
    pairs: list[tuple[Any, Any]] = []
    if isinstance(value, _SYMBOLIC_SCALARS):
        pairs.append((value, result))
    elif isinstance(value, torch.Tensor) and isinstance(result, torch.Tensor):
        pairs += zip(value.shape, result.shape)
    return {size.node.expr: sympy.sympify(got) for size, got in pairs
            if isinstance(size, _SYMBOLIC_SCALARS) and isinstance(size.node.expr, sympy.Symbol)}


def _flat_inputs(program: Any, user_inputs: list[torch.Tensor]) -> list[Any]:
    """The graph's placeholders' values, in order: the program's state, then the user's inputs."""
    values, users = [], iter(user_inputs)
    for spec in program.graph_signature.input_specs:
        if spec.kind is InputKind.USER_INPUT:
            values.append(next(users))
        elif spec.kind is InputKind.CONSTANT_TENSOR:
            values.append(program.constants[spec.target])
        else:
            values.append(program.state_dict.get(spec.target, program.constants.get(spec.target)))
    return values


def _is_mask(value: Any) -> bool:
    return isinstance(value, torch.fx.Node) and value.meta["val"].dtype == torch.bool


def _masked_ops(graph: torch.fx.Graph) -> list[tuple[torch.fx.Node, list[torch.fx.Node]]]:
    """nonzero, and indexing or writes by boolean masks, with their masks."""
    found = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is aten.nonzero.default:
            found.append((node, [node.args[0]]))
        elif node.target in (aten.index.Tensor, aten.index_put.default) and any(map(_is_mask, node.args[1])):
            found.append((node, [i for i in node.args[1] if _is_mask(i)]))
    return found


@dataclass
class Specialised:
    """What making a graph the example inputs' own did, and what the graph computed on them."""

    notes: list[str] = field(default_factory=list)
    # the model's outputs in the run that gave the values (a model that draws random numbers in
    # forward, VITS's noise, gets other sizes in another run: this run's are the graph's)
    outputs: list[torch.Tensor] | None = None


def _run(program: Any, user_inputs: list[torch.Tensor], masks: set[torch.fx.Node]
         ) -> tuple[dict[sympy.Symbol, Any], dict[torch.fx.Node, int], list[torch.Tensor]]:
    """The graph run once on the example inputs: each unbacked symbol's value, read where its node
    binds it (a size of its result, the scalar itself), each mask's count of true elements, and the
    model's outputs."""
    symbols: dict[sympy.Symbol, Any] = {}
    counts: dict[torch.fx.Node, int] = {}

    class Reader(torch.fx.Interpreter):
        def run_node(self, node: torch.fx.Node) -> Any:
            if node.op == "call_function" and node.target in _CHECKS:
                return None  # torch's checks of what it assumed: the values are what they are
            result = super().run_node(node)
            for symbol, value in _bound(node.meta.get("val"), result).items():
                symbols.setdefault(symbol, value)
            for symbol, path in (node.meta.get("unbacked_bindings") or {}).items():
                value = pytree.key_get(result, path)
                symbols[symbol] = sympy.sympify(value.item() if isinstance(value, torch.Tensor) else value)
            if node in masks:
                counts[node] = int(torch.count_nonzero(result))
            return result

    with torch.no_grad():
        results = Reader(program.graph_module).run(*_flat_inputs(program, user_inputs))
    specs = program.graph_signature.output_specs
    outputs = [r for r, spec in zip(results, specs) if spec.kind is OutputKind.USER_OUTPUT and isinstance(r, torch.Tensor)]
    return symbols, counts, outputs


def _concrete(value: Any, symbols: dict[sympy.Symbol, Any]) -> Any:
    """A symbolic scalar's value (an int, bool or float), or a fake tensor with static sizes."""
    if isinstance(value, _SYMBOLIC_SCALARS):
        number = sympy.sympify(sympy.sympify(value.node.expr).xreplace(symbols))
        if not (number.is_number or number in (sympy.true, sympy.false)):
            raise ValueError(f"{value} has no value on the example inputs")
        kind = {torch.SymInt: int, torch.SymBool: bool, torch.SymFloat: float}[type(value)]
        return kind(number)
    if isinstance(value, torch.Tensor) and _symbolic(value):
        def sizes(values: Any) -> list[int]:
            return [_concrete(v, symbols) for v in values]

        with value.fake_mode:
            return torch.empty_strided(sizes(value.shape), sizes(value.stride()), dtype=value.dtype, device=value.device)
    if isinstance(value, (list, tuple)):
        return type(value)(_concrete(v, symbols) for v in value)
    return value


def _with_values(graph: torch.fx.Graph, symbols: dict[sympy.Symbol, Any]) -> int:
    """Symbolic scalars replaced by their values in their users, shapes made static, torch's checks
    dropped (the scalar nodes left unused go with the dead code); how many nodes had a symbolic value."""
    made_static = 0
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target in _CHECKS:
            graph.erase_node(node)
    for node in list(graph.nodes):
        node.meta.pop("unbacked_bindings", None)
        value = node.meta.get("val")
        if not _symbolic(value):
            continue
        made_static += 1
        concrete = node.meta["val"] = _concrete(value, symbols)
        if isinstance(concrete, torch.Tensor):
            node.meta["tensor_meta"] = _extract_tensor_metadata(concrete)
        elif not isinstance(concrete, (list, tuple)):  # a scalar: its users take the number
            for user in list(node.users):
                user.args, user.kwargs = torch.fx.node.map_arg((user.args, user.kwargs),
                                                               lambda n: concrete if n is node else n)
    for node in graph.nodes:
        node.args, node.kwargs = torch.fx.node.map_aggregate((node.args, node.kwargs), lambda a: _concrete(a, symbols))
    return made_static


def static_nonzero(mask: torch.Tensor, count: int) -> torch.Tensor:
    """torch.nonzero(mask) when it has `count` true elements, in static shapes: result j is the
    position of the true element whose running count is j + 1, as coordinates of the mask."""
    flat = (mask != 0).reshape(-1)
    running = torch.cumsum(flat.to(torch.int64), 0)  # (n,): true elements up to each position
    slots = torch.arange(count, dtype=torch.int64).unsqueeze(1)  # (k, 1)
    # the (j+1)-th true element's position: how many positions have a running count <= j
    index = (running.unsqueeze(0) <= slots).to(torch.int64).sum(1)  # (k,)
    columns, stride = [], 1
    for size in reversed(mask.shape):
        columns.insert(0, torch.remainder(torch.div(index, stride, rounding_mode="floor"), size).unsqueeze(1))
        stride *= size
    return torch.cat(columns, 1) if columns else index.new_zeros(count, 0)


def _long_indices(indices: list[Any], counts: list[int]) -> list[torch.Tensor | None]:
    """Indices with each boolean mask as the long columns of its true elements (torch's own reading)."""
    out, masks = [], iter(counts)
    for index in indices:
        if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
            coordinates = static_nonzero(index, next(masks))
            out += [coordinates[:, d] for d in range(index.dim())]
        else:
            out.append(index)
    return out


# Meta the ops written in place of a mask's op keep from it: where in the model they come from.
_PROVENANCE = ("stack_trace", "nn_module_stack", "torch_fn", "source_fn_stack")


def _replace(graph: torch.fx.Graph, node: torch.fx.Node, function: Any, inputs: list[torch.fx.Node]) -> None:
    """`node` replaced by `function(*inputs)`, traced into aten ops and inlined in its place."""
    examples = [torch.empty(i.meta["val"].shape, dtype=i.meta["val"].dtype) for i in inputs]
    traced = make_fx(function, tracing_mode="fake")(*examples)
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    before = set(graph.nodes)
    with graph.inserting_before(node):
        result = graph.graph_copy(traced.graph, dict(zip(placeholders, inputs)))
    for new in graph.nodes:
        if new not in before:
            new.meta.update({k: node.meta[k] for k in _PROVENANCE if k in node.meta})
    node.replace_all_uses_with(result)
    graph.erase_node(node)


def _static_mask_op(graph: torch.fx.Graph, node: torch.fx.Node, counts: list[int]) -> None:
    if node.target is aten.nonzero.default:
        _replace(graph, node, lambda x: static_nonzero(x, counts[0]), [node.args[0]])
        return
    x, indices = node.args[0], list(node.args[1])
    given = [i for i in indices if i is not None]  # the index tensors; None keeps its place

    def placed(tensors: tuple[torch.Tensor, ...]) -> list[Any]:
        it = iter(tensors)
        return _long_indices([None if i is None else next(it) for i in indices], counts)

    if node.target is aten.index.Tensor:
        _replace(graph, node, lambda x, *i: aten.index.Tensor(x, placed(i)), [x, *given])
    else:
        values = node.args[2]
        accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
        _replace(graph, node, lambda x, v, *i: aten.index_put.default(x, placed(i), v, accumulate), [x, values, *given])


def specialise(program: Any, user_inputs: list[torch.Tensor]) -> Specialised:
    """The graph made the example inputs' own (see the module's words): what was done, as notes."""
    graph = program.graph_module.graph
    masked = _masked_ops(graph)
    unbacked = any(_symbolic(n.meta.get("val")) or n.meta.get("unbacked_bindings") or n.target in _CHECKS
                   for n in graph.nodes)
    if not masked and not unbacked:
        return Specialised()
    symbols, counts, outputs = _run(program, user_inputs, {m for _, masks in masked for m in masks})
    try:
        made_static = _with_values(graph, symbols)
    except ValueError as e:
        raise ExportError(f"a data-dependent size or value of the traced graph has no value on the example "
                          f"inputs: {e}", "make forward compute its sizes from its inputs' shapes, or pass "
                          "a .mlir file exported another way") from None
    for node, masks in masked:
        _static_mask_op(graph, node, [counts[m] for m in masks])
    graph.eliminate_dead_code()
    program.graph_module.recompile()
    notes = [f"{made_static} data-dependent size(s) or value(s) made static with the example inputs' values"]
    if masked:
        notes.append(f"{len(masked)} op(s) on boolean masks' true elements (nonzero, indexing by a mask) "
                     "written in static shapes")
    return Specialised(notes, outputs)
