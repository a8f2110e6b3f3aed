"""The single-op corpus as a task of the nightly (opbyop.corpus.nightly), its coverage as markdown."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from opbyop.corpus.config import load_corpus_config
from opbyop.corpus.nightly import ChipCoverage, run_nightly
from opbyop.workspace import Workspace
from tasks.store import markdown_rows


@task(name="corpus", cache_policy=NONE, persist_result=False)
def run_corpus(config_file: Path | None, seed: int = 0) -> list[ChipCoverage]:
    """Every corpus module on every chip of the corpus configuration (resumable: done ones are kept)."""
    logger = get_run_logger()
    return run_nightly(load_corpus_config(config_file), Workspace.default(), seed, say=logger.info)


def coverage_markdown(chips: list[ChipCoverage]) -> str:
    """Per chip: TTNN ops emitted and simulated, golden pass rate per dtype, chunks that could not run."""
    parts = ["## Single-op corpus: the simulator's coverage\n"]
    for c in chips:
        report = c.coverage
        missing = [o.ttnn_op for o in report.ops if not o.simulated]
        parts.append(f"### {c.chip}: {len(report.ops)} TTNN ops emitted, {len(report.ops) - len(missing)} simulated"
                     + (f" (not simulated: {', '.join(missing)})" if missing else "") + f"; results in `{c.results}`\n")
        rates = [{"dtype": d.dtype, "compiled": d.compiled, "verdicts": d.verdicts,
                  "pass_rate": f"{d.pass_rate:.1%}" if d.pass_rate is not None else "-", "no verdict": d.unreached}
                 for d in report.dtypes]
        parts.append(markdown_rows(["dtype", "compiled", "verdicts", "pass_rate", "no verdict"], rates, 20))
        parts += [f"- could not run: {e}" for e in c.errors]
    return "\n".join(parts) + "\n"
