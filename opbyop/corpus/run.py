"""The single-op corpus through the run engine in this process: the selected cases are the unique ops
of one run (opbyop.corpus.ops: the pseudo-model `corpus`), analysed by the engine's local executor (one
warm op worker) and kept by the supplied sink (the store: results queryable by run id, reused across
runs, a run id resumed, like any model's), then counted as coverage (opbyop.corpus.coverage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pydantic import BaseModel, Field

from opbyop.config import AnalysisConfig
from opbyop.corpus.generate import CorpusEntry
from opbyop.corpus.ops import MODEL, CorpusSelection, corpus_records, selected
from opbyop.device.program import emitted_ops
from opbyop.ir.split import SplitResult
from opbyop.pipeline import Prepared
from opbyop.records import OpResult
from opbyop.run.engine import ResultSink, RunOutcome, execute
from opbyop.run.local import LocalExecutor, Progress
from opbyop.run.models import Ready, SplitOutcome
from opbyop.run.plan import RunPlan
from opbyop.workspace import Workspace

ReadProgram = Callable[[str], str]  # artifact sha256 -> text


class CorpusResult(BaseModel):
    """One corpus case's outcome on one chip, with the TTNN ops its compiled program uses."""

    entry: CorpusEntry
    chip: str
    result: OpResult
    ttnn_ops: list[str] = Field(default_factory=list)  # empty when it did not compile


def ttnn_ops_of(result: OpResult, read_program: ReadProgram) -> list[str]:
    """The TTNN ops of the program the op compiled to (none when it did not compile or is gone)."""
    digest = result.compile.artifacts.get("ttnn_runtime") if result.compile else None
    if not digest:
        return []
    try:
        return emitted_ops(read_program(digest))
    except FileNotFoundError:
        return []


def corpus_model(selection: CorpusSelection) -> Ready:
    """The selected cases split into their ops, as one run's one model, ready (no export, no upstream
    values: a case's constant operands stay in its module)."""
    records, _ = corpus_records(selection)
    return Ready([SplitOutcome(MODEL, None, SplitResult(model=MODEL, arguments=[], outputs=[], ops=records), None)])


def corpus_results(selection: CorpusSelection, prepared: Prepared, results: dict[str, OpResult], chip: str,
                   read_program: ReadProgram) -> list[CorpusResult]:
    """Each selected case with its op's result (an occurrence's position is its case's index in the
    selection); a case whose op has no result (it did not split) is left out."""
    entries = [entry for entry, _ in selected(selection)]
    return [CorpusResult(entry=entries[record.position], chip=chip, result=results[record.signature],
                         ttnn_ops=ttnn_ops_of(results[record.signature], read_program))
            for record in prepared.records if record.ok and record.signature in results
            and record.position < len(entries)]


@dataclass
class CorpusOutcome:
    """A corpus run: the engine's outcome and each case's result."""

    outcome: RunOutcome
    cases: list[CorpusResult]


def run_corpus(selection: CorpusSelection, config: AnalysisConfig, workspace: Workspace, sink: ResultSink,
               worker_name: str, progress: Progress | None = None, plan: RunPlan | None = None) -> CorpusOutcome:
    """The selection on `config`'s chip (a selection with a mesh: its multichip cases on that mesh) by
    the run engine, in one warm op worker of this process; results to `sink`."""
    plan = plan or RunPlan.from_config(config.model_copy(update={"models": [], "mesh": selection.mesh or config.mesh,
                                                                 "whole_model": False}))
    outcome = execute(plan, corpus_model(selection), LocalExecutor(workspace, worker_name, progress), sink,
                      workspace=workspace)
    return CorpusOutcome(outcome, corpus_results(selection, outcome.prepared, outcome.results, plan.desc.chip,
                                                 workspace.artifacts.read_text))
