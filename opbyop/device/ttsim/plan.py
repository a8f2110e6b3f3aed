"""A loaded TTNN program as plain data for the ttsim runner, which runs without opbyop or MLIR.

The runner's interpreter has no MLIR parser (it lives in ttnn's own interpreter), so the program
opbyop already read (opbyop.device.program) travels as JSON: functions, ops with their operands,
results, types and attributes, and each `ttnn.constant`'s values as an array beside the inputs.
Ops whose output the caller wants (the accuracy trace's) are marked, in every function the program
runs (its const-eval functions too), each with the key the runner sends its output back under.
tt-mlir's rows_gather / rows_scatter carry how the model reads their operand (`rows_split`: the
element counts before and after the addressed dimensions), so that both simulators read it alike.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from opbyop.device.kernels.indexing import pre_and_rest
from opbyop.device.program import Op, Program, TensorType, dense_values


def tensor_type(t: TensorType | None) -> dict | None:
    if t is None:
        return None
    layout = t.layout
    return {"shape": list(t.shape), "dtype": t.dtype,
            "layout": None if layout is None else {
                "tiled": layout.tiled, "dtype": layout.dtype, "buffer": layout.buffer,
                "memory_layout": layout.memory_layout, "grid": list(layout.grid),
                "shard_shape": list(layout.shard_shape)}}


def program_plan(program: Program, observe: Callable[[Op], bool] | None = None
                 ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(the plan, the constants' values keyed as the plan names them). Each op that `observe` picks,
    in any function (the model's accuracy trace sees every function's ops: the entry's, its
    const-eval functions', a loop body's), carries its key (`observe`, observed_key's): the runner
    sends its output back under it."""
    constants: dict[str, np.ndarray] = {}
    functions = {}
    for f_index, (name, function) in enumerate(program.functions.items()):
        ops = []
        for o_index, op in enumerate(function.ops):
            entry = {"name": op.name, "operands": op.operands, "results": op.results,
                     "operand_types": [tensor_type(t) for t in op.operand_types],
                     "result_types": [tensor_type(t) for t in op.result_types],
                     "attrs": _plain(op.attrs)}
            if op.name == "ttnn.constant" and "value" in op.raw:
                key = f"c{f_index}_{o_index}"
                constants[key] = np.asarray(dense_values(op.raw["value"]))
                entry["constant"] = key
            if op.name in ROWS_OPS:
                entry["rows_split"] = rows_split(op)
            if observe is not None and len(op.results) == 1 and observe(op):
                entry["observe"] = observed_key(name, o_index)
            ops.append(entry)
        functions[name] = {"arguments": function.arguments,
                           "argument_types": [tensor_type(t) for t in function.argument_types],
                           "ops": ops, "returns": function.returns,
                           "return_types": [tensor_type(t) for t in function.return_types]}
    return {"entry": program.entry, "functions": functions}, constants


def observed_key(function: str, index: int) -> str:
    """The name an observed op's output travels under (observed.npz): its function and its index
    there, `main.12`, `main_const_eval_0.1`."""
    return f"{function}.{index}"


def observed_op(key: str) -> tuple[str, int]:
    """(function, op index) of an observed_key."""
    function, _, index = key.rpartition(".")
    return function, int(index)


ROWS_OPS = ("ttnn.rows_gather", "ttnn.rows_scatter")


def rows_split(op: Op) -> list[int] | None:
    """(pre, rest) of a rows_gather / rows_scatter operand read as (pre, *sizes, rest), as opbyop's
    model reads it (opbyop.device.kernels.indexing); None where it cannot be read so."""
    table, indices = (op.operand_types[i] for i in (0, 1))
    other = op.operand_types[2] if op.name == "ttnn.rows_scatter" else op.result_types[0]
    if table is None or indices is None or other is None:
        return None
    batch = indices.shape[0] if len(indices.shape) == 3 else 1
    split = pre_and_rest(tuple(table.shape), [int(s) for s in op.attrs.get("sizes") or []], tuple(other.shape),
                         batch, bool(op.attrs.get("column", False)))
    return None if split is None else list(split)


def _plain(value: Any) -> Any:
    """Attributes as JSON values (anything opaque as its text)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    return str(value)
