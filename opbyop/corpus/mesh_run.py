"""The multichip part of the corpus target: each collective x dtype x mesh shape x mesh axis of
opbyop.corpus.mesh_catalog, compiled for a board that has that mesh, run on its mesh of simulated
chips, and compared with XLA:CPU running the same sharded module on as many host devices.

A board (`p300`, `p150x4` ...) runs the catalog's cases of every mesh shape it can be used as (or
the one its name says, `p150x8:1x8`), all in one warm worker whose JAX has one host device per chip.
Results go where the single-chip corpus's go, under the board's name, so one coverage report counts
both parts.
"""

from __future__ import annotations

import os
from pathlib import Path

from opbyop.compiler.builds import Compiler
from opbyop.compiler.system_desc import resolve
from opbyop.compiler.targets import BOARDS, Target, target_for
from opbyop.config import AnalysisSettings, CompilerOptions, load_thresholds
from opbyop.corpus.case import Form
from opbyop.corpus.generate import CorpusEntry
from opbyop.corpus.mesh_catalog import MESH_SHAPES, generate_mesh
from opbyop.corpus.ops import MESH_DIR
from opbyop.corpus.run import RunSummary, pending, run_entries
from opbyop.errors import OpbyopError
from opbyop.worker.process import OpWorker
from opbyop.workspace import Workspace


def board_targets(board: str) -> list[Target]:
    """The mesh targets `board` runs: `NAME:ROWSxCOLS` one, a bare name every shape of the catalog it allows."""
    name, _, shape = board.partition(":")
    if name not in BOARDS or BOARDS[name].chips < 2:
        meshes = ", ".join(n for n, b in BOARDS.items() if b.chips > 1)
        raise OpbyopError(f"{name!r} is not a board of several chips", f"name one of {meshes} in the corpus's meshes")
    if shape:
        return [target_for(name, shape)]
    return [target_for(name, f"{r}x{c}") for r, c in BOARDS[name].meshes if (r, c) in MESH_SHAPES]


def mesh_entries(directory: Path, target: Target, dtypes: list[str] | None = None) -> list[CorpusEntry]:
    """Write the cases of `target`'s mesh into `directory`/mesh; their corpus entries."""
    written = generate_mesh(Path(directory) / MESH_DIR, [target.mesh], dtypes or None)
    return [CorpusEntry(file=f"{MESH_DIR}/{e.file}", op=e.op, variant=e.variant, dtype=e.dtype, form=Form.ARGS,
                        shapes=[e.global_shape], tags=["mesh", f"axis={e.axis}"], mesh=target.mesh_text)
            for e in written]


def run_board(directory: Path, board: str, out: Path, options: CompilerOptions, timeout: float, seed: int,
              workspace: Workspace, dtypes: list[str] | None = None, compiler: Compiler | None = None) -> RunSummary:
    """Every multichip case of `board` through one warm worker; results appended to `out`."""
    targets = board_targets(board)
    work = [(t, e) for t in targets for e in mesh_entries(directory, t, dtypes)]
    name = board.partition(":")[0]
    todo = pending(out, name, [e for _, e in work])
    if not todo:
        return RunSummary(skipped=len(work))
    desc = resolve(name, compiler=compiler)
    chips = BOARDS[name].chips
    base = AnalysisSettings(options=options, thresholds=load_thresholds(), seed=seed)
    settings = {t.mesh_text: base.model_copy(update={"mesh": t.mesh_text, "topology": t.topology.value})
                for t in targets}
    summary = RunSummary()
    # golden runs the sharded module on XLA:CPU with one host device per chip: JAX must be told at start
    with OpWorker(desc.path, workspace.root, chip=name, name=f"corpus-mesh-{os.getpid()}",
                  host_devices=chips, compiler=compiler) as worker:
        for target in targets:
            entries = [e for t, e in work if t is target]
            done = run_entries(directory, entries, out, name,
                               lambda u, s=settings[target.mesh_text]: worker.analyze(u, s, timeout),
                               workspace.artifacts.read_text)
            summary.analysed += done.analysed
            summary.skipped += done.skipped
    return summary

