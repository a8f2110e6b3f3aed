"""Turn what a user names (zoo model, file, package.module:factory) into a ModelGraph.

A `package.module:name` is either a factory (callable with no arguments, or only `seed`) that
returns a torch nn.Module, `(module, example inputs)`, or a JAX function; or a JAX function itself
(a callable that takes the model's inputs). Whatever the user's code does wrong (raises, is not
callable, returns something else, does not accept the inputs given) becomes an ExportError that
says so, never a traceback.
"""

from __future__ import annotations

import importlib
import inspect
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from opbyop.config import ExportBudget, InputSpec, Zoo, ZooEntry, config_dir, load_zoo
from opbyop.errors import ExportError, ModuleError, OpbyopError, UnknownModelError
from opbyop.frontends import dumps
from opbyop.frontends.export_cache import AGAIN, ExportCache, Request
from opbyop.frontends.isolation import (BudgetExceeded, ChildDied, forkserver, run_in_child, start_forkserver,
                                        write_result)
from opbyop.graph import Argument, ArgumentKind, ModelGraph
from opbyop.frontends.jax_export import export_jax
from opbyop.frontends.reads import ExportReads, Recorder
from opbyop.frontends.specs import MLIR_SUFFIXES, factory_name, split_spec
from opbyop.sharding_plan import apply_plan
from opbyop.ir.context import make_context
from opbyop.jaxenv import prepare_jax
from opbyop.ir.parse import bytecode_to_text, check_nesting, parse_module, read_module_source
from opbyop.ir.rewrite import rewritten_text
from opbyop.ir.split import tensor_desc

_FORMS = ("a factory returning a torch.nn.Module, (module, example_inputs) or a JAX function; "
          "or a JAX function taking the inputs")


def example_inputs(specs: Sequence[InputSpec], seed: int) -> list[np.ndarray]:
    """Deterministic example inputs: floats ~ N(0, 1), integers in [low, high)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for s in specs:
        if s.dtype in ("int64", "int32"):
            arrays.append(rng.integers(s.low, s.high, size=s.shape).astype(s.dtype))
        elif s.dtype == "bool":
            arrays.append(rng.integers(0, 2, size=s.shape).astype(np.bool_))
        else:
            import ml_dtypes

            dtype = ml_dtypes.bfloat16 if s.dtype == "bfloat16" else s.dtype
            arrays.append(rng.standard_normal(size=s.shape).astype(dtype))
    return arrays


def _import_factory(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UnknownModelError(f"cannot import {module_name} for '{spec}': {e}",
                                "make the package importable (pip install -e it, or set PYTHONPATH)") from None
    except Exception as e:  # the user's module raised while importing
        raise ExportError(f"importing {module_name} for '{spec}' raised {_describe(e)}",
                          "fix the module so that it imports") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise UnknownModelError(f"{module_name} has no attribute '{attr}'", f"name {_FORMS}") from None


def _describe(e: BaseException) -> str:
    """`Type: message (at file:line)`: where in the user's code it was raised."""
    frames = traceback.extract_tb(e.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(e).__name__}: {e}{where}"


def load_model(spec: str, zoo: Zoo | None = None, inputs: Sequence[InputSpec] | None = None,
               seed: int = 0, budget: ExportBudget | None = None, weights: bool = True,
               exports: ExportCache | None = None) -> ModelGraph:
    """Resolve `spec` in order: zoo name, one dumped module (`<dump file>#<name>`, what a folder of IR
    dumps expands into: expand_specs), a folder holding one dumped module, a plugin dump file, a
    StableHLO file, package.module:factory. A model made by a factory (a zoo model's or a user's) is
    exported in a child process within `budget` (default: ExportBudget()), or taken from `exports`
    (default: the machine's export cache) when nothing its export read has changed. Without
    `weights`, the graph comes back without its weights' values (ModelGraph.without_weights): a
    factory's child never hands them over (a 1 B-parameter model's are 4 GB)."""
    zoo = zoo or load_zoo()
    if spec in zoo.names():
        return load_entry(zoo.get(spec), seed=seed, budget=budget, weights=weights, exports=exports)
    dumped = split_spec(spec)
    if dumped is not None:
        return load_dumped(*dumped, seed=seed)
    path = Path(spec)
    if path.is_dir() and (modules := dumps.scan(path)):
        if len(modules) > 1:
            raise ModuleError(f"{path} holds {len(modules)} dumped modules ({', '.join(m.name for m in modules[:5])}"
                              f"{' ...' if len(modules) > 5 else ''})",
                              "give the folder to analyze, compile or run (one model per module), or name one "
                              f"module's file, e.g. {modules[0].chosen[1]}")
        return load_dumped(modules[0].chosen[1], modules[0].name, seed=seed)
    if path.is_file() and dumps.stage_of(path) is not None and path.parent.name == "irs":
        return load_dumped(path, dumps.model_name(path.parent.parent.parent, path.parent.parent), seed=seed)
    if path.suffix in MLIR_SUFFIXES or path.is_file() or path.is_dir():
        return load_stablehlo_file(path, seed=seed)
    if ":" in spec:
        return load_entry(factory_entry(spec, inputs or []), seed=seed, budget=budget, weights=weights,
                          exports=exports)
    zoo.get(spec)  # raises UnknownModelError listing the zoo
    raise AssertionError("unreachable")


