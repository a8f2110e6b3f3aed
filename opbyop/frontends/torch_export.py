"""torch.nn.Module -> StableHLO through torch-mlir, with the traps of torch-mlir 20261001 handled:

- Weights and buffers become @main ARGUMENTS (a functional_call wrapper), as the real TT front ends
  pass them; only small constants stay inline, and those inline as DenseElementsAttr (XLA refuses
  dense_resource blobs).
- Non-persistent buffers are made persistent first (torch-mlir misses them otherwise).
- A model whose weights are on the meta device is traced on meta tensors (torch.export fakes them
  anyway): no eager forward, no weight ever allocated (frontends.torch_meta).
- A framework op torch-mlir cannot lower is cut out of the graph and recorded, not the model lost
  (frontends.torch_partition).
- An uninitialised tensor torch-mlir leaves as `tensor.empty` (no StableHLO op) becomes a
  stablehlo.constant of zeros, and the graph's notes say so.
- A graph whose sizes or branches depend on values is made the example inputs' own with real
  weights (frontends.torch_unbacked), and the graph's notes say so.
- Every op's location is a named location `fw=torch.conv2d;module=layer1.0.conv1;aten=...` around
  torch-mlir's file:line call-site chain: the framework op and module path are in the FX graph but
  not in torch-mlir's locations.
"""

from __future__ import annotations

import io
import logging
import multiprocessing
import os
import tempfile
import threading
import time
import warnings
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import ml_dtypes
import numpy as np
import torch
from torch import nn
from torch.export.graph_signature import InputKind

from opbyop.config import ExportBudget
from opbyop.errors import ExportError
from opbyop.frontends.isolation import (BudgetExceeded, ChildDied, descendants, gigabytes, processes_memory,
                                        run_in_child, write_result)
from opbyop.frontends.torch_bisect import Attempt, Unit, bisect, subgraph, units
from opbyop.graph import Argument, ArgumentKind, FrontendFailure, ModelGraph
from opbyop.frontends.torch_decompositions import decompositions, fold_complex_views
from opbyop.frontends.torch_meta import fix_meta_graph, is_meta, to_meta
from opbyop.frontends.torch_partition import cut, failing_nodes, mlir_name, nodes_at, unlowered_ops
from opbyop.frontends.torch_unbacked import DATA_DEPENDENT, Specialised, specialise
from opbyop.ir.provenance import encode_name
from opbyop.records import TensorDesc

# torch.export keeps process-wide state (two exports at once fail: 'ProxyTorchDispatchMode slot
# already occupied', 'Trying to pop empty mode stack'),
# and the export's stderr is redirected for the process: one export at a time in a process, whichever
# thread asks (a standing service's next run must not overlap a stopped run's export).
_ONE_EXPORT = threading.Lock()

_TORCH_TO_MLIR_DTYPE = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
    torch.uint8: "ui8", torch.bool: "i1", torch.complex64: "complex<f32>", torch.complex128: "complex<f64>",
}


class _Functional(nn.Module):
    """forward(*inputs, *weights) = model(*inputs) with the given weights: weights become arguments."""

    def __init__(self, model: nn.Module, names: list[str], n_inputs: int):
        super().__init__()
        self.model = model
        self.names = names
        self.n_inputs = n_inputs

    def forward(self, *args: torch.Tensor) -> Any:
        inputs, weights = args[: self.n_inputs], args[self.n_inputs :]
        return torch.func.functional_call(self.model, dict(zip(self.names, weights)), inputs)


def _framework_op(node: Any) -> str | None:
    """The torch function that made the node (torch.conv2d); the aten op itself where what torch.export
    recorded is no torch function: an aten op it called directly (the _assert_tensor_metadata it
    adds for `.to`) or a higher-order op wrapping a region (no_grad's wrap_with_set_grad_enabled)."""
    torch_fn = node.meta.get("torch_fn")  # ('conv2d_1', 'builtin_function_or_method.conv2d')
    if not torch_fn:
        return None
    owner, _, function = torch_fn[1].partition(".")
    if owner.startswith("OpOverload") or hasattr(torch.ops.higher_order, function):
        return str(node.meta.get("original_aten") or node.target)
    return "torch." + torch_fn[1].rsplit(".", 1)[-1]


def _module_path(node: Any) -> str | None:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return None
    path = list(stack.values())[-1][0]  # ('model.layer1.0.conv1', <class>)
    # Strip the functional wrapper's own attribute name.
    for prefix in ("model.", "L['self'].model."):
        if path.startswith(prefix):
            return path[len(prefix) :]
    return None if path == "model" else path


