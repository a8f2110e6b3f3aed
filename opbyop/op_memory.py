"""How much host memory one op needs, known from its shapes before anything is allocated, and the
words opbyop uses when memory runs out (an op's worker, or the process that runs the model)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from opbyop.dtypes import numpy_dtype
from opbyop.graph import ModelGraph
from opbyop.records import TensorDesc, UniqueOp

# What to do when an op does not fit: said wherever memory runs out.
MEMORY_FIX = ("run it on a machine (or Dask worker) with more memory, run fewer workers at once "
              "(--workers 1), or leave the op's device/golden stages out")


def tensor_bytes(t: TensorDesc) -> int:
    try:
        itemsize = numpy_dtype(t.dtype).itemsize
    except ValueError:  # a type numpy has no name for (token, tuple ...): counted as 4 bytes an element
        itemsize = 4
    return int(np.prod(t.shape, dtype=np.int64)) * itemsize


def op_bytes(op: UniqueOp) -> tuple[int, int]:
    """(operand bytes, result bytes) of one op, from its shapes."""
    return _total(op.inputs), _total(op.outputs)


def _total(tensors: Sequence[TensorDesc]) -> int:
    return sum(tensor_bytes(t) for t in tensors)


def gigabytes(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def op_size(op: UniqueOp) -> str:
    """The op's operand and result bytes, in words (a worker that dies of memory is judged by them)."""
    operands, results = op_bytes(op)
    return f"its operands are {gigabytes(operands)} and its results {gigabytes(results)}"


def op_memory_message(op: UniqueOp, what: str) -> str:
    """`what` happened (the worker ran out of memory ...), with the op's own figures and the fix."""
    operands, results = op_bytes(op)
    return (f"{what}: out of host memory; the op's operands are {gigabytes(operands)} and its results "
            f"{gigabytes(results)} ({op.op_name}, {', '.join(str(t) for t in op.inputs)}); {MEMORY_FIX}")


def over_budget(op: UniqueOp, budget: int | None) -> str | None:
    """Why the op is refused up front when its operands and results exceed a worker's memory budget."""
    if budget is None:
        return None
    operands, results = op_bytes(op)
    if operands + results <= budget:
        return None
    return (f"refused: out of host memory budget; the op's operands ({gigabytes(operands)}) and results "
            f"({gigabytes(results)}) exceed the worker's memory budget of {gigabytes(budget)} "
            f"({op.op_name}); raise the budget (memory_budget_bytes) or {MEMORY_FIX}")


def host_memory_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


# A whole-model run holds the model's argument values about three times at once: the values
# themselves, their copy on the simulated device, and XLA:CPU's copy for the reference.
WHOLE_MODEL_COPIES = 3


def whole_model_misfit(arguments: Sequence[TensorDesc], dram_bytes: int, host_bytes: int) -> str | None:
    """Why the whole model cannot be run stitched (its arguments, weights included, do not fit the
    chip's DRAM or this host's memory), with the figures; None when it fits."""
    weights = _total(arguments)
    if weights <= dram_bytes and weights * WHOLE_MODEL_COPIES <= host_bytes:
        return None
    reasons = []
    if weights > dram_bytes:
        reasons.append(f"the chip's DRAM holds {gigabytes(dram_bytes)}")
    if weights * WHOLE_MODEL_COPIES > host_bytes:
        reasons.append(f"a stitched run needs about {gigabytes(weights * WHOLE_MODEL_COPIES)} of host memory "
                       f"(the values, their device copy and XLA:CPU's) and this host has {gigabytes(host_bytes)}")
    return (f"whole model not run: its arguments (weights included) are {gigabytes(weights)}; "
            f"{'; '.join(reasons)}. The op-by-op results stand on their own; a mesh of chips "
            "(or a larger host) is what runs this model whole")


def process_out_of_memory(what: str) -> str:
    """The words for this process running out of memory: how much it held at its peak, of how much."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return (f"{what} ran out of memory (its peak was {gigabytes(peak)} of this host's "
            f"{gigabytes(host_memory_bytes())}); what was stored so far is kept. Fix: {MEMORY_FIX}; "
            "for a model larger than the host, pass the model without weights (a meta-device torch model, "
            "jax.ShapeDtypeStruct arguments, or a StableHLO file)")


def whole_model_misfit_on(graph: ModelGraph, dram_bytes: int) -> str | None:
    """whole_model_misfit for a model's @main arguments on a target with `dram_bytes` of DRAM (all its
    chips: opbyop.compiler.system_desc.dram_bytes reads it from the target's descriptor)."""
    return whole_model_misfit([a.tensor for a in graph.arguments], dram_bytes, host_memory_bytes())


def misfits(graphs: dict[str, ModelGraph], dram_bytes: int) -> dict[str, str]:
    """Model name -> why its whole-model run is left out, for the models that do not fit."""
    return {name: reason for name, graph in graphs.items() if (reason := whole_model_misfit_on(graph, dram_bytes))}