def warm_exports(specs: Sequence[str], zoo: Zoo, seed: int, exports: ExportCache, weights: bool = True) -> None:
    """Start the export forkserver now (it imports and warms torch, torch-mlir and JAX while the
    caller starts up) if a framework will export one of `specs` in a child; not for a StableHLO file,
    a dump or a model whose kept export is fresh (about 5 CPU-s for nothing). A hint only: an export
    the hint missed starts the forkserver itself."""
    if any(needs_export(spec, zoo, seed, exports, weights) for spec in specs):
        start_forkserver()


def needs_export(spec: str, zoo: Zoo, seed: int, exports: ExportCache, weights: bool = True) -> bool:
    """Whether load_model makes `spec` with a framework in an export child: a zoo model's or a
    `package.module:factory` with no fresh kept export (checked from its manifest, nothing imported)."""
    entry = _exported_entry(spec, zoo)
    return entry is not None and not exports.fresh(Request(entry, seed, weights))


def _exported_entry(spec: str, zoo: Zoo) -> ZooEntry | None:
    """The entry load_model makes `spec` from with a framework in an export child (a zoo model's or a
    `package.module:factory`), or None."""
    if spec in zoo.names():
        entry = zoo.get(spec)
        return entry if entry.frontend != "stablehlo" else None
    path = Path(spec)
    if ":" in spec and split_spec(spec) is None and not path.exists() and path.suffix not in MLIR_SUFFIXES:
        return factory_entry(spec, [])
    return None


def factory_entry(spec: str, inputs: Sequence[InputSpec]) -> ZooEntry:
    """A zoo entry for a user's `package.module:name` (its frontend follows from what it returns)."""
    return ZooEntry(name=factory_name(spec), frontend="torch", factory=spec, inputs=list(inputs))


def load_entry(entry: ZooEntry, seed: int = 0, infer_frontend: bool = True,
               budget: ExportBudget | None = None, weights: bool = True,
               exports: ExportCache | None = None) -> ModelGraph:
    """A zoo entry (with its sharding plan applied, when it has one) -> ModelGraph. A factory's model
    is made and exported in a child process within `budget` (frontends.isolation), which hands back
    its weights' values only with `weights`; or taken from `exports` (export_kept)."""
    if entry.frontend == "stablehlo":
        graph = _load_entry(entry, seed, infer_frontend)
    else:
        graph = export_kept(entry, seed, budget or ExportBudget(), weights, exports or ExportCache())
    if entry.sharding is not None:
        inputs = sum(1 for a in graph.arguments if a.kind is ArgumentKind.INPUT)
        graph.module_text = apply_plan(graph.module_text, [a.name for a in graph.arguments], inputs,
                                       entry.sharding, entry.name)
        graph.notes.append(f"sharded over a {entry.sharding.mesh} mesh by its plan in the zoo")
    return graph


def export_kept(entry: ZooEntry, seed: int, budget: ExportBudget, weights: bool, exports: ExportCache) -> ModelGraph:
    """The entry's export from `exports` when nothing it read has changed; else exported again
    (export_isolated), kept, and the model's notes say why it was made again."""
    request = Request(entry, seed, weights)
    found = exports.find(request)
    if found.graph is not None:
        return found.graph
    graph, reads = export_isolated(entry, seed, budget, weights, ignored=(exports.root,))
    exports.keep(request, graph, reads)
    if found.again:
        graph.notes.append(AGAIN + found.again)
    return graph