def _importer(context: Any) -> Any:
    """An FxImporter whose locations carry the framework op, module path and aten op."""
    from torch_mlir import ir
    from torch_mlir.extras import fx_importer as fxi

    class ContextCache(fxi.ContextCache):
        def get_node_location(self, node: Any) -> Any:
            loc = super().get_node_location(node) or ir.Location.unknown(context=self._c)
            if node.op != "call_function":
                return loc
            aten = node.meta.get("original_aten") or node.target
            name = encode_name(_framework_op(node), _module_path(node), str(aten))
            return ir.Location.name(name, childLoc=loc, context=self._c)

    class Hooks(fxi.FxImporterHooks):
        def resolve_literal(self, gni: Any, literal: Any, info: Any) -> Any:
            # Inline tensor literals as DenseElementsAttr instead of dense_resource blobs.
            if not isinstance(literal, torch.Tensor):
                return None
            if literal.is_meta:  # a constant made in forward on the weights' device: only an empty one has no values to lose
                if literal.numel():
                    raise ExportError(f"the model creates a {tuple(literal.shape)} constant on the meta device in forward",
                                      "create it on the CPU (its values are the model's), or build the model with real weights")
                literal = torch.empty(literal.shape, dtype=literal.dtype)
            literal = literal.detach().cpu().contiguous()
            # numpy has no bfloat16: its bits, typed by the attribute's own element type
            array = literal.view(torch.int16).numpy() if literal.dtype == torch.bfloat16 else literal.numpy()
            attr = ir.DenseElementsAttr.get(array, type=fxi.create_mlir_tensor_type(literal))
            op = ir.Operation.create("torch.vtensor.literal",
                                     results=[gni._cc.tensor_to_vtensor_type(literal)],
                                     attributes={"value": attr})
            return op.result

    importer = fxi.FxImporter(context=context, hooks=Hooks())
    # torch-mlir builds locations in its ContextCache; there is no public hook for them.
    importer._cc = ContextCache(importer._c, py_attr_tracker=importer._py_attr_tracker)
    return importer


def _tensor_desc(t: torch.Tensor) -> TensorDesc:
    if t.dtype not in _TORCH_TO_MLIR_DTYPE:
        raise ExportError(f"tensor dtype {t.dtype} is not supported", "cast the model's inputs or weights")
    if not all(isinstance(size, int) for size in t.shape):
        raise ExportError(f"a tensor of shape {tuple(t.shape)} has a size only its values decide (a data-dependent size)",
                          "build the model with real weights (a smaller configuration): its example inputs then give "
                          "every size a value")
    return TensorDesc(shape=tuple(t.shape), dtype=_TORCH_TO_MLIR_DTYPE[t.dtype])


# Element types numpy knows only through ml_dtypes, by name, with the torch dtype of the same bits.
_ML_DTYPES = {"bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
              "float8_e4m3fnuz": torch.float8_e4m3fnuz, "float8_e5m2fnuz": torch.float8_e5m2fnuz}
_TORCH_TO_ML = {t: n for n, t in _ML_DTYPES.items()}


def from_numpy(array: np.ndarray) -> torch.Tensor:
    """A tensor of the array's values (bfloat16 and fp8 arrays, which torch.from_numpy refuses, included)."""
    array = np.ascontiguousarray(array)
    if array.dtype.name in _ML_DTYPES:
        carrier = np.int16 if array.dtype.itemsize == 2 else np.uint8
        return torch.from_numpy(array.view(carrier)).view(_ML_DTYPES[array.dtype.name])
    return torch.from_numpy(array)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's values as numpy holds them, for every torch dtype (bf16 and fp8 as ml_dtypes', bit
    for bit; complex and bool as numpy's own)."""
    t = tensor.detach().cpu().contiguous()
    if t.dtype in _TORCH_TO_ML:
        carrier = torch.int16 if t.element_size() == 2 else torch.uint8
        return t.view(carrier).numpy().view(getattr(ml_dtypes, _TORCH_TO_ML[t.dtype]))
    return t.numpy()


@contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    """torch.export logs warnings and prints whole partial graphs to stderr when it fails; the
    error it raises (shown to the user) says it all."""
    logger = logging.getLogger("torch")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with redirect_stderr(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)


def _first_lines(e: BaseException, lines: int = 3, width: int = 600) -> str:
    """The start of an exception's message: torch's carry whole graphs after their first lines."""
    text = " ".join([line.strip() for line in str(e).strip().splitlines() if line.strip()][:lines])
    return text if len(text) <= width else text[: width - 1] + "…"


