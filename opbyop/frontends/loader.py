"""Turn what a user names (zoo model, file, package.module:factory) into a ModelGraph."""

from __future__ import annotations

import importlib
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from opbyop.config import InputSpec, Zoo, ZooEntry, config_dir, load_zoo
from opbyop.errors import ExportError, UnknownModelError
from opbyop.frontends.graph import ModelGraph
from opbyop.ir.parse import read_module_source

MLIR_SUFFIXES = (".mlir", ".mlirbc")


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


def _import_factory(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UnknownModelError(f"cannot import {module_name} for '{spec}': {e}",
                                "make the package importable (pip install -e it, or set PYTHONPATH)") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise UnknownModelError(f"{module_name} has no attribute '{attr}'",
                                "name a callable that returns an nn.Module or a JAX function") from None


def load_model(spec: str, zoo: Zoo | None = None, inputs: Sequence[InputSpec] | None = None,
               seed: int = 0) -> ModelGraph:
    """Resolve `spec` in order: zoo name, StableHLO file, package.module:factory."""
    zoo = zoo or load_zoo()
    if spec in zoo.names():
        return load_entry(zoo.get(spec), seed=seed)
    path = Path(spec)
    if path.suffix in MLIR_SUFFIXES or path.is_file():
        return load_stablehlo_file(path)
    if ":" in spec:
        entry = ZooEntry(name=_safe_name(spec), frontend="torch", factory=spec, inputs=list(inputs or []))
        return load_entry(entry, seed=seed, infer_frontend=True)
    zoo.get(spec)  # raises UnknownModelError listing the zoo
    raise AssertionError("unreachable")


def _safe_name(spec: str) -> str:
    return spec.replace(":", ".").replace("/", ".").lower()


def load_entry(entry: ZooEntry, seed: int = 0, infer_frontend: bool = False) -> ModelGraph:
    if entry.frontend == "stablehlo":
        graph = load_stablehlo_file(config_dir() / (entry.path or ""))
        graph.name = entry.name
        return graph
    factory = _import_factory(entry.factory or "")
    made = factory(seed=seed, **entry.kwargs) if _takes_seed(factory) else factory(**entry.kwargs)
    specs = entry.inputs
    values: list[np.ndarray] | None = None
    if isinstance(made, tuple):  # a user's factory may return (model, example inputs)
        made, given = made
        values = [np.asarray(v.detach().numpy() if hasattr(v, "detach") else v) for v in given]
    if values is None:
        if not specs:
            raise ExportError(f"{entry.name} has no example inputs",
                              "give input shapes (--input 1x3x224x224xf32) or return (model, inputs)")
        values = example_inputs(specs, seed)
    names = [s.name or f"input{i}" for i, s in enumerate(specs)] or [f"input{i}" for i in range(len(values))]
    import torch

    if isinstance(made, torch.nn.Module):
        from opbyop.frontends.torch_export import export_torch

        tensors = [torch.from_numpy(np.ascontiguousarray(v)) for v in values]
        return export_torch(made, tensors, entry.name, names)
    if callable(made) and (entry.frontend == "jax" or infer_frontend):
        from opbyop.frontends.jax_export import export_jax

        return export_jax(made, values, entry.name, names)
    raise ExportError(f"{entry.factory} returned {type(made).__name__}, not an nn.Module or a function",
                      "return a torch.nn.Module (torch) or a callable over arrays (JAX)")


def _takes_seed(factory: Callable[..., Any]) -> bool:
    import inspect

    try:
        return "seed" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


def load_stablehlo_file(path: Path) -> ModelGraph:
    start = time.perf_counter()
    source = read_module_source(path)
    text = source if isinstance(source, str) else _bytecode_to_text(source, path)
    return ModelGraph(name=path.stem, frontend="stablehlo", module_text=text, arguments=[],
                      export_seconds=time.perf_counter() - start)


def _bytecode_to_text(data: bytes, path: Path) -> str:
    from opbyop.ir.context import make_context
    from opbyop.ir.parse import parse_module

    ctx = make_context()
    with ctx:
        return parse_module(data, ctx, str(path)).operation.get_asm(enable_debug_info=True)
