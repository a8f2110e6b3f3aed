"""When torch-mlir cannot lower some framework ops, cut them out of the exported graph.

Each unlowerable node leaves the graph: its results become new placeholders (@main arguments known
by shape and dtype only: the ops after it still get analysed) and its tensor inputs become extra
outputs (the ops before it stay live). The node itself is described as a FrontendFailure, with
torch-mlir's own words, so that the run records it on that op instead of losing the model.
"""

from __future__ import annotations

import operator
import re
from typing import Any, Callable

import torch

from opbyop.graph import FrontendFailure
from opbyop.records import TensorDesc

_ILLEGAL = re.compile(r"failed to legalize operation '([\w.]+)'")
_OP_ERROR = re.compile(r"^'(torch\.aten\.[\w.]+)' op ")  # an op's own verifier or canonicalizer refusing it
_OPERATOR = re.compile(r'"torch\.operator"\(.*?<\{name = "([\w.]+)"')  # an op torch-mlir only knows by name


def unlowered_ops(diagnostics: list[str]) -> dict[str, str]:
    """torch-mlir op name (torch.aten.histc) -> torch-mlir's message, from the lowering's diagnostics."""
    out: dict[str, str] = {}
    for line in diagnostics:
        message = line.split(": ", 1)[-1]
        refused = _OP_ERROR.search(message)
        if refused is not None and refused[1] not in out:
            out[refused[1]] = message
        match = _ILLEGAL.search(line)
        if match is None:
            continue
        named = _OPERATOR.search(line) if match[1] == "torch.operator" else None
        op = named[1] if named else match[1]
        if op not in out:
            out[op] = line[line.index("failed to legalize"):]
    return out


def mlir_name(target: Any) -> str | None:
    """How torch-mlir names an FX node's target: aten::histc -> torch.aten.histc."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return None
    return "torch." + schema.name.replace("::", ".")


def failing_nodes(graph: torch.fx.Graph, ops: dict[str, str]) -> list[torch.fx.Node]:
    return [n for n in graph.nodes if n.op == "call_function" and mlir_name(n.target) in ops]


def nodes_at(graph: torch.fx.Graph, located: list[tuple[str, str]],
             module_path: Callable[[torch.fx.Node], str | None]) -> dict[torch.fx.Node, str]:
    """Nodes named by the locations of the lowering's diagnostics (`aten=...;module=...`, which the
    exporter puts on every op), with the message: for an op whose lowering failed halfway and left a
    helper op (a `torch.constant.int`) illegal instead of itself, or whose StableHLO the lowering
    itself found invalid (a slice_scatter's scatter bounds)."""
    out: dict[torch.fx.Node, str] = {}
    for location, message in located:
        aten = re.search(r"aten=([\w.]+)", location)
        module = re.search(r"module=([\w.]+)", location)
        if aten is None:
            continue
        for node in graph.nodes:
            if node.op == "call_function" and node not in out \
                    and str(node.meta.get("original_aten") or node.target) == aten[1] \
                    and (module is None or module_path(node) == module[1]):
                out[node] = message
    return out


def _source(node: torch.fx.Node) -> tuple[str | None, str]:
    """(innermost file:line of the model's code, the whole chain innermost first) from the node's stack trace."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', node.meta.get("stack_trace") or "")
    chain = [f"{f}:{line}" for f, line in reversed(frames)]
    own = [c for c in chain if "/site-packages/" not in c and "/torch/" not in c and "opbyop/frontends" not in c]
    return (own[0] if own else (chain[0] if chain else None)), " <- ".join(chain)


def cut(graph: torch.fx.Graph, node: torch.fx.Node, message: str, position: int,
        describe: Callable[[torch.Tensor], TensorDesc], module_path: str | None,
        framework_op: str | None) -> tuple[FrontendFailure, list[TensorDesc]]:
    """Remove `node`: its results become placeholders after the last one, its tensor inputs extra
    outputs. Returns the failure and the descriptions of the new placeholders, in order."""
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        results = [node]
    else:  # a multi-result op: each used result is read through getitem
        results = [u for u in node.users if u.op == "call_function" and u.target is operator.getitem]
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    anchor = placeholders[-1]
    created: list[TensorDesc] = []
    for k, result in enumerate(results):
        with graph.inserting_after(anchor):
            placeholder = graph.placeholder(f"unlowered_{position}_{k}")
        placeholder.meta.update({key: result.meta[key] for key in ("val", "tensor_meta") if key in result.meta})
        result.replace_all_uses_with(placeholder)
        created.append(describe(result.meta["val"]))
        anchor = placeholder
    inputs = [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
    output = graph.output_node()
    outputs = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
    computed = [a for a in inputs if a.op != "placeholder" and a not in outputs]  # arguments stay arguments
    output.args = (tuple(outputs) + tuple(computed),)
    for result in results:
        if result is not node:
            graph.erase_node(result)
    graph.erase_node(node)
    source, chain = _source(node)
    aten = str(node.meta.get("original_aten") or node.target)
    failure = FrontendFailure(framework_op=framework_op or aten, aten_op=aten, message=message,
                              module_path=module_path, source=source, location=chain,
                              inputs=[describe(a.meta["val"]) for a in inputs], outputs=created,
                              position=position)
    return failure, created