def _short_location(loc: Any) -> str:
    """`file.py:27` (and the framework op) from a torch-mlir location, else the location as printed."""
    import re

    text = str(loc)
    fw = re.search(r"fw=([\w.]+)", text)
    where = re.search(r'callsite\("([^"]+)":(\d+)', text)
    if where is None:
        return text
    return f"{where[1]}:{where[2]}" + (f" ({fw[1]})" if fw else "")


def _flatten_outputs(out: Any) -> list[torch.Tensor]:
    leaves = torch.utils._pytree.tree_leaves(out)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def export_torch(model: nn.Module, inputs: Sequence[torch.Tensor], name: str,
                 input_names: Sequence[str] | None = None, budget: ExportBudget | None = None) -> ModelGraph:
    """Export `model(*inputs)` to StableHLO text with weights as @main arguments.

    A model whose weights are on the meta device exports with them known by shape and dtype only:
    nothing runs eagerly (no framework reference), the export traces meta tensors, and the inputs
    keep their real values beside the graph. Framework ops torch-mlir cannot lower are cut out of the
    graph (frontends.torch_partition) and listed in `frontend_failures`. With `budget`, each
    torch-mlir lowering runs in a forked child watched against it, and a failure whose words name no
    op (or a lowering past the budget) is bisected to its ops (frontends.torch_bisect)."""
    start = time.perf_counter()
    model = model.eval()
    for sub in model.modules():  # trap 4: non-persistent buffers are missed by the exporter
        sub._non_persistent_buffers_set.clear()
    named = list(model.named_parameters()) + list(model.named_buffers())
    buffers = {n for n, _ in model.named_buffers()}
    names = [n for n, _ in named]
    weights = [w.detach() for _, w in named]
    inputs = list(inputs)
    meta = is_meta(weights + inputs)
    reference = None if meta else _eager_reference(model, inputs, name)
    traced = [to_meta(t) for t in inputs + weights] if meta else inputs + weights
    with _ONE_EXPORT, warnings.catch_warnings(), _quiet_torch_logs():
        warnings.simplefilter("ignore")
        program, specialised = _traced_program(_Functional(model, names, len(inputs)), traced, name, real=not meta)
        if specialised.outputs is not None:  # the run that fixed the graph's sizes is its reference
            reference = specialised.outputs
        if meta:
            fix_meta_graph(program)
        lowered = _lowered(program, name, budget)
    text, failures, unlowered = lowered.text, lowered.failures, lowered.unlowered
    input_names = list(input_names or [f"input{i}" for i in range(len(inputs))])
    arguments = [Argument(n, ArgumentKind.INPUT, _tensor_desc(t)) for n, t in zip(input_names, inputs)]
    arguments += [Argument(n, ArgumentKind.PARAMETER, _tensor_desc(w), buffer=n in buffers)
                  for n, w in zip(names, weights)]
    arguments += [Argument(f"unlowered{i}", ArgumentKind.UNLOWERED, d) for i, d in enumerate(unlowered)]
    # the weights' own memory, not a copy: a model of 1 B parameters (4 GB in f32) held 8.3 GB in its
    # export's process with one
    values: list[np.ndarray | None] = [None if t.is_meta else to_numpy(t) for t in inputs + weights]
    values += [None] * len(unlowered)
    return ModelGraph(
        name=name, frontend="torch", module_text=text, arguments=arguments, argument_values=values,
        # the module's outputs are the model's only when no op was cut out
        reference_outputs=[to_numpy(t) for t in reference] if reference is not None and not failures else None,
        export_seconds=time.perf_counter() - start, frontend_failures=failures,
        notes=specialised.notes + lowered.notes + ([f"{len(failures)} framework op(s) torch-mlir could not lower were cut out: "
                              + ", ".join(sorted({f.framework_op for f in failures}))] if failures else []),
    )


def _eager_reference(model: nn.Module, inputs: list[torch.Tensor], name: str) -> list[torch.Tensor]:
    """The framework's own outputs on the example inputs (a model with real weights only)."""
    with torch.no_grad():
        try:
            return _flatten_outputs(model(*inputs))
        except Exception as e:  # the inputs given do not fit the model (shape, dtype, count)
            given = ", ".join(f"{'x'.join(map(str, t.shape)) or 'scalar'}x{_TORCH_TO_MLIR_DTYPE.get(t.dtype, t.dtype)}"
                              for t in inputs)
            raise ExportError(f"{name} cannot run on the example inputs ({given}): {_first_lines(e)}",
                              "give the shapes and dtypes its forward takes (--input 1x3x224x224xf32, "
                              "one --input per argument)") from None


