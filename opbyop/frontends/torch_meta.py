"""Exporting torch models whose weights live on the meta device: shapes and dtypes, no values.

torch.export traces on fake tensors anyway; what a meta model changes is what the traced graph
holds: constants created in forward on the weights' device are meta (an empty KV-cache tensor has
no values to lose), and factory ops name the meta device, which torch-mlir's StableHLO lowering
does not fold (`scalar_tensor(..., device=meta)` stays an illegal f64 literal). Both are rewritten
here, on the exported graph, before torch-mlir sees it.
"""

from __future__ import annotations

from typing import Any

import torch


def is_meta(tensors: list[torch.Tensor]) -> bool:
    return any(t.is_meta for t in tensors)


def to_meta(t: torch.Tensor) -> torch.Tensor:
    """The same shape and dtype on the meta device (what export traces; the values stay aside)."""
    return t if t.is_meta else torch.empty_like(t, device="meta")


def fix_meta_graph(program: Any) -> None:
    """Drop empty meta constants from concatenations and move factory ops off the meta device."""
    signature = program.graph_signature
    empty = {placeholder for placeholder, state in signature.inputs_to_lifted_tensor_constants.items()
             if program.constants[state].is_meta and program.constants[state].numel() == 0}
    graph = program.graph_module.graph
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is torch.ops.aten.cat.default and empty:  # cat ignores empty 1-D operands
            kept = [x for x in node.args[0] if getattr(x, "name", None) not in empty]
            node.args = (kept, *node.args[1:])
        device = node.kwargs.get("device")
        if device is not None and torch.device(device).type == "meta":
            node.kwargs = {**node.kwargs, "device": torch.device("cpu")}
    for name, value in list(program.constants.items()):  # an unused empty constant costs nothing real
        if isinstance(value, torch.Tensor) and value.is_meta and value.numel() == 0:
            program.constants[name] = torch.empty(value.shape, dtype=value.dtype)
    program.graph_module.recompile()
