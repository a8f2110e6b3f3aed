"""Occurrences across every model of a run -> unique ops, keeping the full many-to-many mapping."""

from __future__ import annotations

from typing import Iterable

from opbyop.records import Occurrence, OpRecord, UniqueOp


def dedupe(records: Iterable[OpRecord]) -> list[UniqueOp]:
    """Unique ops by signature, first-seen order; each keeps every (model, position) it came from.
    A sharded op's signature covers its mesh and shardings (they are in its module's text): the same
    op sharded differently, or on another mesh, is another unique op."""
    unique: dict[str, UniqueOp] = {}
    for r in records:
        if not r.ok:
            continue
        op = unique.get(r.signature)
        if op is None:
            unique[r.signature] = UniqueOp(
                signature=r.signature, op_name=r.op_name, module_text=r.module_text or "",
                attributes=r.attributes, inputs=r.inputs, outputs=r.outputs, operands=r.operands,
                provenance=r.provenance, occurrences=[Occurrence(model=r.model, position=r.position)],
                mesh=r.mesh, operand_shardings=r.operand_shardings, result_shardings=r.result_shardings,
                frontend_error=r.frontend_error)
        else:
            op.occurrences.append(Occurrence(model=r.model, position=r.position))
    return list(unique.values())

