"""The corpus as a nightly target: generate it, run every chip one dtype chunk at a time (a fresh
warm worker per chunk), and the coverage of what the compiler emitted. Used by `opbyop corpus
nightly` and by the nightly flow (configs/nightly.yaml's `corpus` block)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from opbyop.compiler.builds import Compiler, prepare
from opbyop.compiler.system_desc import resolve
from opbyop.config import AnalysisSettings, CompilerOptions, DeviceOptions, load_thresholds
from opbyop.corpus.case import element_type
from opbyop.corpus.catalog import ALL_DTYPES
from opbyop.corpus.config import CorpusConfig
from opbyop.corpus.coverage import Coverage, CoverageRow, coverage
from opbyop.corpus.generate import generate
from opbyop.corpus.mesh_catalog import DTYPES as MESH_DTYPES
from opbyop.corpus.mesh_run import run_board
from opbyop.corpus.run import RunSummary, pending, read_results, run_entries, select
from opbyop.errors import OpbyopError
from opbyop.worker.process import OpWorker
from opbyop.workspace import Workspace

Say = Callable[[str], None]


@dataclass
class ChipCoverage:
    chip: str
    results: Path  # results.jsonl lives here
    coverage: Coverage
    errors: list[str] = field(default_factory=list)  # chunks that could not run (descriptor, worker)


def run_chunk(directory: Path, entries: list, out: Path, chip: str, options: CompilerOptions, timeout: float,
              seed: int, workspace: Workspace, device: DeviceOptions = DeviceOptions(),
              compiler: Compiler | None = None) -> RunSummary:
    """Entries through one warm worker compiling with `compiler` (default: the installed plugin); results
    appended to `out` (entries already there are skipped)."""
    desc = resolve(chip, compiler=compiler)
    todo = pending(out, desc.chip, entries)
    if not todo:  # all done: no worker to start
        return RunSummary(skipped=len(entries))
    settings = AnalysisSettings(options=options, thresholds=load_thresholds(), seed=seed, device=device)
    with OpWorker(desc.path, workspace.root, chip=desc.chip, name=f"corpus-{os.getpid()}", compiler=compiler) as worker:
        return run_entries(directory, entries, out, desc.chip, lambda u: worker.analyze(u, settings, timeout),
                           workspace.artifacts.read_text)


def results_dir(workspace: Workspace, chip: str, options: CompilerOptions, compiler: Compiler) -> Path:
    """Where a night's results for `chip` go: one directory per compiler build and options, so a new
    build (or new options) is run anew while a night interrupted halfway resumes."""
    name = f"{compiler.identity.package or 'build'}-{compiler.identity.version or 'unknown'}-{compiler.key}"
    return workspace.root / "corpus-results" / Path(chip).stem / f"{name}-{options.key()}"


def run_nightly(settings: CorpusConfig, workspace: Workspace, seed: int = 0,
                say: Say = lambda line: None) -> list[ChipCoverage]:
    """The whole corpus on every chip of `settings`; a chunk that cannot start never stops the others."""
    directory = workspace.root / "corpus"
    wanted = [element_type(d) for d in settings.dtypes]
    manifest = generate(directory, settings.ops or None, wanted or None)
    chunks = [d for d in ALL_DTYPES if not wanted or d in wanted]
    compiler = prepare(settings.compiler_build)
    outcome = []
    for chip in settings.chips:
        out = results_dir(workspace, chip, settings.compiler, compiler)
        errors = []
        for dtype in chunks:
            entries = select(manifest.entries, dtypes=[dtype], forms=settings.forms or None)
            if not entries:
                continue
            try:
                summary = run_chunk(directory, entries, out, chip, settings.compiler, settings.op_timeout_s, seed,
                                    workspace, compiler=compiler)
            except Exception as e:  # noqa: BLE001  (reported, and the next chunk goes on)
                errors.append(f"{chip} {dtype}: {type(e).__name__}: {e}")
                say(errors[-1])
                continue
            say(f"{chip} {dtype}: {summary.analysed} analysed, {summary.skipped} already done")
        report = coverage(CoverageRow.from_corpus(r) for r in read_results(out))
        outcome.append(ChipCoverage(chip=chip, results=out, coverage=report, errors=errors))
    for board in settings.meshes:
        outcome.append(run_mesh_board(directory, board, settings, workspace, seed, say, compiler))
    return outcome


def run_mesh_board(directory: Path, board: str, settings: CorpusConfig, workspace: Workspace, seed: int,
                   say: Say, compiler: Compiler) -> ChipCoverage:
    """The multichip cases of one board (opbyop.corpus.mesh_run); a board that cannot start is reported."""
    name = board.partition(":")[0]
    out = results_dir(workspace, name, settings.compiler, compiler)
    errors = []
    wanted = [d for d in map(element_type, settings.dtypes) if d in MESH_DTYPES]
    try:
        if settings.dtypes and not wanted:
            raise OpbyopError(f"the multichip corpus has none of the dtypes {', '.join(settings.dtypes)}",
                              f"add one of {', '.join(MESH_DTYPES)} to the corpus's dtypes")
        summary = run_board(directory, board, out, settings.compiler, settings.op_timeout_s, seed, workspace,
                            wanted or None, compiler)
        say(f"{board} (multichip): {summary.analysed} analysed, {summary.skipped} already done")
    except Exception as e:  # noqa: BLE001  (reported, and the next board goes on)
        errors.append(f"{board}: {type(e).__name__}: {e}")
        say(errors[-1])
    rows = [CoverageRow.from_corpus(r) for r in read_results(out)] if (out / "results.jsonl").exists() else []
    return ChipCoverage(chip=name, results=out, coverage=coverage(rows), errors=errors)