def _traced_program(wrapper: nn.Module, args: list[torch.Tensor], name: str, real: bool) -> tuple[Any, Specialised]:
    """torch.export's program of `wrapper(*args)`, decomposed as torch-mlir expects (and with
    opbyop's decompositions of ops torch-mlir cannot lower), and what was done to trace it. With
    real values (`real`), a value torch could not know while tracing takes the example inputs'
    (frontends.torch_unbacked): a branch on it is traced with torch's real-tensor propagation, and a
    size or scalar that depends on it is made static."""
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    traced_with: list[str] = []
    try:
        try:
            program = torch.export.export(wrapper, tuple(args), strict=False)
        except DATA_DEPENDENT as e:
            if not real:
                raise ExportError(
                    f"torch.export could not trace {name}: {type(e).__name__}: {_first_lines(e)}",
                    "the model branches on a value its weights compute, and weights on the meta device have none: "
                    "build it with real weights (a smaller configuration), or make forward traceable "
                    "(torch.cond for the branch)") from None
            with torch._functorch.config.patch(fake_tensor_propagate_real_tensors=True):
                program = torch.export.export(wrapper, tuple(args), strict=False)
            traced_with.append(f"traced with torch's real-tensor propagation: a branch on a tensor's value "
                         f"({_first_lines(e, lines=1, width=160)}) takes the example inputs' way")
        program = program.run_decompositions({**get_decomposition_table(), **decompositions()})
    except ExportError:
        raise
    except Exception as e:
        raise ExportError(f"torch.export could not trace {name}: {type(e).__name__}: {_first_lines(e)}",
                          "make forward traceable by torch.export.export(model, inputs): no Python branches "
                          "on tensor values (torch.cond), no data-dependent shapes, inputs of the shapes and "
                          "dtypes forward takes; or pass a .mlir file") from None
    _complete_state(program, wrapper)
    specialised = specialise(program, args) if real else Specialised()
    specialised.notes[:0] = traced_with
    if fold_complex_views(program.graph_module.graph):
        program.graph_module.recompile()
    return program, specialised


def _complete_state(program: Any, wrapper: nn.Module) -> None:
    """A parameter or buffer the program reads that its state dict lacks, from the module: a buffer
    forward reassigns (`self.pos = self.pos.to(...)`) leaves the program's state without it, and
    torch-mlir refuses the program ('Could not find state mapping for buffer') even where the
    graph reads it from the wrapper's argument instead."""
    placeholders = {n.name: n for n in program.graph_module.graph.nodes if n.op == "placeholder"}
    for spec in program.graph_signature.input_specs:
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER) or spec.target in program.state_dict:
            continue
        owner, _, attribute = spec.target.rpartition(".")
        try:
            value = getattr(wrapper.get_submodule(owner), attribute, None)
        except AttributeError:  # forward replaced the submodule too
            value = None
        if not isinstance(value, torch.Tensor):  # nothing to read: only an unused placeholder can do without
            value = placeholders[spec.arg.name].meta["val"]
        program.state_dict[spec.target] = value


MAX_CUTS = 8  # rounds of cutting unlowerable ops out before giving the model up
# A lowering attempt (a child of the export's child) is stopped at this share of the export's memory
# budget, so that the export's child sees it first and can bisect, before its own parent stops it
# (both look every 0.1 s; a lowering that blows up grows up to ~1 GB/s on a busy machine).
LOWERING_SHARE = 0.8
# While bisecting, a part of the graph lowered alone may grow this much past what the export's
# child holds, for this long: the blow-ups found so far grow without end whatever the op's size, and
# a part is blamed only when it fails alone as one op, so a healthy part that needs more is never
# blamed, only split further.
BISECT_HEADROOM_BYTES = 2 * 10**9
BISECT_TIMEOUT_S = 120.0
# What a lowering's child needs beyond what the export holds, at the least (measured: ~0.2 GB for a
# graph of two ops). With less room every attempt fails on the budget, and bisecting would blame
# whichever op it tried first: the export is given up with the budget's words instead.
LOWERING_ROOM_BYTES = 5 * 10**8


