"""Find the FX nodes a torch-mlir failure comes from when its words name none.

Some failures name no op: a pass that fails on the whole module, a C++ abort, a lowering that
grows past the export's memory or time budget. Then the graph is bisected: its ops (in graph
order) are split in two halves, each lowered as a graph of its own (its inputs from outside become
placeholders, its values used outside become outputs), and the failing half is split again, until
single ops fail alone. A half whose failure names ops stops there. When both halves lower and only
the whole fails, no op is to blame and nothing is returned.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Callable

import torch

# Units of a graph: a call_function node and the getitem nodes reading its results (kept together:
# a multi-result op lowers with its reads).
Unit = list[torch.fx.Node]


@dataclass
class Attempt:
    """One lowering of a part of the graph: did it lower, and if not, which of its nodes were named."""

    ok: bool
    message: str = ""  # torch-mlir's words (or the budget's) when it did not lower
    named: dict[torch.fx.Node, str] = field(default_factory=dict)  # nodes of the part the failure named


def units(graph: torch.fx.Graph) -> list[Unit]:
    out: list[Unit] = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        reads = [u for u in node.users if u.op == "call_function" and u.target is operator.getitem]
        out.append([node] + reads)
    return out


def subgraph(part: list[Unit]) -> tuple[torch.fx.GraphModule, dict[torch.fx.Node, torch.fx.Node]]:
    """The part's nodes as a graph of their own, and each copied node -> its original. Values from
    outside the part are placeholders; values used outside it (or by the graph's output) are outputs."""
    nodes = [n for unit in part for n in unit]
    inside = set(nodes)
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in nodes:
        for arg in node.all_input_nodes:
            if arg not in inside and arg not in env:
                placeholder = graph.placeholder(f"outside_{len(env)}")
                placeholder.meta.update({k: arg.meta[k] for k in ("val", "tensor_meta") if k in arg.meta})
                env[arg] = placeholder
        env[node] = graph.node_copy(node, lambda a: env[a])
    used_outside = [n for n in nodes if isinstance(n.meta.get("val"), torch.Tensor)
                    and any(u not in inside for u in n.users)]
    if not used_outside:  # nothing leaves the part: its last tensor is its output
        used_outside = [n for n in nodes if isinstance(n.meta.get("val"), torch.Tensor)][-1:]
    graph.output(tuple(env[n] for n in used_outside))
    return torch.fx.GraphModule(torch.nn.Module(), graph), {copy: node for node, copy in env.items() if node in inside}


def bisect(part: list[Unit], attempt: Callable[[list[Unit]], Attempt], known: Attempt | None = None) -> dict[torch.fx.Node, str]:
    """The nodes of `part` a failure comes from, with the words of their failure ({} when none
    fails alone). `known`: the part's own attempt, when it was already made."""
    if not part:  # a graph whose ops are all cut out: nothing left to blame
        return {}
    outcome = known or attempt(part)
    if outcome.ok:
        return {}
    if outcome.named:
        return outcome.named
    if len(part) == 1:
        return {part[0][0]: outcome.message}
    half = len(part) // 2
    return {**bisect(part[:half], attempt), **bisect(part[half:], attempt)}
