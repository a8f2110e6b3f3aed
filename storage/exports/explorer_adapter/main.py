"""Model Explorer adapter (loaded by `opbyop explore` as an extension): the built-in MLIR adapter's
graphs, unchanged, with each analysed op's opbyop attributes (signature, repro command, status, depth,
message, PCC, cycles, peak L1) added to its node. The attributes come from a sidecar file written
beside the module (opbyop_storage.exports.explorer.prepare_model); node ids stay the built-in adapter's, so node data
keyed for that adapter applies here too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

from model_explorer import Adapter, AdapterMetadata, ModelExplorerGraphs
from model_explorer.graph_builder import GraphCollection

from opbyop_storage.exports.explorer import SIDECAR_SUFFIX, adapter_graphs

ADAPTER_ID = "opbyop_mlir"


def with_attributes(graph: dict[str, Any], extra: dict[str, dict[str, str]]) -> dict[str, Any]:
    """`graph` (the built-in adapter's JSON form) with `extra`'s attributes appended to its nodes."""
    for node in graph.get("nodes", []):
        for key, value in extra.get(node["id"], {}).items():
            node.setdefault("attrs", []).append({"key": key, "value": value})
    return graph


class OpbyopMlirAdapter(Adapter):
    metadata = AdapterMetadata(id=ADAPTER_ID, name="opbyop MLIR adapter",
                               description="StableHLO graphs with opbyop's per-op results as node attributes",
                               fileExts=["mlir"])

    def __init__(self) -> None:
        super().__init__()

    def convert(self, model_path: str, settings: Dict) -> ModelExplorerGraphs:
        sidecar = Path(model_path + SIDECAR_SUFFIX)
        extra = json.loads(sidecar.read_text()) if sidecar.exists() else {}
        graphs = [with_attributes(g, extra) for g in adapter_graphs(Path(model_path))]
        return {"graphCollections": [GraphCollection(label="", graphs=graphs)]}  # labelled by its file, as the built-in does
