"""The corpus as unique ops of one analysis run: the same fan-out, store and cache as a model's ops.

Each corpus case (one StableHLO op in its own module) is split like a model's module; its op becomes
one occurrence of the pseudo-model `corpus` (position = its index in the selection), so the run's
results are stored, cached and queried like any model's. `shape_variants` adds the element-wise
cases again with other shapes: more unique ops of the same kinds (the scale benchmark's 5k and 20k).
A selection with a `mesh` yields the multichip cases of that mesh shape instead (each collective x
dtype x mesh axis, opbyop.corpus.mesh_catalog), for a run on a board with that mesh.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Iterator

from pydantic import BaseModel, Field

from opbyop.boards import parse_mesh
from opbyop.corpus.case import Case, Form, TType, element_type
from opbyop.corpus.catalog import cases
from opbyop.corpus.generate import CorpusEntry, entries_of
from opbyop.corpus.mesh_catalog import DTYPES as MESH_DTYPES
from opbyop.corpus.mesh_catalog import MeshCase, cases_for, mesh_cases
from opbyop.ir.context import make_context
from opbyop.ir.split import split_module
from opbyop.records import OpRecord

MODEL = "corpus"  # the pseudo-model the corpus's ops belong to in the store


class CorpusSelection(BaseModel):
    """Which corpus cases one run analyses."""

    ops: list[str] = Field(default_factory=list, description="catalog builders; empty: all")
    dtypes: list[str] = Field(default_factory=list, description="element types; empty: all")
    forms: list[str] = Field(default_factory=list, description="args | const; empty: both")
    shape_variants: int = Field(0, ge=0, description="element-wise cases added again with this many other shapes each")
    files: list[str] = Field(default_factory=list, description="case file names (globs, as `opbyop corpus "
                             "generate` writes them); empty: all")
    limit: int | None = Field(None, ge=1, description="at most this many cases (the first ones)")
    mesh: str | None = Field(None, description="ROWSxCOLS: the multichip cases of this mesh shape instead of the "
                                                "single-chip ones (ops name collectives: all_reduce ...)")


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


MESH_DIR = "mesh"  # where a multichip case's file lies beside the single-chip ones
COLLECTIVES = frozenset(c.op for c in cases_for((1, 2), "f32"))  # the multichip catalog's ops


def mesh_entry(case: MeshCase, mesh: str) -> CorpusEntry:
    """The corpus entry of a multichip case on `mesh` (ROWSxCOLS): argument-fed, at its global shape."""
    return CorpusEntry(file=f"{MESH_DIR}/{case.name}.mlir", op=f"stablehlo.{case.op}", variant=case.variant,
                       dtype=case.dtype, form=Form.ARGS, shapes=[list(case.global_in)],
                       tags=["mesh", f"axis={case.axis}"], mesh=mesh)


def mesh_selection(selection: CorpusSelection, mesh: str) -> CorpusSelection:
    """The multichip cases a board's `mesh` runs for `selection`: its collectives, all of them unless the
    selection names some (a corpus's ops name single-chip builders; its boards run every collective)."""
    collectives = [o for o in selection.ops if o.removeprefix("stablehlo.") in COLLECTIVES]
    return selection.model_copy(update={"mesh": mesh, "ops": collectives})


def _mesh_selected(selection: CorpusSelection) -> Iterator[tuple[CorpusEntry, str]]:
    ops = {o.removeprefix("stablehlo.") for o in selection.ops}  # a single-chip builder is not one of its ops
    # the multichip catalog has fewer dtypes than the single-chip one: a nightly's others are not its
    dtypes = [d for d in map(element_type, selection.dtypes) if d in MESH_DTYPES]
    if (selection.dtypes and not dtypes) or (selection.forms and Form.ARGS.value not in selection.forms):
        return
    count = 0
    for case in mesh_cases([parse_mesh(selection.mesh or "")], dtypes or None):
        if ops and case.op not in ops:
            continue
        yield mesh_entry(case, selection.mesh or ""), case.render()
        count += 1
        if selection.limit is not None and count >= selection.limit:
            return


def selected(selection: CorpusSelection) -> Iterator[tuple[CorpusEntry, str]]:
    """(entry, module text) of every selected case and form: the catalog's cases, then each
    element-wise one's shape variants, variant by variant (a mesh's: its multichip cases)."""
    if selection.mesh:
        yield from _mesh_selected(selection)
        return
    # one list of ops serves both catalogs: the collectives are the multichip part's
    ops = [o for o in selection.ops if o.removeprefix("stablehlo.") not in COLLECTIVES]
    if selection.ops and not ops:
        return
    forms = {Form(f) for f in selection.forms}
    base = list(cases(ops or None, selection.dtypes or None))
    seen: set[str] = set()  # a variant's shape replaces each of the case's catalog shapes alike
    for index in range(-1, selection.shape_variants):
        for case in base:
            chosen = case if index < 0 else variant(case, index)
            if chosen is None:
                continue
            for entry, text in entries_of(chosen):
                if (forms and entry.form not in forms) or entry.file in seen or not _named(entry, selection):
                    continue
                seen.add(entry.file)
                yield entry, text
                if selection.limit is not None and len(seen) >= selection.limit:
                    return


def _named(entry: CorpusEntry, selection: CorpusSelection) -> bool:
    return not selection.files or any(fnmatch.fnmatch(entry.file, name) for name in selection.files)


def corpus_records(selection: CorpusSelection) -> tuple[list[OpRecord], dict[str, CorpusEntry]]:
    """The selected cases' ops as occurrences of `corpus` (a case whose module does not split is an
    occurrence with its split error), and each op's corpus entry by signature."""
    records: list[OpRecord] = []
    entries: dict[str, CorpusEntry] = {}
    ctx = make_context()  # one MLIR context for every case: thousands with shape variants
    for position, (entry, text) in enumerate(selected(selection)):
        try:
            split = split_module(text, MODEL, ctx)
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
