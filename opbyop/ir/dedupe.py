"""Occurrences across every model of a run -> unique ops, keeping the full many-to-many mapping."""

from __future__ import annotations

from typing import Iterable

from opbyop.records import Occurrence, OpRecord, UniqueOp


class Deduper:
    """Unique ops by signature as models arrive, first-seen order; each keeps every (model, position)
    it came from. A sharded op's signature covers its mesh and shardings (they are in its module's
    text): the same op sharded differently, or on another mesh, is another unique op."""

    def __init__(self) -> None:
        self.unique: dict[str, UniqueOp] = {}

    def add(self, records: Iterable[OpRecord]) -> list[UniqueOp]:
        """The ops of `records` not seen before (an op seen before gets these occurrences too)."""
        new = []
        for r in records:
            if not r.ok:
                continue
            op = self.unique.get(r.signature)
            if op is None:
                op = self.unique[r.signature] = UniqueOp(
                    signature=r.signature, op_name=r.op_name, module_text=r.module_text or "",
                    attributes=r.attributes, inputs=r.inputs, outputs=r.outputs, operands=r.operands,
                    provenance=r.provenance, occurrences=[], mesh=r.mesh, operand_shardings=r.operand_shardings,
                    result_shardings=r.result_shardings, frontend_error=r.frontend_error)
                new.append(op)
            op.occurrences.append(Occurrence(model=r.model, position=r.position))
        return new

    def replace(self, ops: Iterable[UniqueOp]) -> None:
        """Ops already seen, each in its place by a lighter copy of itself (Prepared.settle)."""
        for op in ops:
            self.unique[op.signature] = op


def dedupe(records: Iterable[OpRecord]) -> list[UniqueOp]:
    """Unique ops by signature, first-seen order, each with every (model, position) it came from."""
    return Deduper().add(records)
