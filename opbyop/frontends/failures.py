"""Framework ops the frontend could not lower, as op records of their model.

Each becomes an OpRecord after the model's StableHLO ops (positions continue theirs), named by its
aten op, with the provenance the FX graph gave it and the frontend's own words. Its signature hashes
what identifies the failure (op, tensor types, message): the same op in 32 layers is one unique op.
"""

from __future__ import annotations

import hashlib
import json

from opbyop.graph import FrontendFailure, ModelGraph
from opbyop.records import OpRecord, Provenance, SourceFrame


def _frame(source: str | None) -> SourceFrame | None:
    if not source or ":" not in source:
        return None
    file, _, line = source.rpartition(":")
    return SourceFrame(file=file, line=int(line)) if line.isdigit() else None


def signature_of(failure: FrontendFailure) -> str:
    key = json.dumps(["frontend", failure.aten_op or failure.framework_op, [str(t) for t in failure.inputs],
                      [str(t) for t in failure.outputs], failure.message])
    return hashlib.sha256(key.encode()).hexdigest()


def failure_record(failure: FrontendFailure, model: str, position: int) -> OpRecord:
    frame = _frame(failure.source)
    provenance = Provenance(framework_op=failure.framework_op, module_path=failure.module_path,
                            aten_op=failure.aten_op, source=frame, stack=[frame] if frame else [],
                            location=failure.location)
    return OpRecord(model=model, position=position, op_name=failure.aten_op or failure.framework_op,
                    signature=signature_of(failure), inputs=list(failure.inputs), outputs=list(failure.outputs),
                    provenance=provenance, frontend_error=failure.message)


def failure_records(graph: ModelGraph, first_position: int) -> list[OpRecord]:
    """The graph's frontend failures as records of `graph.name`, from `first_position` on."""
    return [failure_record(f, graph.name, first_position + i) for i, f in enumerate(graph.frontend_failures)]
