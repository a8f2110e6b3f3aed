"""Write the corpus: one .mlir file per (case, form), and a manifest saying what each file is.

Reproducible: the same catalog writes byte-identical files (constant values are drawn from a seed
derived from the file's name). Every module is parsed and verified with jaxlib's MLIR before it is
written, so a file that reaches the compiler is valid StableHLO.
"""

from __future__ import annotations

from pathlib import Path

from jaxlib.mlir import ir
from pydantic import BaseModel

from opbyop import atomic
from opbyop.corpus.case import Case, Form, render
from opbyop.corpus.catalog import cases
from opbyop.errors import OpbyopError
from opbyop.ir.context import make_context

MANIFEST = "corpus.json"


class CorpusEntry(BaseModel):
    """What one corpus file exercises."""

    file: str
    op: str  # stablehlo.<op>
    variant: str
    dtype: str
    form: Form
    shapes: list[list[int]]  # of the operands
    tags: list[str] = []
    mesh: str | None = None  # a multichip case's mesh (ROWSxCOLS); None: one chip


class Manifest(BaseModel):
    entries: list[CorpusEntry]

    def by_file(self) -> dict[str, CorpusEntry]:
        return {e.file: e for e in self.entries}


def entries_of(case: Case) -> list[tuple[CorpusEntry, str]]:
    out = []
    for form in case.forms:
        name = case.name(form) + ".mlir"
        entry = CorpusEntry(file=name, op=f"stablehlo.{case.op}", variant=case.variant, dtype=case.dtype, form=form,
                            shapes=[list(o.type.shape) for o in case.operands], tags=list(case.tags))
        out.append((entry, render(case, form)))
    return out


def generate(out: Path, ops: list[str] | None = None, dtypes: list[str] | None = None,
             forms: list[Form] | None = None) -> Manifest:
    """Write the selected cases into `out` (created); returns the manifest (also written)."""
    out.mkdir(parents=True, exist_ok=True)
    ctx = make_context()
    entries: list[CorpusEntry] = []
    for case in cases(ops, dtypes):
        for entry, text in entries_of(case):
            if forms and entry.form not in forms:
                continue
            _verify(text, entry.file, ctx)
            _write(out / entry.file, text)
            entries.append(entry)
    if not entries:
        raise OpbyopError("the selection names no corpus case", "check --op and --dtype against `opbyop corpus list`")
    manifest = Manifest(entries=entries)
    _write(out / MANIFEST, manifest.model_dump_json(indent=1))
    return manifest


def load_manifest(directory: Path) -> Manifest:
    path = Path(directory) / MANIFEST
    if not path.exists():
        raise OpbyopError(f"{directory} has no {MANIFEST}", "write the corpus with `opbyop corpus generate DIR` first")
    return Manifest.model_validate_json(path.read_text())


def _verify(text: str, name: str, ctx: ir.Context) -> None:
    try:
        module = ir.Module.parse(text, ctx)
        module.operation.verify()
    except ir.MLIRError as e:
        raise OpbyopError(f"corpus case {name} is not valid StableHLO: {e}",
                          "fix its builder in opbyop/corpus/catalog.py") from None


def _write(path: Path, text: str) -> None:
    """Atomic, and untouched when the content is the same (reproducible trees keep their mtimes)."""
    if path.exists() and path.read_text() == text:
        return
    atomic.write_text(path, text)