def export_isolated(entry: ZooEntry, seed: int, budget: ExportBudget, weights: bool = True,
                    ignored: Sequence[Path] = ()) -> tuple[ModelGraph, ExportReads]:
    """The entry's model made and exported in a child process watched against `budget`, with what
    the export read (frontends.reads; files under `ignored` are not its input). One past the budget,
    or dead, is this model's ExportError; the calling process never holds the export (nor, without
    `weights`, the weights' values)."""
    with tempfile.TemporaryDirectory(prefix="opbyop-export-") as folder:
        try:
            kind, value = run_in_child(_export_child, (entry.model_dump_json(), seed, budget.model_dump_json(), weights,
                                                       [str(p) for p in ignored]),
                                       Path(folder), budget.memory_limit(), budget.timeout_s, forkserver())
        except BudgetExceeded as e:
            raise ExportError(e.words(f"exporting {entry.name} (the factory, torch.export or JAX, torch-mlir)"),
                              _RAISE_BUDGET[e.kind]) from None
        except ChildDied as e:
            raise ExportError(f"exporting {entry.name} died: the export's child process {e}",
                              "run the factory and its export alone (opbyop split MODEL) to see the failure; "
                              "if it ran out of memory, raise the export's memory budget (--export-memory)") from None
    if kind == "graph":
        return value
    if kind == "opbyop":
        error_type, problem, fix = value
        raise error_type(problem, fix)
    raise ExportError(f"exporting {entry.name} raised {value}", "fix the factory or the model's forward")


_RAISE_BUDGET = {
    "memory": "raise the export's memory budget (--export-memory GB on the command line, export.memory_bytes "
              "in the flow's configuration) on a machine that has it, or export the model to StableHLO another "
              "way and pass the .mlir file",
    "time": "raise the export's time budget (--export-timeout SECONDS, export.timeout_s in the flow's "
            "configuration), or export the model to StableHLO another way and pass the .mlir file",
}


def _export_child(entry_json: str, seed: int, budget_json: str, weights: bool, ignored: list[str],
                  folder: Path) -> None:
    """In the export's child: make and export the model, and leave ("graph", (ModelGraph, ExportReads))
    (with its weights' values only when `weights`), ("opbyop", (error type, problem, fix)) or
    ("error", words) for the parent."""
    recorder = Recorder(ignored=[folder, *map(Path, ignored)])  # first: everything the export reads
    prepare_jax()  # this child's JAX on the CPU (a forkserver child does not see its parent's settings)
    entry, budget = ZooEntry.model_validate_json(entry_json), ExportBudget.model_validate_json(budget_json)
    try:
        graph = _load_entry(entry, seed, lowering=budget)
        write_result(folder, ("graph", (graph if weights else graph.without_weights(), recorder.reads())))
    except OpbyopError as e:
        write_result(folder, ("opbyop", (type(e), e.problem, e.fix)))
    except MemoryError:
        write_result(folder, ("error", "MemoryError: the export ran out of memory in its child process"))
    except Exception as e:
        write_result(folder, ("error", _describe(e)))


def _load_entry(entry: ZooEntry, seed: int = 0, infer_frontend: bool = True,
                lowering: ExportBudget | None = None) -> ModelGraph:
    """A zoo entry (or a user's factory) -> ModelGraph. The frontend follows from what the factory
    returns (an nn.Module is torch, any other callable JAX); `infer_frontend` is kept for callers."""
    if entry.frontend == "stablehlo":
        graph = load_stablehlo_file(config_dir() / (entry.path or ""), seed=seed)
        graph.name = entry.name
        return graph
    made = _make(_import_factory(entry.factory or ""), entry, seed)
    values: list[np.ndarray] | None = None
    if isinstance(made, tuple):  # a user's factory may return (model, example inputs)
        made, values = _unpack(made, entry)
    import torch

    if not isinstance(made, torch.nn.Module) and not callable(made):
        raise ExportError(f"{entry.factory} returned {type(made).__name__}, not an nn.Module or a function",
                          f"name {_FORMS}")
    if values is None:
        if not entry.inputs:
            raise ExportError(f"{entry.name} has no example inputs",
                              "return (model, example inputs) from the factory (what `opbyop analyze` needs), or give "
                              "their shapes with --input 1x3x224x224xf32 (split, compile, run, image build)")
        values = example_inputs(entry.inputs, seed)
    names = [s.name or f"input{i}" for i, s in enumerate(entry.inputs)] or [f"input{i}" for i in range(len(values))]
    if isinstance(made, torch.nn.Module):
        from opbyop.frontends.torch_export import export_torch, from_numpy  # torch: loaded only when used

        tensors = [from_numpy(v) for v in values]
        return export_torch(made, tensors, entry.name, names, budget=lowering)

    return export_jax(made, values, entry.name, names)


def _make(factory: Any, entry: ZooEntry, seed: int) -> Any:
    """Call the factory, or take the named callable as the model itself when it needs the inputs."""
    if not callable(factory):
        raise ExportError(f"{entry.factory} is {type(factory).__name__} {factory!r:.60}, not callable",
                          f"name {_FORMS}")
    if _takes_inputs(factory, entry.kwargs):
        return factory  # a JAX function itself: it takes the model's inputs
    try:
        return factory(seed=seed, **entry.kwargs) if _takes_seed(factory) else factory(**entry.kwargs)
    except Exception as e:
        raise ExportError(f"{entry.factory} raised {_describe(e)}",
                          "fix the factory: called with no arguments (or seed=N) it must return "
                          "a model") from None


