"""A JAX function -> StableHLO: JAX lowers natively; locations carry the primitive and source line.

An input given as `jax.ShapeDtypeStruct` (e.g. weights from `jax.eval_shape(init, key)`) is an
argument known by shape and dtype only: the function is lowered, never run, and nothing of that
argument is materialised.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from opbyop.errors import ExportError
from opbyop.graph import Argument, ArgumentKind, ModelGraph
from opbyop.dtypes import mlir_dtype
from opbyop.ir.mesh import module_mesh
from opbyop.records import TensorDesc


def is_shape_only(x: Any) -> bool:
    import jax

    return isinstance(x, jax.ShapeDtypeStruct)


def export_jax(fn: Callable, inputs: Sequence[Any], name: str,
               input_names: Sequence[str] | None = None) -> ModelGraph:
    """Lower `fn(*inputs)`; when every input has a value, run it once (its outputs are the whole
    model's reference). Inputs given as jax.ShapeDtypeStruct are weights known by shape and dtype."""
    import jax

    start = time.perf_counter()
    specs = [x if is_shape_only(x) else jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype) for x in inputs]
    given = ", ".join(f"{'x'.join(map(str, s.shape)) or 'scalar'}x{s.dtype}" for s in specs)
    shape_only = any(is_shape_only(x) for x in inputs)
    try:
        text = _lower(jax, fn, specs)
        out = None if shape_only else _reference(jax, fn, inputs, text)
    except Exception as e:  # wrong shapes or dtypes for the function, or a function JAX cannot trace
        first = " ".join(str(e).strip().splitlines()[:3])[:600]
        raise ExportError(f"JAX could not trace {name} on the example inputs ({given}): {type(e).__name__}: {first}",
                          "give the shapes and dtypes the function takes (--input 8x32xf32, one per argument), "
                          "and make it a JAX function of arrays") from None
    names = list(input_names or [f"input{i}" for i in range(len(inputs))])
    names += [f"input{i}" for i in range(len(names), len(inputs))]
    arguments = [Argument(n, ArgumentKind.PARAMETER if is_shape_only(x) else ArgumentKind.INPUT,
                          TensorDesc(shape=tuple(s.shape), dtype=mlir_dtype(np.dtype(s.dtype))))
                 for n, x, s in zip(names, inputs, specs)]
    return ModelGraph(name=name, frontend="jax", module_text=text, arguments=arguments,
                      argument_values=[None if is_shape_only(x) else np.asarray(x) for x in inputs],
                      reference_outputs=[np.asarray(o) for o in out] if out is not None else None,
                      export_seconds=time.perf_counter() - start)


def _lower(jax, fn: Callable, specs: list) -> str:  # noqa: ANN001
    """StableHLO text of `fn`. A function sharded over an abstract mesh (NamedSharding on an
    AbstractMesh: no devices needed) lowers for the CPU platform explicitly; the module keeps its
    `sdy.mesh` and `#sdy.sharding`s either way."""
    jitted = fn if hasattr(fn, "trace") and hasattr(fn, "lower") else jax.jit(fn)  # keeps its in_shardings
    try:
        return _with_partitions(jitted.lower(*specs).as_text(debug_info=True))
    except ValueError as e:
        if "AbstractMesh" not in str(e):
            raise
    return _with_partitions(jitted.trace(*specs).lower(lowering_platforms=("cpu",)).as_text(debug_info=True))


def _with_partitions(text: str) -> str:
    """Lowered over an abstract mesh, JAX writes `mhlo.num_partitions = 1` whatever the mesh: the
    module is compiled for as many partitions as its mesh has devices."""
    import re

    mesh = module_mesh(text)
    if mesh is None or not mesh.axes:
        return text
    devices = 1
    for _, size in mesh.axes:
        devices *= size
    return re.sub(r"mhlo\.num_partitions = \d+ : i32", f"mhlo.num_partitions = {devices} : i32", text, count=1)


def _reference(jax, fn: Callable, inputs: Sequence[np.ndarray], text: str) -> list | None:  # noqa: ANN001
    """The function's own outputs; None for a sharded function this process has too few devices
    for (the whole model is then checked against XLA:CPU running its module on a host mesh)."""
    mesh = module_mesh(text)
    if mesh is not None and mesh.devices > len(jax.devices()):
        return None
    try:
        return jax.tree_util.tree_leaves(jax.jit(fn)(*inputs))
    except ValueError:
        if mesh is None:
            raise
        return None
