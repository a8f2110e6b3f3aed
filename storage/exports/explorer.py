"""A run's results laid over the model's graph in Google's Model Explorer.

Model Explorer draws a StableHLO module with its built-in MLIR adapter and colours the nodes from
"node data" files: `{graphId: {"results": {nodeId: {"value": v, "bgColor"?: c}}, "thresholds" |
"gradient": [...]}}`. The adapter numbers the ops of a function in program order ("0", "1" ...; the
function's arguments are "arg0" ...; ops inside regions get their own ids, under a namespace
"(<op>_<id>)/..."), so the ids are read from the adapter itself and aligned with the split's
positions by op name: node data written here applies to the graph Model Explorer builds from the same
.mlir, beside tt-explorer's own.

One node-data file per metric: status and depth (a colour per value, the HTML report's colours),
PCC, simulated cycles and peak L1 (gradients).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Iterator

from opbyop.atomic import write_text
from opbyop.boards import DEFAULT_CHIP
from opbyop.errors import StoreError
from opbyop.records import OpRecord, OpResult, Stage, Status
from opbyop.workspace import Workspace
from opbyop_storage.colours import DEPTH_COLOURS
from opbyop_storage.dataset import Store

GRAPH_ID = "main"  # the adapter names a function's graph after it; the split analyses @main
SIDECAR_SUFFIX = ".opbyop.json"  # beside a module: the attributes the opbyop adapter adds to its nodes
SPLIT_FAILED = "SPLIT_FAILED"


class Metric(str, Enum):
    """In the order Model Explorer is given them: it shows the last one loaded, the status."""

    DEPTH = "depth"
    PCC = "pcc"
    CYCLES = "cycles"
    PEAK_L1 = "peak_l1"
    STATUS = "status"


# Gradients run from the better end (stop 0: the run's lowest value) to the worse; PCC the other way.
_GRADIENTS: dict[Metric, list[dict[str, Any]]] = {
    Metric.PCC: [{"stop": 0, "bgColor": "#dc2626"}, {"stop": 0.5, "bgColor": "#facc15"}, {"stop": 1, "bgColor": "#16a34a"}],
    Metric.CYCLES: [{"stop": 0, "bgColor": "#fff7ed"}, {"stop": 0.5, "bgColor": "#fb923c"}, {"stop": 1, "bgColor": "#7c2d12"}],
    Metric.PEAK_L1: [{"stop": 0, "bgColor": "#eff6ff"}, {"stop": 0.5, "bgColor": "#60a5fa"}, {"stop": 1, "bgColor": "#1e3a8a"}],
}
_DEPTHS = [SPLIT_FAILED, *(s.value for s in Stage)]


@dataclass
class NodeFacts:
    """What the run says about one op occurrence, and the node it is drawn as."""

    node_id: str
    op: OpRecord
    result: OpResult | None
    repro: str


def adapter_graphs(module_path: Path) -> list[dict[str, Any]]:
    """The graphs Model Explorer's built-in MLIR adapter makes of a module file."""
    import ai_edge_model_explorer_adapter as adapter

    try:
        converted = json.loads(adapter.ConvertMlirToJson(adapter.VisualizeConfig(), str(module_path)))
    except Exception as e:  # the adapter's own error: the module does not parse for it
        raise StoreError(f"Model Explorer's MLIR adapter cannot read {module_path}: {e}",
                         "check the module with `opbyop split FILE`; a model's stored module is the one it was split from") from None
    return [g for collection in converted for g in collection.get("subgraphs", [])]


def _top_level(node: dict[str, Any]) -> bool:
    """An op of the function's own block: not an argument, not an op inside another op's region."""
    namespace = node.get("namespace") or ""
    return node["id"].isdigit() and not (namespace.startswith("(") and ")/" in namespace)


def _same_op(label: str, op_name: str) -> bool:
    # the split rewrites tensor-typed arith.constant as stablehlo.constant
    return label == op_name or (label == "arith.constant" and op_name == "stablehlo.constant")


def node_ids(graph: dict[str, Any], ops: list[OpRecord]) -> dict[int, str]:
    """position -> node id: the function's top-level nodes in program order, matched to the split's ops
    by op name (an op without a node, e.g. from an inlined call, is skipped)."""
    nodes = [n for n in graph.get("nodes", []) if _top_level(n)]
    nodes.sort(key=lambda n: int(n["id"]))
    found: dict[int, str] = {}
    i = 0
    for op in sorted(ops, key=lambda o: o.position):
        j = i
        while j < len(nodes) and not _same_op(nodes[j]["label"], op.op_name):
            j += 1
        if j < len(nodes):
            found[op.position] = nodes[j]["id"]
            i = j + 1
    return found


def stored_module(store: Store, run_id: str, model: str) -> str:
    """The model's StableHLO module as the run split it, from the artifact store."""
    models = {m.summary.model: m.summary for m in store.models(run_id)}
    if model not in models:
        raise StoreError(f"run {run_id!r} has no model {model!r}",
                         f"pass one of: {', '.join(sorted(models)) or '(none)'}")
    digest = models[model].module_artifact
    if not digest:
        raise StoreError(f"run {run_id!r} stored no graph of {model!r} (runs before graphs were stored keep none)",
                         f"analyse it again to store its graph: opbyop analyze {model}")
    try:
        return Workspace.default().artifacts.read_text(digest)
    except FileNotFoundError:
        raise StoreError(f"the graph of {model!r} ({digest[:16]}) is not in the artifact store",
                         "point OPBYOP_HOME at the workspace the run was made in, or analyse the model again") from None


def run_models(store: Store, run_id: str) -> list[str]:
    """The run's models that have a stored graph."""
    return sorted(m.summary.model for m in store.models(run_id) if m.summary.module_artifact)


