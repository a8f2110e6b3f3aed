"""`opbyop compile`, `opbyop run`, `opbyop repro`, `opbyop system-desc`: the library on a laptop.

One warm worker process analyses the unique ops one after another (the Prefect flow in flows/ is
the parallel path); a failing op never stops the others.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from opbyop.cli.app import app, console, fail, input_specs
from opbyop.errors import OpbyopError
from opbyop.messages import normalize_message
from opbyop.records import OpResult, Stage, Status, WholeModelResult

STATUS_STYLE = {Status.SUCCESS: "green", Status.SKIPPED: "cyan", Status.GOLDEN_FAILED: "yellow",
                Status.RUN_FAILED: "magenta", Status.COMPILE_FAILED: "red", Status.CRASHED: "bold red",
                Status.TIMEOUT: "bold red"}

ChipOption = typer.Option("p150", "--chip", help="p150, p100, n150, or a .ttsys path")
OptLevel = typer.Option(0, "--optimization-level", min=0, max=2)
Fidelity = typer.Option(None, "--math-fidelity", help="lofi | hifi2 | hifi3 | hifi4")
Fp32Acc = typer.Option(None, "--fp32-dest-acc/--no-fp32-dest-acc")
Timeout = typer.Option(120.0, "--timeout", help="seconds per op")


def _settings(optimization_level: int, math_fidelity: str | None, fp32: bool | None, run_device: bool, seed: int):
    from opbyop.config import CompilerOptions, load_thresholds
    from opbyop.worker.protocol import AnalysisSettings

    options = CompilerOptions(optimization_level=optimization_level, math_fidelity=math_fidelity, fp32_dest_acc_en=fp32)
    return AnalysisSettings(options=options, thresholds=load_thresholds(), seed=seed, run_device=run_device,
                            run_golden=run_device)


def _analyze(models: list[str], chip: str, settings, whole: bool, timeout: float, inputs: list[str]):
    from opbyop.jaxenv import prepare_jax

    prepare_jax()
    from opbyop.compiler.system_desc import resolve
    from opbyop.config import load_zoo
    from opbyop.pipeline import prepare
    from opbyop.worker.process import OpWorker
    from opbyop.workspace import Workspace

    desc = resolve(chip)
    zoo = load_zoo()
    if inputs:  # a user factory with explicit input shapes
        from opbyop.config import ZooEntry

        zoo = zoo.model_copy(update={"models": zoo.models + [
            ZooEntry(name=m.replace(":", ".").lower(), frontend="torch", factory=m, inputs=input_specs(inputs))
            for m in models if ":" in m]})
        models = [m.replace(":", ".").lower() if ":" in m else m for m in models]
    prepared = prepare(models, zoo, settings.seed)
    for name, error in prepared.errors.items():
        console.print(f"[red]{name}: {error}[/red]", highlight=False)
    workspace = Workspace.default()
    for op in prepared.unique:
        workspace.ops.put(op)
    results: dict[str, OpResult] = {}
    wholes: dict[str, WholeModelResult] = {}
    with OpWorker(desc.path, workspace.root, chip=desc.chip, name="cli") as worker, Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=True) as progress:
        task = progress.add_task("ops", total=len(prepared.unique))
        for op in prepared.unique:
            progress.update(task, description=op.op_name)
            results[op.signature] = worker.analyze(op, settings, timeout)
            progress.advance(task)
        if whole:
            for name, graph in prepared.graphs.items():
                progress.update(task, description=f"{name} (whole model)")
                wholes[name] = worker.analyze_whole(graph, settings, timeout=max(timeout, 600.0))
    return prepared, results, wholes, desc


def _render(prepared, results: dict[str, OpResult], wholes: dict[str, WholeModelResult]) -> None:
    from opbyop.pipeline import blocking_ops, depth_histogram

    occurrences = Counter(r.signature for r in prepared.records if r.ok)
    table = Table("op", "occ.", "inputs", "depth", "status", "failed at", "ms", "pcc", "cycles", "message")
    for op in prepared.unique:
        r = results[op.signature]
        style = STATUS_STYLE.get(r.status, "")
        table.add_row(op.op_name.replace("stablehlo.", ""), str(occurrences[op.signature]),
                      " ".join(map(str, op.inputs))[:40], r.depth.value, f"[{style}]{r.status.value}[/{style}]",
                      r.failed_stage.value if r.failed_stage else "", f"{r.seconds * 1000:.0f}",
                      f"{r.golden.pcc:.4f}" if r.golden and r.golden.pcc is not None else "",
                      str(r.device.cycles) if r.device else "", (r.message or "")[:60])
    console.print(table)

    depth = depth_histogram(prepared.records, results)
    statuses = Counter(results[r.signature].status for r in prepared.records if r.ok)
    summary = Table("depth reached", "ops", title="summary (occurrences)")
    for stage in Stage:
        summary.add_row(stage.value, str(depth.get(stage, 0)))
    console.print(summary)
    console.print("  ".join(f"[{STATUS_STYLE.get(s, '')}]{s.value}: {n}[/]" for s, n in statuses.most_common()))

    groups: dict[str, list[OpResult]] = defaultdict(list)
    for r in results.values():
        if r.status not in (Status.SUCCESS, Status.SKIPPED):
            groups[f"{r.failed_stage.value if r.failed_stage else '?'}: {normalize_message(r.message)}"].append(r)
    if groups:
        failures = Table("failed at: message (normalised)", "unique ops", "op kinds", title="failures")
        for key, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            failures.add_row(key[:120], str(len(rs)), ", ".join(sorted({r.op_name for r in rs}))[:60])
        console.print(failures)
        blockers = Table("op", "occurrences", "depth", "status", "signature", title="most blocking ops first")
        for r, n in blocking_ops(prepared.records, results)[:15]:
            blockers.add_row(r.op_name, str(n), r.depth.value, r.status.value, r.signature[:12])
        console.print(blockers)
    if wholes:
        view = Table("model", "ops", "unique", "whole model", "depth", "pcc vs framework", "cycles", "peak DRAM",
                     "message", title="whole model beside op by op")
        for name, w in wholes.items():
            split = prepared.splits[name]
            view.add_row(name, str(len(split.ops)), str(len({r.signature for r in split.ops})),
                         f"[{STATUS_STYLE.get(w.status, '')}]{w.status.value}[/]", w.depth.value,
                         f"{w.pcc:.5f}" if w.pcc is not None else "", str(w.device.cycles) if w.device else "",
                         f"{w.device.peak_dram_bytes:,}" if w.device else "", (w.message or "")[:50])
        console.print(view)


def _compile_or_run(models: list[str], chip: str, optimization_level: int, math_fidelity: str | None,
                    fp32_dest_acc: bool | None, whole: bool, timeout: float, inputs: list[str], seed: int,
                    run_device: bool) -> None:
    try:
        settings = _settings(optimization_level, math_fidelity, fp32_dest_acc, run_device, seed)
        prepared, results, wholes, _ = _analyze(models, chip, settings, whole, timeout, inputs)
    except OpbyopError as e:
        fail(e)
    _render(prepared, results, wholes)


Models = typer.Argument(..., help="zoo names, .mlir/.mlirbc files, package.module:factory")
Whole = typer.Option(True, "--whole/--no-whole", help="also compile (and run) each model whole")
Inputs = typer.Option([], "--input", help="input spec for a factory, e.g. 1x3x32x32xf32")


@app.command()
def compile(models: list[str] = Models, chip: str = ChipOption, optimization_level: int = OptLevel,
            math_fidelity: Optional[str] = Fidelity, fp32_dest_acc: Optional[bool] = Fp32Acc, whole: bool = Whole,
            timeout: float = Timeout, input: list[str] = Inputs, seed: int = typer.Option(0)) -> None:
    """Compile every op through tt-mlir: per-op depth table, failures grouped, most-blocking ops first."""
    _compile_or_run(models, chip, optimization_level, math_fidelity, fp32_dest_acc, whole, timeout, input, seed,
                    run_device=False)


@app.command()
def run(models: list[str] = Models, chip: str = ChipOption, optimization_level: int = OptLevel,
        math_fidelity: Optional[str] = Fidelity, fp32_dest_acc: Optional[bool] = Fp32Acc, whole: bool = Whole,
        timeout: float = Timeout, input: list[str] = Inputs, seed: int = typer.Option(0)) -> None:
    """Compile, run on the simulated device and check against XLA:CPU, for every op."""
    _compile_or_run(models, chip, optimization_level, math_fidelity, fp32_dest_acc, whole, timeout, input, seed,
                    run_device=True)


@app.command()
def repro(op: str = typer.Argument(..., help="signature prefix, or model:position"), chip: str = ChipOption,
          optimization_level: int = OptLevel, math_fidelity: Optional[str] = Fidelity,
          fp32_dest_acc: Optional[bool] = Fp32Acc, run_device: bool = typer.Option(True, "--run/--compile-only"),
          timeout: float = Timeout) -> None:
    """Re-compile (and re-run) one stored op: its stages, message and artifact paths."""
    from opbyop.compiler.system_desc import resolve
    from opbyop.worker.process import OpWorker
    from opbyop.workspace import Workspace

    workspace = Workspace.default()
    try:
        unique = workspace.ops.get(op)
        desc = resolve(chip)
    except KeyError as e:
        fail(OpbyopError(str(e).strip("'\""), "run `opbyop compile MODEL` first, or check the signature"))
    except OpbyopError as e:
        fail(e)
    settings = _settings(optimization_level, math_fidelity, fp32_dest_acc, run_device, 0)
    with OpWorker(desc.path, workspace.root, chip=desc.chip, name="repro") as worker:
        result = worker.analyze(unique, settings, timeout)
    console.print(f"[bold]{unique.op_name}[/bold] {unique.signature}")
    console.print("from: " + ", ".join(f"{o.model}:{o.position}" for o in unique.occurrences[:10]))
    if unique.provenance.framework_op or unique.provenance.source:
        p = unique.provenance
        console.print(f"framework op: {p.framework_op} in {p.module_path or '-'} at {p.source}")
    stages = Table("stage", "reached", "seconds")
    compiled = result.compile
    for stage in Stage:
        reached = stage.rank <= result.depth.rank
        seconds = compiled.stage_seconds.get(stage) if compiled else None
        stages.add_row(stage.value, "yes" if reached else ("[red]failed[/red]" if stage == result.failed_stage else "-"),
                       f"{seconds:.3f}" if seconds is not None else "")
    console.print(stages)
    style = STATUS_STYLE.get(result.status, "")
    console.print(f"status: [{style}]{result.status.value}[/]")
    if result.message:
        console.print(f"message: {result.message}", highlight=False)
    if compiled:
        for line in compiled.diagnostics:
            console.print(f"  compiler: {line}", highlight=False)
        for kind, digest in compiled.artifacts.items():
            console.print(f"  {kind}: {workspace.artifacts.path(digest)}")
    module = workspace.root / "repro" / f"{unique.signature[:16]}.mlir"
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text(unique.module_text)
    console.print(f"  module: {module}")
    if result.status not in (Status.SUCCESS, Status.SKIPPED):
        raise typer.Exit(1)


@app.command("system-desc")
def system_desc(chip: str = typer.Argument("p150", help="p150, p100, n150, or a .ttsys path to validate"),
                out: Optional[Path] = typer.Option(None, "--out", help="copy the descriptor here")) -> None:
    """Produce (Blackhole, from the plugin's mock mode), provide (n150) or validate a system descriptor."""
    import shutil

    from opbyop.compiler.system_desc import resolve

    try:
        desc = resolve(chip)
    except OpbyopError as e:
        fail(e)
    console.print(f"{desc.chip}: {desc.path} ({desc.source}, schema {desc.schema_hash[:16]}..., sha256 {desc.sha256[:16]}...)")
    if out is not None:
        shutil.copyfile(desc.path, out)
        console.print(f"written to {out}")
