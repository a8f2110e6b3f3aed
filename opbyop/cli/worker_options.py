"""The options and the warm compiler worker that the one-op and one-model commands share (compile, run,
repro, decode, shrink, image)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import typer

from opbyop.cli.app import MathFidelity, console, fail, positive_seconds
from opbyop.compiler.assets import Notices
from opbyop.boards import DEFAULT_CHIP, chip_help, mesh_help
from opbyop.compiler.builds import Compiler, prepare
from opbyop.compiler_spec import SPEC_FORMS
from opbyop.config import AnalysisConfig, AnalysisSettings, CompilerOptions, DeviceOptions, ExportBudget, load_thresholds
from opbyop.errors import OpbyopError
from opbyop.run.plan import RunPlan
from opbyop.worker.process import OpWorker, WorkerStartError
from opbyop.workspace import Workspace

ChipOption = typer.Option(DEFAULT_CHIP, "--chip", help=chip_help())
CompilerOption = typer.Option("installed", "--compiler", help=f"the compiler build under test: {SPEC_FORMS}")
MeshOption = typer.Option(None, "--mesh", help=mesh_help())
UnshardOption = typer.Option(False, "--unshard", help="analyse a sharded model on a single chip with its "
                                                        "shardings removed (noted on the model); otherwise an error")
PassTimingOption = typer.Option(False, "--pass-timing", help="compile every analysed op again with MLIR pass "
                                "timing: each pass's time (ops reused from the cache are not timed: add --no-reuse)")
OptLevel = typer.Option(0, "--optimization-level", min=0, max=2)
Fidelity = typer.Option(None, "--math-fidelity", case_sensitive=False, help="the compute kernels' math fidelity")
Fp32Acc = typer.Option(None, "--fp32-dest-acc/--no-fp32-dest-acc")
Timeout = typer.Option(120.0, "--timeout", callback=positive_seconds, help="seconds per op (above 0)")
ExportMemory = typer.Option(None, "--export-memory", min=0.1, help="GB one model's export may hold (its child "
                            "process and theirs); past it, that model's error or its op's frontend_failed "
                            "(default: half of the machine's memory)")
ExportTimeout = typer.Option(900.0, "--export-timeout", callback=positive_seconds,
                             help="seconds one model's export may take, bisection included (above 0)")


def export_budget(memory_gb: float | None, timeout_s: float) -> ExportBudget:
    """The export budget of --export-memory and --export-timeout."""
    budget = ExportBudget(timeout_s=timeout_s)
    return budget if memory_gb is None else budget.model_copy(update={"memory_bytes": int(memory_gb * 1e9)})


def worker_name(kind: str) -> str:
    """A worker name no other process uses: its scratch and $TMPDIR are its own, so any number of
    commands may share one OPBYOP_HOME (two `cli` workers once deleted each other's descriptor)."""
    return f"{kind}-{os.getpid()}"


@contextmanager
def worker_errors() -> Iterator[None]:
    """A compiler worker that cannot start becomes an OpbyopError naming the descriptor to check."""
    try:
        yield
    except WorkerStartError as e:
        first = str(e).strip().splitlines()
        raise OpbyopError(f"the compiler worker could not start: {' | '.join(first[-3:])}",
                          "check the chip's descriptor with `opbyop system-desc CHIP` (the worker's log is in "
                          "OPBYOP_HOME/logs)") from None


def plan_for(chip: str, compiler: str, mesh: str | None = None) -> RunPlan:
    """The run plan of a one-op or one-model command (repro, shrink, decode, image build): its chip and
    compiler build, as a run's (what a first use makes is said); fails with the fix."""
    build = compiler_named(compiler)
    try:
        return RunPlan.from_config(AnalysisConfig(models=[], chip=chip, compilers=[compiler], mesh=mesh),
                                   notices=Notices(say=console.print), compiler=build)
    except OpbyopError as e:
        fail(e)


def compiler_named(spec: str) -> Compiler:
    """The compiler build `spec` names, prepared (what a first preparation does is said); fails with the fix."""
    try:
        compiler = prepare(spec, Notices(say=console.print))
    except OpbyopError as e:
        fail(e)
    if spec != "installed":
        console.print(f"compiler: {compiler.label}" + ("" if compiler.in_process else
                                                      f", compiling in its own environment (jax {compiler.identity.jax})"))
    return compiler


def stored_op(op: str):
    """(workspace, the stored op) for a command on one stored op; fails with the fix."""
    workspace = Workspace.default()
    try:
        return workspace, workspace.ops.get(op)
    except (KeyError, ValueError) as e:
        fail(OpbyopError(str(e).strip("'\""), "run `opbyop compile MODEL` first, or check the signature"))


@contextmanager
def cli_worker(workspace, plan: RunPlan, kind: str) -> Iterator[OpWorker]:
    """One warm op worker of this command's plan (its own name and scratch); failures to start fail
    the command."""
    try:
        with worker_errors(), plan.op_worker(workspace.root, worker_name(kind)) as worker:
            yield worker
    except OpbyopError as e:
        fail(e)


def analysis_settings(optimization_level: int, math_fidelity: MathFidelity | str | None, fp32: bool | None,
                      run_device: bool, seed: int, device: DeviceOptions | None = None) -> AnalysisSettings:
    return AnalysisSettings(options=compiler_options(optimization_level, math_fidelity, fp32), thresholds=load_thresholds(), seed=seed, run_device=run_device,
                            run_golden=run_device, device=device or DeviceOptions())


def compiler_options(optimization_level: int, math_fidelity: MathFidelity | str | None,
                     fp32: bool | None) -> CompilerOptions:
    """The compile options the --optimization-level, --math-fidelity and --fp32-dest-acc options name."""
    fidelity = math_fidelity.value if isinstance(math_fidelity, MathFidelity) else math_fidelity
    return CompilerOptions(optimization_level=optimization_level, math_fidelity=fidelity, fp32_dest_acc_en=fp32)