def model_facts(store: Store, run_id: str, model: str, module_path: Path) -> list[NodeFacts]:
    """Every op occurrence of `model` that Model Explorer draws, with its result in the run."""
    chip = store.run(run_id).chip or DEFAULT_CHIP
    results = {r.signature: r for r in store.results(run_id)}
    ops = store.ops(run_id, model)
    graph = next((g for g in adapter_graphs(module_path) if g.get("id") == GRAPH_ID), None)
    if graph is None:
        raise StoreError(f"the stored graph of {model!r} has no @{GRAPH_ID} function", "analyse the model again")
    ids = node_ids(graph, ops)
    return [NodeFacts(node_id=ids[op.position], op=op, result=results.get(op.signature) if op.signature else None,
                      repro=f"opbyop repro {op.signature[:16]} --chip {chip}" if op.signature else "")
            for op in ops if op.position in ids]


def _value(facts: NodeFacts, metric: Metric) -> tuple[float, str | None] | None:
    """The node's value for `metric`, and its own colour for the categorical metrics."""
    r = facts.result
    if metric is Metric.DEPTH:
        depth = SPLIT_FAILED if facts.op.split_error else (r.depth.value if r else None)
        return (_DEPTHS.index(depth), DEPTH_COLOURS[depth]) if depth else None
    if r is None:
        return None
    if metric is Metric.STATUS:
        return list(Status).index(r.status), r.status.colour
    if metric is Metric.PCC:
        return (r.golden.pcc, None) if r.golden and r.golden.pcc is not None else None
    if r.device is None:
        return None
    return (float(r.device.cycles if metric is Metric.CYCLES else r.device.peak_l1_bytes), None)


def node_data(facts: list[NodeFacts], metric: Metric) -> dict[str, Any]:
    """Model Explorer's node data for one metric of one model."""
    results: dict[str, dict[str, Any]] = {}
    for f in facts:
        got = _value(f, metric)
        if got is not None:
            value, colour = got
            results[f.node_id] = {"value": value, **({"bgColor": colour} if colour else {})}
    entry: dict[str, Any] = {"results": results}
    if metric is Metric.STATUS:  # value i is status i: the legend, and the colour of any node without its own
        entry["thresholds"] = [{"value": i, "bgColor": s.colour} for i, s in enumerate(Status)]
    elif metric is Metric.DEPTH:
        entry["thresholds"] = [{"value": i, "bgColor": DEPTH_COLOURS[d]} for i, d in enumerate(_DEPTHS)]
    else:
        entry["gradient"] = _GRADIENTS[metric]
    return {GRAPH_ID: entry}


def node_attributes(facts: list[NodeFacts]) -> dict[str, dict[str, str]]:
    """node id -> what the opbyop adapter shows in the node's attributes (signature, repro, verdict)."""
    out: dict[str, dict[str, str]] = {}
    for f in facts:
        r = f.result
        attrs = {"opbyop.position": str(f.op.position), "opbyop.signature": f.op.signature or "(split failed)",
                 "opbyop.repro": f.repro or "", "opbyop.status": r.status.value if r else "(no result)",
                 "opbyop.depth": r.depth.value if r else (SPLIT_FAILED if f.op.split_error else "")}
        if r is not None and r.failed_stage is not None:
            attrs["opbyop.failed_stage"] = r.failed_stage.value
        if r is not None and r.message:
            attrs["opbyop.message"] = r.message
        elif f.op.split_error:
            attrs["opbyop.message"] = f.op.split_error
        if r is not None and r.golden is not None and r.golden.pcc is not None:
            attrs["opbyop.pcc"] = f"{r.golden.pcc:.6f}"
        if r is not None and r.device is not None:
            attrs["opbyop.cycles"] = str(r.device.cycles)
            attrs["opbyop.peak_l1_bytes"] = str(r.device.peak_l1_bytes)
        out[f.node_id] = attrs
    return out


@dataclass
class PreparedModel:
    """A model's files for Model Explorer: its module (with the attribute sidecar) and its node data."""

    model: str
    module: Path
    node_data: dict[Metric, Path]


def prepare_model(store: Store, run_id: str, model: str, directory: Path,
                  metrics: tuple[Metric, ...] = tuple(Metric)) -> PreparedModel:
    """Write `model`'s module, its node attributes and one node-data file per metric into `directory`."""
    module = directory / f"{model}.mlir"
    write_text(module, stored_module(store, run_id, model))
    facts = model_facts(store, run_id, model, module)
    write_text(module.with_name(module.name + SIDECAR_SUFFIX), json.dumps(node_attributes(facts)))
    files = {}
    for metric in metrics:
        files[metric] = write_text(directory / f"{model}.{metric.value}.json", json.dumps(node_data(facts, metric)))
    return PreparedModel(model, module, files)


def export_node_data(store: Store, run_id: str, model: str, metric: Metric, out: Path) -> int:
    """Write `model`'s node data for `metric` to `out`; the number of nodes it colours."""
    with tempfile.TemporaryDirectory(prefix="opbyop-me-") as tmp:
        module = Path(tmp) / f"{model}.mlir"
        module.write_text(stored_module(store, run_id, model))
        data = node_data(model_facts(store, run_id, model, module), metric)
    write_text(Path(out), json.dumps(data, indent=1))
    return len(data[GRAPH_ID]["results"])


def iter_models(store: Store, run_id: str, model: str | None) -> Iterator[str]:
    """The models to open: `model`, or every model of the run with a stored graph."""
    if model is not None:
        yield model
        return
    found = run_models(store, run_id)
    if not found:
        raise StoreError(f"run {run_id!r} stored no model graph (runs before graphs were stored keep none)",
                         "analyse the models again to store their graphs: opbyop analyze MODELS")
    yield from found
