"""The corpus as a nightly target on the command line (`opbyop corpus nightly`): every chip of the
corpus configuration, and each mesh of its multichip boards, one run each through the run engine
(opbyop.corpus.run), stored like any run and counted as coverage. The nightly flow runs the same
selections on the cluster (configs/nightly.yaml's `corpus` block). Results already stored for the
same compiler build, chip and options are reused: a night interrupted halfway resumes where it stopped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from opbyop.config import AnalysisConfig
from opbyop.corpus.config import CorpusConfig
from opbyop.corpus.coverage import Coverage, CoverageRow, coverage
from opbyop.corpus.mesh_run import board_targets
from opbyop.corpus.ops import CorpusSelection, mesh_selection
from opbyop.corpus.run import run_corpus
from opbyop.run.plan import new_run_id
from opbyop.run.sinks import open_sink
from opbyop.workspace import Workspace

Say = Callable[[str], None]


@dataclass
class ChipCoverage:
    chip: str  # the chip, or a board and its mesh ("p300 1x2")
    run_id: str
    coverage: Coverage
    errors: list[str] = field(default_factory=list)  # what could not run (a descriptor, a worker, a board)


def selection_of(settings: CorpusConfig) -> CorpusSelection:
    """The corpus configuration's cases."""
    return CorpusSelection(ops=settings.ops, dtypes=settings.dtypes, forms=settings.forms)


def config_of(settings: CorpusConfig, chip: str, seed: int) -> AnalysisConfig:
    """The analysis a corpus run on `chip` is (reuse on: a second night analyses only what is new)."""
    return AnalysisConfig(models=[], chip=chip, compilers=[settings.compiler_build], compiler=settings.compiler,
                          op_timeout_s=settings.op_timeout_s, seed=seed, whole_model=False)


def run_nightly(settings: CorpusConfig, workspace: Workspace, seed: int = 0,
                say: Say = lambda line: None) -> list[ChipCoverage]:
    """The whole corpus on every chip of `settings`, then on every mesh of its boards; one that cannot
    run never stops the others."""
    night = new_run_id()  # a night's runs are new runs: what an earlier night analysed is reused
    base = selection_of(settings)
    targets = [(chip, chip, base) for chip in settings.chips]
    for board in settings.meshes:
        try:
            targets += [(t.chip, f"{t.chip} {t.mesh_text}", mesh_selection(base, t.mesh_text))
                        for t in board_targets(board)]
        except Exception as e:  # noqa: BLE001  (a board the configuration misnames: said, the rest go on)
            say(f"{board}: {e}")
    outcome = []
    for i, (chip, title, selection) in enumerate(targets):
        run_id = f"corpus-{night}-{i}"
        try:
            with open_sink(run_id) as sink:
                done = run_corpus(selection, config_of(settings, chip, seed), workspace, sink,
                                  f"corpus-{os.getpid()}")
        except Exception as e:  # noqa: BLE001  (reported, and the next target goes on)
            say(f"{title}: {type(e).__name__}: {e}")
            outcome.append(ChipCoverage(chip=title, run_id=run_id, coverage=coverage([]), errors=[str(e)]))
            continue
        reused = sum(1 for r in done.outcome.results.values() if r.reused_from)
        say(f"{title}: {len(done.outcome.prepared.unique)} unique ops, {reused} reused from earlier runs "
            f"(run {run_id})")
        outcome.append(ChipCoverage(chip=title, run_id=run_id,
                                    coverage=coverage(CoverageRow.from_corpus(r) for r in done.cases)))
    return outcome
