"""Single ops for the ttsim tests: a corpus module by its file name, a module's one op split, the
TTNN op kinds its compiled program holds, a program run once on ttsim."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from opbyop.corpus.catalog import cases
from opbyop.corpus.generate import entries_of
from opbyop.device.program import Program, load_program
from opbyop.device.ttsim.backend import TtsimBackend, TtsimResult
from opbyop.pipeline import prepare
from opbyop.records import OpResult, UniqueOp
from opbyop.workspace import Workspace


def corpus(file: str) -> str:
    """A module of the single-op corpus, by its file name."""
    dtype = file.split("-")[-3]  # op[-variant]-dtype-shape-form.mlir
    (text,) = [t for case in cases(dtypes=[dtype]) for entry, t in entries_of(case) if entry.file == file]
    return text


def only_op(tmp_path: Path, workspace: Workspace, text: str, name: str = "op.mlir") -> UniqueOp:
    """The module's one op that is not a constant."""
    path = tmp_path / name
    path.write_text(text)
    run = prepare([str(path)], artifacts=workspace.artifacts)
    assert not run.errors
    (op,) = [u for u in run.unique if u.op_name != "stablehlo.constant"]
    return op


def kinds_of(workspace: Workspace, result: OpResult) -> set[str]:
    """The TTNN op kinds of the op's compiled program, every function included."""
    program = load_program(workspace.artifacts.read_text(result.compile.artifacts["ttnn_runtime"]))
    return {op.name for function in program.functions.values() for op in function.ops}


def run_on_ttsim(workspace_root: Path, scratch: Path, program: Program, inputs: list[np.ndarray]) -> TtsimResult:
    """The program run once on ttsim by a backend of its own, closed after."""
    backend = TtsimBackend(workspace_root, scratch)
    try:
        return backend.run(program, inputs, timeout=600)
    finally:
        backend.close()