def _unpack(made: tuple, entry: ZooEntry) -> tuple[Any, list[np.ndarray]]:
    if len(made) != 2 or not isinstance(made[1], (list, tuple)):
        raise ExportError(f"{entry.factory} returned a tuple of {len(made)} that is not (model, [inputs])",
                          "return the model alone, or (model, [example input tensors])")
    try:
        return made[0], [v if _shape_only(v) else _host_array(v) for v in made[1]]
    except Exception as e:
        raise ExportError(f"{entry.factory} returned example inputs that are not arrays: {_describe(e)}",
                          "return (model, [torch tensors or numpy arrays])") from None


def _host_array(value: Any) -> np.ndarray:
    """An example input as a numpy array, whatever its element type (a bf16 or fp8 tensor included)."""
    if hasattr(value, "detach"):  # a torch tensor
        from opbyop.frontends.torch_export import to_numpy  # torch: loaded only for torch models

        return to_numpy(value)
    return np.asarray(value)


def _shape_only(value: Any) -> bool:
    """A jax.ShapeDtypeStruct: an input known by shape and dtype only (kept as it is)."""
    return type(value).__name__ == "ShapeDtypeStruct" and hasattr(value, "shape") and hasattr(value, "dtype")


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _takes_seed(factory: Callable[..., Any]) -> bool:
    sig = _signature(factory)
    return sig is not None and "seed" in sig.parameters


def _takes_inputs(fn: Callable[..., Any], kwargs: dict[str, Any]) -> bool:
    """True when `fn` cannot be called without positional arguments: it is a model function, not a
    factory. Classes (an nn.Module subclass) are factories."""
    sig = _signature(fn)
    if sig is None or inspect.isclass(fn):
        return False
    return any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
               and p.name != "seed" and p.name not in kwargs for p in sig.parameters.values())


def expand_specs(specs: Sequence[str]) -> list[str]:
    """Each folder of IR dumps (searched recursively) replaced by one spec per dumped module; every
    other spec as it is."""
    expanded: list[str] = []
    for spec in specs:
        expanded.extend(dumps.expand(spec) or [spec])
    return expanded


def load_dumped(path: Path, name: str, seed: int = 0) -> ModelGraph:
    """One dumped module, read from its most frontend-like stage (frontends.dumps), named `name`."""
    start = time.perf_counter()
    stage, text = dumps.read_dump(Path(path))
    graph = ModelGraph(name=name, frontend=f"{stage} dump", module_text=text, arguments=[],
                       notes=[f"read from {path}"])
    _attach_values(graph, seed, str(path))
    graph.export_seconds = time.perf_counter() - start
    return graph


def load_stablehlo_file(path: Path, seed: int = 0) -> ModelGraph:
    """A StableHLO file, with example inputs for @main's arguments drawn from `seed` (no framework
    output: XLA:CPU is not run here, in this process, on a module it may die of)."""
    start = time.perf_counter()
    path = Path(path)
    source = read_module_source(path)
    text = source if isinstance(source, str) else bytecode_to_text(source, str(path))
    check_nesting(text, str(path))
    graph = ModelGraph(name=path.stem, frontend="stablehlo", module_text=text, arguments=[])
    _attach_values(graph, seed, str(path))
    graph.export_seconds = time.perf_counter() - start
    return graph


def _attach_values(graph: ModelGraph, seed: int, where: str) -> None:
    """@main's arguments, known by shape and dtype only: a file's arguments are never materialised in
    this process (two 40000x40000 f32 arguments are 12.8 GB). Ops get their inputs in their workers,
    a whole-model run draws them in its worker (frontends.values)."""
    from jaxlib.mlir import ir

    try:
        text = rewritten_text(graph.module_text, where)
        with make_context() as ctx:
            module = parse_module(text, ctx, where)
            main = next((op for op in module.body.operations if op.operation.name == "func.func"
                         and ir.StringAttr(op.attributes["sym_name"]).value == "main"), None)
            if main is None:
                raise ModuleError(f"{where} has no func.func @main", "name the entry function @main")
            types = [tensor_desc(t) for t in main.type.inputs]
    except OpbyopError:
        raise
    except Exception as e:  # a module the splitter will describe better: no arguments described
        graph.notes.append(f"no example inputs: {type(e).__name__}: {e}")
        return
    graph.arguments = [Argument(f"arg{i}", ArgumentKind.INPUT, t) for i, t in enumerate(types)]
    graph.argument_values = [None] * len(types)

