"""A graph's values for a whole-model run, passed to its worker as one npz.

Arguments with a value travel as `arg<i>`; an argument known by shape and dtype only travels as its
description (`desc<i>`, a few bytes) and is drawn from the seed in the worker that runs the model,
never in the CLI or flow process. The framework's outputs, when there are some, travel as `ref<i>`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from opbyop.atomic import atomic_path
from opbyop.graph import ModelGraph
from opbyop.golden.inputs import make_inputs
from opbyop.records import TensorDesc


def write_values(graph: ModelGraph, path: Path) -> Path:
    arrays: dict[str, np.ndarray] = {}
    for i, argument in enumerate(graph.arguments):
        value = graph.value(i)
        if value is not None:
            arrays[f"arg{i}"] = value
        else:
            arrays[f"desc{i}"] = np.array(argument.tensor.model_dump_json())
    if not graph.arguments:  # a module whose arguments could not be described: whatever values it has
        arrays.update({f"arg{i}": v for i, v in enumerate(graph.argument_values or []) if v is not None})
    arrays.update({f"ref{i}": v for i, v in enumerate(graph.reference_outputs or [])})
    with atomic_path(path) as partial:
        np.savez(partial, **arrays)
    return path


def drawn(desc: TensorDesc, model: str, index: int, seed: int) -> np.ndarray:
    """The deterministic stand-in for argument `index` of `model`, known by shape and dtype only."""
    return make_inputs("", [desc], [], {}, f"{model}#arg{index}", seed)[0]


def filled(graph: ModelGraph, seed: int) -> list[np.ndarray]:
    """Every argument's value, drawing those the graph has none for (what a device image holds)."""
    return [v if (v := graph.value(i)) is not None else drawn(a.tensor, graph.name, i, seed)
            for i, a in enumerate(graph.arguments)]


def read_values(path: str | Path, model: str, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(argument values, framework outputs); arguments without a value drawn deterministically."""
    with np.load(path) as npz:
        count = sum(1 for k in npz.files if k.startswith(("arg", "desc")))
        values = []
        for i in range(count):
            if f"arg{i}" in npz.files:
                values.append(npz[f"arg{i}"])
            else:
                desc = TensorDesc.model_validate_json(str(npz[f"desc{i}"]))
                values.append(drawn(desc, model, i, seed))
        references = [npz[f"ref{i}"] for i in range(sum(1 for k in npz.files if k.startswith("ref")))]
    return values, references