@dataclass
class _Lowering:
    """One torch-mlir lowering attempt: its StableHLO text, or its diagnostics and words."""

    text: str | None
    diagnostics: list[str] = field(default_factory=list)  # `file:line (fw op): message`
    located: list[tuple[str, str]] = field(default_factory=list)  # (the whole location, the message)
    error: str = ""  # the start of the exception, or why the attempt was stopped
    empties_as_zeros: int = 0  # tensor.empty ops given StableHLO's meaning (_empties_as_zeros)

    @property
    def message(self) -> str:
        return "; ".join(self.diagnostics[:5]) or self.error


def _lower(program_or_graph: Any) -> _Lowering:
    """StableHLO of an ExportedProgram (weights as arguments) or of a bare GraphModule (a part of one,
    when bisecting), in this process; torch-mlir's diagnostics kept, not printed."""
    from torch_mlir import fx, ir
    from torch_mlir.dialects import torch as torch_d

    context = ir.Context()
    torch_d.register_dialect(context)
    out = _Lowering(None)

    def collect(d: Any) -> bool:
        out.diagnostics.append(f"{_short_location(d.location)}: {d.message}")  # torch-mlir's words, else only on stderr
        out.located.append((str(d.location), str(d.message)))
        return True

    context.attach_diagnostic_handler(collect)
    try:
        if isinstance(program_or_graph, torch.fx.GraphModule):
            module = fx.stateless_fx_import(program_or_graph, output_type="stablehlo", fx_importer=_importer(context),
                                            model_name="main")
        else:
            module = fx.export_and_import(program_or_graph, output_type="stablehlo", fx_importer=_importer(context),
                                          func_name="main", decomposition_table={})
        with ir.Location.unknown(context):  # the attributes made there ask for one, whatever the op's own
            out.empties_as_zeros = _empties_as_zeros(module, ir)
        out.text = module.operation.get_asm(enable_debug_info=True)
    except Exception as e:
        out.error = _first_lines(e)
    return out


def _empties_as_zeros(module: Any, ir: Any) -> int:
    """Every `tensor.empty` of a static shape rewritten as a stablehlo.constant of zeros of its type;
    how many. torch-mlir lowers some uninitialised tensors (`torch.empty_like`: transformers' experts
    make their inverse permutation with it, then write every element) to tensor.empty, which is no
    StableHLO op: left in, its own op module fails in the compiler's front end, a failure of no op of
    the model's. Any value is a valid value of an uninitialised tensor; zeros are one."""
    found: list[Any] = []

    def visit(op: Any) -> Any:
        result = op.results[0].type if op.name == "tensor.empty" and len(op.results) == 1 else None
        if isinstance(result, ir.RankedTensorType) and result.has_static_shape and not op.operands:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    rewritten = 0
    for op in found:
        zero = _zero_attribute(op.results[0].type.element_type, ir)
        if zero is None:  # a complex or other element type: left as torch-mlir wrote it
            continue
        value = ir.DenseElementsAttr.get_splat(op.results[0].type, zero)
        constant = ir.Operation.create("stablehlo.constant", results=[op.results[0].type], attributes={"value": value},
                                       loc=op.location, ip=ir.InsertionPoint(op))
        op.results[0].replace_all_uses_with(constant.results[0])
        op.erase()
        rewritten += 1
    return rewritten


def _zero_attribute(element: Any, ir: Any) -> Any:
    if isinstance(element, ir.IntegerType):
        return ir.IntegerAttr.get(element, 0)
    if isinstance(element, ir.FloatType):
        return ir.FloatAttr.get(element, 0.0)
    return None


def _lowering_child(program_or_graph: Any, folder: Path) -> None:
    # Forked from the export, whose OpenMP team (torch's intra-op threads, woken by the model's eager
    # run on real values) did not come along: GNU OpenMP's next parallel region would wait for them
    # for ever (a futex in gomp_team_barrier_wait_end). One thread runs every op inline instead.
    torch.set_num_threads(1)
    write_result(folder, _lower(program_or_graph))


