"""Run corpus files through the real pipeline (split, tt-mlir, simulated device, XLA:CPU golden).

One warm OpWorker analyses the files one after another; each result is appended to
`<out>/results.jsonl` as soon as it exists, so a run stopped half way loses nothing and a second
run over the same directory only analyses what is missing (run the corpus in chunks).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from pydantic import BaseModel, Field

from opbyop.corpus.case import DTYPE_NAMES
from opbyop.corpus.generate import CorpusEntry
from opbyop.device.program import emitted_ops
from opbyop.errors import OpbyopError
from opbyop.ir.dedupe import dedupe
from opbyop.ir.split import split_module
from opbyop.records import OpResult, Stage, Status, UniqueOp
from opbyop.stage_call import StageCall

RESULTS = "results.jsonl"


class CorpusResult(BaseModel):
    """One corpus file's outcome on one chip, with the TTNN ops its compiled program uses."""

    entry: CorpusEntry
    chip: str
    result: OpResult
    ttnn_ops: list[str] = Field(default_factory=list)  # empty when it did not compile


def results_path(out: Path) -> Path:
    return Path(out) / RESULTS


def read_results(out: Path) -> list[CorpusResult]:
    """Every result in `out` (the last one per file and chip wins: a re-run replaces)."""
    path = results_path(out)
    if not path.exists():
        raise OpbyopError(f"{out} holds no {RESULTS}", "run the corpus first: `opbyop corpus run CORPUS --out DIR`")
    latest: dict[tuple[str, str], CorpusResult] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = CorpusResult.model_validate_json(line)
        except ValueError as e:  # a line cut short by a kill: the rest still counts
            if number == len(path.read_text().splitlines()):
                continue
            raise OpbyopError(f"{path}:{number} is not a corpus result: {e}", "delete that line and re-run") from None
        latest[(r.entry.file, r.chip)] = r
    return list(latest.values())


def unique_op(directory: Path, entry: CorpusEntry) -> UniqueOp:
    """The corpus file's own op (its constants are split off as ops of their own, not analysed)."""
    text = (Path(directory) / entry.file).read_text()
    split = split_module(text, Path(entry.file).stem)
    # a multichip case's collective sits in its shard_map body: the body's own op, or the whole body
    records = [r for r in split.ops if r.op_name == entry.op] or \
        [r for r in split.ops if entry.mesh and r.op_name == "sdy.manual_computation"]
    if not records or not records[-1].ok:
        reason = records[-1].split_error if records else f"no {entry.op} in the module"
        raise OpbyopError(f"{entry.file} did not split: {reason}", "regenerate the corpus")
    return dedupe(records[-1:])[0]


@dataclass
class RunSummary:
    analysed: int = 0
    skipped: int = 0  # already in results.jsonl


Analyse = Callable[[UniqueOp], OpResult]
ReadProgram = Callable[[str], str]  # artifact sha256 -> text


def pending(out: Path, chip: str, entries: Iterable[CorpusEntry]) -> list[CorpusEntry]:
    """The entries `out` holds no result for on `chip` (what a resumed run still has to do)."""
    done = {(r.entry.file, r.chip) for r in read_results(out)} if results_path(out).exists() else set()
    return [e for e in entries if (e.file, chip) not in done]


def run_entries(directory: Path, entries: Iterable[CorpusEntry], out: Path, chip: str, analyse: Analyse,
                read_program: ReadProgram, progress: Callable[[CorpusEntry], None] = lambda e: None) -> RunSummary:
    """Analyse each entry not yet in `out` for `chip`; append each result as it arrives."""
    out.mkdir(parents=True, exist_ok=True)
    done = {(r.entry.file, r.chip) for r in read_results(out)} if results_path(out).exists() else set()
    summary = RunSummary()
    with open(results_path(out), "a") as sink:
        for entry in entries:
            progress(entry)
            if (entry.file, chip) in done:
                summary.skipped += 1
                continue
            read = StageCall.of(lambda: unique_op(directory, entry), Stage.SPLIT, catch=(OpbyopError,))
            result = (analyse(read.value) if read.ok else
                      OpResult.failure("", entry.op, Status.ANALYZER_ERROR, str(read.error), failed_stage=Stage.SPLIT))
            ttnn = ttnn_ops_of(result, read_program)
            line = CorpusResult(entry=entry, chip=chip, result=result, ttnn_ops=ttnn)
            sink.write(line.model_dump_json() + "\n")
            sink.flush()
            summary.analysed += 1
    return summary


def ttnn_ops_of(result: OpResult, read_program: ReadProgram) -> list[str]:
    """The TTNN ops of the program the op compiled to (none when it did not compile or is gone)."""
    digest = result.compile.artifacts.get("ttnn_runtime") if result.compile else None
    if not digest:
        return []
    try:
        return emitted_ops(read_program(digest))
    except FileNotFoundError:
        return []


def select(entries: Iterable[CorpusEntry], ops: list[str] | None = None, dtypes: list[str] | None = None,
           forms: list[str] | None = None, names: list[str] | None = None) -> list[CorpusEntry]:
    """Entries matching every given filter (ops without the dialect prefix; names as file globs)."""
    from fnmatch import fnmatch

    wanted_ops = {o if o.startswith("stablehlo.") else f"stablehlo.{o}" for o in ops or []}
    return [e for e in entries
            if (not wanted_ops or e.op in wanted_ops) and (not dtypes or e.dtype in dtypes or _dtype_name(e) in dtypes)
            and (not forms or e.form.value in forms) and (not names or any(fnmatch(e.file, n) for n in names))]


def _dtype_name(entry: CorpusEntry) -> str:
    return DTYPE_NAMES.get(entry.dtype, entry.dtype)
