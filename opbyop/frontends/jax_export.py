"""A JAX function -> StableHLO: JAX lowers natively; locations carry the primitive and source line."""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from opbyop.frontends.graph import Argument, ArgumentKind, ModelGraph
from opbyop.golden.dtypes import mlir_dtype
from opbyop.records import TensorDesc



def export_jax(fn: Callable, inputs: Sequence[np.ndarray], name: str,
               input_names: Sequence[str] | None = None) -> ModelGraph:
    import jax

    start = time.perf_counter()
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs]
    lowered = jax.jit(fn).lower(*specs)
    text = lowered.as_text(debug_info=True)
    out = jax.tree_util.tree_leaves(jax.jit(fn)(*inputs))
    names = list(input_names or [f"input{i}" for i in range(len(inputs))])
    arguments = [Argument(n, ArgumentKind.INPUT, TensorDesc(shape=tuple(x.shape), dtype=mlir_dtype(x.dtype)))
                 for n, x in zip(names, inputs)]
    return ModelGraph(name=name, frontend="jax", module_text=text, arguments=arguments,
                      argument_values=[np.asarray(x) for x in inputs],
                      reference_outputs=[np.asarray(o) for o in out],
                      export_seconds=time.perf_counter() - start)
