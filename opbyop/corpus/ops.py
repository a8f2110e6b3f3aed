"""The corpus as unique ops of one analysis run: the same fan-out, store and cache as a model's ops.

Each corpus case (one StableHLO op in its own module) is split like a model's module; its op becomes
one occurrence of the pseudo-model `corpus` (position = its index in the selection), so the run's
results are stored, cached and queried like any model's. `shape_variants` adds the element-wise
cases again with other shapes: more unique ops of the same kinds (the scale benchmark's 5k and 20k).
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

from pydantic import BaseModel, Field

from opbyop.corpus.case import Case, Form, TType
from opbyop.corpus.catalog import cases
from opbyop.corpus.generate import CorpusEntry, entries_of
from opbyop.ir.split import split_module
from opbyop.records import OpRecord

MODEL = "corpus"  # the pseudo-model the corpus's ops belong to in the store


class CorpusSelection(BaseModel):
    """Which corpus cases one run analyses."""

    ops: list[str] = Field(default_factory=list, description="catalog builders; empty: all")
    dtypes: list[str] = Field(default_factory=list, description="element types; empty: all")
    forms: list[str] = Field(default_factory=list, description="args | const; empty: both")
    shape_variants: int = Field(0, ge=0, description="element-wise cases added again with this many other shapes each")
    limit: int | None = Field(None, ge=1, description="at most this many cases (the first ones)")


def variant(case: Case, index: int) -> Case | None:
    """The element-wise `case` with its one shape replaced by the `index`-th other shape ((index+4)x24:
    never one of the catalog's own); None for a case whose operands and results differ in shape or
    whose attributes or regions depend on it."""
    shapes = {o.type.shape for o in case.operands} | {r.shape for r in case.results} | {
        c.type.shape for c in case.captures}
    if len(shapes) != 1 or case.attrs or case.regions:
        return None
    shape = (index + 4, 24)
    return dataclasses.replace(
        case, operands=tuple(dataclasses.replace(o, type=TType(shape, o.type.dtype)) for o in case.operands),
        results=tuple(TType(shape, r.dtype) for r in case.results))


def selected(selection: CorpusSelection) -> Iterator[tuple[CorpusEntry, str]]:
    """(entry, module text) of every selected case and form: the catalog's cases, then each
    element-wise one's shape variants, variant by variant."""
    forms = {Form(f) for f in selection.forms}
    base = list(cases(selection.ops or None, selection.dtypes or None))
    seen: set[str] = set()  # a variant's shape replaces each of the case's catalog shapes alike
    for index in range(-1, selection.shape_variants):
        for case in base:
            chosen = case if index < 0 else variant(case, index)
            if chosen is None:
                continue
            for entry, text in entries_of(chosen):
                if (forms and entry.form not in forms) or entry.file in seen:
                    continue
                seen.add(entry.file)
                yield entry, text
                if selection.limit is not None and len(seen) >= selection.limit:
                    return


def corpus_records(selection: CorpusSelection) -> tuple[list[OpRecord], dict[str, CorpusEntry]]:
    """The selected cases' ops as occurrences of `corpus` (a case whose module does not split is an
    occurrence with its split error), and each op's corpus entry by signature."""
    records: list[OpRecord] = []
    entries: dict[str, CorpusEntry] = {}
    for position, (entry, text) in enumerate(selected(selection)):
        try:
            split = split_module(text, MODEL)
            mine = [r for r in split.ops if r.op_name == entry.op]
            record = mine[-1] if mine else None
            error = None if record is not None else f"no {entry.op} in {entry.file}"
        except Exception as e:  # a case the splitter refuses is that case's failure, not the run's
            record, error = None, f"{entry.file} did not split: {type(e).__name__}: {e}"
        if record is None:
            records.append(OpRecord(model=MODEL, position=position, op_name=entry.op, split_error=error))
            continue
        records.append(record.model_copy(update={"position": position}))
        if record.ok:
            entries.setdefault(record.signature, entry)
    return records, entries
