"""The single-op corpus as a target of the nightly: which cases it runs, and its coverage read back
from the store (the cases run through the `corpus` flow's fan-out, stored as the model `corpus`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from opbyop.corpus.config import CorpusConfig
from opbyop.corpus.coverage import Coverage, CoverageRow, coverage
from opbyop.corpus.ops import MODEL, CorpusSelection, selected
from opbyop.corpus.run import CorpusResult, ttnn_ops_of
from opbyop_storage.dataset import Store
from opbyop_tasks.store import markdown_rows


@dataclass
class CorpusOutcome:
    """One chip's corpus run in the nightly."""

    chip: str
    run_id: str
    state: str  # the run's Prefect state (Completed, Failed ...), or Error when it could not run
    message: str
    coverage: Coverage | None = None  # None when the run stored nothing


def corpus_selection(config: CorpusConfig) -> CorpusSelection:
    return CorpusSelection(ops=config.ops, dtypes=config.dtypes, forms=config.forms)


def store_coverage(store: Store, run_id: str, selection: CorpusSelection, chip: str,
                   read_program: Callable[[str], str]) -> Coverage:
    """The coverage of a corpus run from its stored ops and results: each occurrence's position is
    its case's index in the selection (opbyop.corpus.ops), which says its dtype, variant and form."""
    entries = [entry for entry, _ in selected(selection)]
    results = {r.signature: r for r in store.results(run_id)}
    rows = []
    for record in store.ops(run_id, MODEL):
        result = results.get(record.signature)
        if result is None or record.position >= len(entries):
            continue
        rows.append(CoverageRow.from_corpus(CorpusResult(entry=entries[record.position], chip=chip, result=result,
                                                         ttnn_ops=ttnn_ops_of(result, read_program))))
    return coverage(rows)


def coverage_markdown(outcomes: list[CorpusOutcome]) -> str:
    """Per chip: TTNN ops emitted and simulated, golden pass rate per dtype, or why its run did not end."""
    parts = ["## Single-op corpus: the simulator's coverage\n"]
    for o in outcomes:
        if o.coverage is None:
            parts.append(f"### {o.chip}: the corpus run `{o.run_id}` stored nothing ({o.state}: {o.message})\n")
            continue
        report = o.coverage
        missing = [op.ttnn_op for op in report.ops if not op.simulated]
        parts.append(f"### {o.chip}: {len(report.ops)} TTNN ops emitted, {len(report.ops) - len(missing)} simulated"
                     + (f" (not simulated: {', '.join(missing)})" if missing else "")
                     + f"; results in run `{o.run_id}` ({o.state})\n")
        rates = [{"dtype": d.dtype, "compiled": d.compiled, "verdicts": d.verdicts,
                  "pass_rate": f"{d.pass_rate:.1%}" if d.pass_rate is not None else "-", "no verdict": d.unreached}
                 for d in report.dtypes]
        parts.append(markdown_rows(["dtype", "compiled", "verdicts", "pass_rate", "no verdict"], rates, 20))
        if o.state != "Completed":
            parts.append(f"- did not complete: {o.message}")
    return "\n".join(parts) + "\n"
