"""A JAX function -> StableHLO: JAX lowers natively; locations carry the primitive and source line."""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from opbyop.errors import ExportError
from opbyop.frontends.graph import Argument, ArgumentKind, ModelGraph
from opbyop.golden.dtypes import mlir_dtype
from opbyop.records import TensorDesc


def export_jax(fn: Callable, inputs: Sequence[np.ndarray], name: str,
               input_names: Sequence[str] | None = None) -> ModelGraph:
    """Lower `fn(*inputs)` and run it once (its outputs are the whole model's reference)."""
    import jax

    start = time.perf_counter()
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs]
    given = ", ".join(f"{'x'.join(map(str, x.shape)) or 'scalar'}x{x.dtype}" for x in inputs)
    try:
        lowered = jax.jit(fn).lower(*specs)
        text = lowered.as_text(debug_info=True)
        out = jax.tree_util.tree_leaves(jax.jit(fn)(*inputs))
    except Exception as e:  # wrong shapes or dtypes for the function, or a function JAX cannot trace
        first = " ".join(str(e).strip().splitlines()[:3])[:600]
        raise ExportError(f"JAX could not trace {name} on the example inputs ({given}): {type(e).__name__}: {first}",
                          "give the shapes and dtypes the function takes (--input 8x32xf32, one per argument), "
                          "and make it a JAX function of arrays") from None
    names = list(input_names or [f"input{i}" for i in range(len(inputs))])
    arguments = [Argument(n, ArgumentKind.INPUT, TensorDesc(shape=tuple(x.shape), dtype=mlir_dtype(x.dtype)))
                 for n, x in zip(names, inputs)]
    return ModelGraph(name=name, frontend="jax", module_text=text, arguments=arguments,
                      argument_values=[np.asarray(x) for x in inputs],
                      reference_outputs=[np.asarray(o) for o in out],
                      export_seconds=time.perf_counter() - start)