def _lower_within(program_or_graph: Any, budget: ExportBudget | None, bisecting: bool = False) -> _Lowering:
    """_lower, in a forked child watched against the budget when there is one: a lowering that grows
    past it, hangs or dies is an attempt that failed, with the budget's (or the death's) words.
    The memory watched is this process's and the child's (with its own children) together: the
    export's share, never this process's other children (an op worker beside a library call)."""
    if budget is None:
        return _lower(program_or_graph)
    what = "torch-mlir's StableHLO lowering"
    limit, timeout = int(budget.memory_limit() * LOWERING_SHARE), budget.lowering_timeout_s
    held = processes_memory([os.getpid()])
    if held + LOWERING_ROOM_BYTES > limit:
        raise ExportError(
            f"the export holds {gigabytes(held)} before torch-mlir lowers its graph, which leaves its lowering "
            f"less than {gigabytes(LOWERING_ROOM_BYTES)} of its share ({gigabytes(limit)}, "
            f"{LOWERING_SHARE:.0%} of the export's memory budget of {gigabytes(budget.memory_limit())})",
            f"raise the export's memory budget (--export-memory) to at least "
            f"{gigabytes((held + LOWERING_ROOM_BYTES) / LOWERING_SHARE)}")
    if bisecting:
        limit = min(limit, held + BISECT_HEADROOM_BYTES)
        timeout = min(timeout, BISECT_TIMEOUT_S)
    with tempfile.TemporaryDirectory(prefix="opbyop-lowering-") as folder:
        try:
            return run_in_child(_lowering_child, (program_or_graph,), Path(folder), limit, timeout,
                                multiprocessing.get_context("fork"), measured=lambda child: processes_memory([os.getpid(), child, *descendants(child)], limit))
        except BudgetExceeded as e:
            fix = ("raise the export's memory budget (--export-memory)" if e.kind == "memory"
                   else "raise the lowering's time budget (export.lowering_timeout_s)")
            return _Lowering(None, error=f"{e.words(what)}; {fix}")
        except ChildDied as e:
            return _Lowering(None, error=f"{what} died: it {e}")


def _named_nodes(graph: torch.fx.Graph, lowering: _Lowering) -> dict[Any, str]:
    """Nodes the lowering's diagnostics name, by op name or by location, with their words."""
    ops = unlowered_ops(lowering.diagnostics)
    failing = {node: ops[mlir_name(node.target) or ""] for node in failing_nodes(graph, ops)}
    return failing or nodes_at(graph, lowering.located, _module_path)  # an op lowered halfway: by its location


def _attempt(part: list[Unit], budget: ExportBudget | None) -> Attempt:
    """A part of the graph lowered alone (torch_bisect)."""
    module, originals = subgraph(part)
    lowering = _lower_within(module, budget, bisecting=True)
    if lowering.text is not None:
        return Attempt(True)
    named = {originals[n]: m for n, m in _named_nodes(module.graph, lowering).items() if n in originals}
    return Attempt(False, lowering.message, named)


@dataclass
class Lowered:
    """A program as StableHLO text, the framework ops cut out of it, and what was done to the text."""

    text: str
    failures: list[FrontendFailure]
    unlowered: list[TensorDesc]  # the cut ops' results, arguments of the module in their place
    notes: list[str]


def _lowered(program: Any, name: str, budget: ExportBudget | None = None) -> Lowered:
    """The program as StableHLO text; ops torch-mlir cannot lower are cut out, round by round
    (one op's failure can hide the next one's), and described. Ops are found by torch-mlir's words,
    else (with a budget: each attempt in a watched child) by bisecting the graph."""
    failures: list[FrontendFailure] = []
    unlowered: list[TensorDesc] = []
    for _ in range(MAX_CUTS + 1):
        lowering = _lower_within(program, budget)
        if lowering.text is not None:
            notes = [f"{lowering.empties_as_zeros} uninitialised tensor(s) torch-mlir left as tensor.empty (no "
                     "StableHLO op) made stablehlo.constant zeros"] if lowering.empties_as_zeros else []
            return Lowered(lowering.text, failures, unlowered, notes)
        graph = program.graph_module.graph
        failing = _named_nodes(graph, lowering)
        if not failing and budget is not None:
            failing = bisect(units(graph), lambda part: _attempt(part, budget), known=Attempt(False, lowering.message))
        if not failing:
            raise ExportError(
                f"torch-mlir could not lower {name} to StableHLO (torch.export traced it): {lowering.message}",
                "torch-mlir has no StableHLO lowering for the op named there: rewrite that part of the "
                "model with ops it lowers, or export the model to StableHLO another way and pass the .mlir "
                "file") from None
        for node, message in failing.items():
            failure, created = cut(graph, node, message, len(failures), _tensor_desc, _module_path(node),
                                   _framework_op(node))
            failures.append(failure)
            unlowered += created
        graph.lint()
        program.graph_module.recompile()
    raise ExportError(f"torch-mlir could not lower {name}: still failing after cutting out {len(failures)} ops",
                      "export the model to StableHLO another way and pass the .mlir file")
