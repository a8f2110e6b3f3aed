"""`opbyop compile`, `opbyop run`, `opbyop repro`, `opbyop system-desc`: the library on a laptop.

Each command builds one AnalysisConfig and hands it to the run engine (opbyop.run) with this
process's warm worker as executor (the Prefect flow in flows/ is the parallel path); a failing op
never stops the others. `run` stores what it shows under a run id when the store's package is
installed, queryable with `opbyop sql`.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter, defaultdict
from contextlib import nullcontext
from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from opbyop.cli.app import (DeviceBackend, DeviceOption, MathFidelity, app, console, cut, fail, full_by_default,
                            input_specs, print_error, status_text, styled)
from opbyop.cli.decode_cmds import run_decode_command
from opbyop.cli.worker_options import (ChipOption, CompilerOption, ExportMemory, ExportTimeout, Fidelity, Fp32Acc,
                                       MeshOption, OptLevel, PassTimingOption, Timeout, UnshardOption, analysis_settings, cli_worker, compiler_named, plan_for,
                                       compiler_options, export_budget, stored_op, worker_errors, worker_name)
from opbyop.boards import DEFAULT_CHIP, chip_help
from opbyop.analysis.accuracy_trace import in_brief
from opbyop.compiler.passes import pass_events
from opbyop.compiler.assets import Notices
from opbyop.compiler.system_desc import resolve
from opbyop.compiler.targets import BOARDS, target_for
from opbyop.config import AnalysisConfig, DeviceOptions, Zoo, load_zoo
from opbyop.device.placement import Policy
from opbyop.errors import OpbyopError
from opbyop.frontends.loader import factory_entry
from opbyop.frontends.specs import factory_name
from opbyop.jaxenv import prepare_jax
from opbyop.messages import message_pattern
from opbyop.pipeline import blocking_ops, depth_histogram, write_manifest
from opbyop.records import OpResult, Stage, Status, WholeModelResult
from opbyop.run.engine import NoSink, RunOutcome, execute
from opbyop.run.local import LocalExecutor
from opbyop.run.models import Splits
from opbyop.run.plan import RunPlan, new_run_id
from opbyop.run.sinks import open_sink, storing
from opbyop.workspace import Workspace

Full = typer.Option(False, "--full", help="print messages whole (they are whole anyway when stdout is not a terminal)")


def _analyze(config: AnalysisConfig, zoo: Zoo, run_id: str | None = None) -> RunOutcome:
    """The run engine with this process's warm worker, the models split in a thread beside it;
    stored under `run_id` when a sink was supplied."""
    compiler = compiler_named(config.compiler_spec)
    # a first use makes the descriptor
    plan = RunPlan.from_config(config, notices=Notices(say=console.print), compiler=compiler)
    prepare_jax(host_devices=plan.host_devices)  # sharded ops' upstream values run on a host mesh here too
    # exports and splits kept from earlier runs are used (reuse_cached only says whether ops' results are)
    models = Splits().ask(config.models, config.seed, config.export, plan.host_devices, zoo, config.keeps_weights)
    workspace = Workspace.default()
    sink = open_sink(run_id) if run_id else nullcontext(NoSink())
    with worker_errors(), sink as into, Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                                 TimeElapsedColumn(), console=console, transient=True) as bar:
        executor = LocalExecutor(workspace, worker_name("cli"), _Bar(bar))
        outcome = execute(plan, models, executor, into, workspace=workspace, keep_modules=run_id is not None)
    for name, error in outcome.prepared.errors.items():
        print_error(f"{name}: {error}")
    if not outcome.prepared.graphs:
        raise OpbyopError(f"no model could be loaded ({len(outcome.prepared.errors)} failed, errors above)",
                          "fix the models named above; `opbyop split MODEL` shows one model's problem alone")
    return outcome


class _Bar:
    """The executor's progress on a rich progress bar."""

    def __init__(self, progress: Progress):
        self.progress, self.task = progress, None

    def begin(self, more: int) -> None:
        if self.task is None:
            self.task = self.progress.add_task("ops", total=more)
        else:
            total = next(t.total for t in self.progress.tasks if t.id == self.task)
            self.progress.update(self.task, total=(total or 0) + more)

    def step(self, description: str) -> None:
        self.progress.update(self.task, description=description)

    def advance(self) -> None:
        self.progress.advance(self.task)


def _with_factories(models: list[str], inputs: list[str]) -> tuple[list[str], Zoo]:
    """The model names and the zoo, with each package.module:factory given explicit input shapes added."""
    try:
        zoo, specs = load_zoo(), input_specs(inputs)
    except OpbyopError as e:
        fail(e)
    if not inputs:
        return models, zoo
    zoo = zoo.model_copy(update={"models": zoo.models + [factory_entry(m, specs) for m in models if ":" in m]})
    return [factory_name(m) if ":" in m else m for m in models], zoo


def _render(prepared, results: dict[str, OpResult], wholes: dict[str, WholeModelResult], full: bool) -> None:
    full = full or full_by_default()
    occurrences = Counter(r.signature for r in prepared.records if r.ok)
    table = Table("op", "occ.", "inputs", "depth", "status", "failed at", "ms", "pcc", "cycles", "message")
    for op in prepared.unique:
        r = results[op.signature]
        table.add_row(op.op_name.replace("stablehlo.", ""), str(occurrences[op.signature]),
                      cut(" ".join(map(str, op.inputs)), 40, full), r.depth.value, status_text(r.status),
                      r.failed_stage.value if r.failed_stage else "", f"{r.seconds * 1000:.0f}",
                      f"{r.golden.pcc:.4f}" if r.golden and r.golden.pcc is not None else "",
                      str(r.device.cycles) if r.device else "", cut(r.message, 60, full))
    console.print(table)

    depth = depth_histogram(prepared.records, results)
    statuses = Counter(results[r.signature].status for r in prepared.records if r.ok)
    summary = Table("depth reached", "ops", title="summary (occurrences)")
    for stage in Stage:
        summary.add_row(stage.value, str(depth.get(stage, 0)))
    console.print(summary)
    line = styled()
    for s, n in statuses.most_common():
        line.append_text(status_text(s, f"{s.value}: {n}  "))
    console.print(line)

    groups: dict[str, list[OpResult]] = defaultdict(list)
    for r in results.values():
        if r.status not in (Status.SUCCESS, Status.SKIPPED):
            groups[f"{r.failed_stage.value if r.failed_stage else '?'}: {message_pattern(r.message)}"].append(r)
    if groups:
        failures = Table("failed at: message pattern", "unique ops", "op kinds", title="failures")
        for key, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            failures.add_row(cut(key, 120, full), str(len(rs)), cut(", ".join(sorted({r.op_name for r in rs})), 60, full))
        console.print(failures)
        blockers = Table("op", "occurrences", "depth", "status", "signature", title="most blocking ops first")
        for r, n in blocking_ops(prepared.records, results)[:15]:
            blockers.add_row(r.op_name, str(n), r.depth.value, status_text(r.status), r.signature[:12])
        console.print(blockers)
    if wholes:
        view = Table("model", "ops", "unique", "whole model", "depth", "pcc vs framework", "cycles", "peak DRAM",
                     "message", title="whole model beside op by op")
        for name, w in wholes.items():
            split = prepared.splits[name]
            view.add_row(name, str(len(split.ops)), str(len({r.signature for r in split.ops})), status_text(w.status),
                         w.depth.value, f"{w.pcc:.5f}" if w.pcc is not None else "",
                         str(w.device.cycles) if w.device else "",
                         f"{w.device.peak_dram_bytes:,}" if w.device else "", cut(w.message, 50, full))
        console.print(view)
    if not full and any(len(r.message or "") > 60 for r in results.values()):
        console.print("messages are cut to fit: --full prints them whole", style="dim")


def _analyze_and_show(config: AnalysisConfig, zoo: Zoo, full: bool, manifest: Path | None = None,
                      store: bool = False) -> None:
    """Analyse, print the tables (and the run id to query when stored); exit 1 when a model failed to load."""
    run_id = new_run_id() if store and storing() else None
    try:
        outcome = _analyze(config, zoo, run_id)
    except OpbyopError as e:
        fail(e)
    prepared, results = outcome.prepared, outcome.results
    _render(prepared, results, outcome.wholes, full)
    print_ttsim_summary(list(results.values()), outcome.wholes)
    if config.pass_timing:
        print_slowest_passes(list(results.values()))
    if manifest is not None:  # unique ops with every model they came from (frontends.dumps, pipeline.manifest)
        try:
            console.print(f"manifest: {write_manifest(prepared, manifest)}")
        except OSError as e:
            fail(OpbyopError(f"cannot write the manifest {manifest}: {e.strerror or e}", "choose a writable --manifest path"))
    if run_id is not None:
        console.print(f"stored as run {run_id}; query it with: opbyop sql \"select * from results "
                      f"where run_id = '{run_id}'\"", soft_wrap=True)
    if prepared.errors:  # the others were analysed and printed; the exit code still tells
        raise typer.Exit(1)


Models = typer.Argument(..., help="zoo names, .mlir/.mlirbc files, package.module:factory")
Whole = typer.Option(True, "--whole/--no-whole", help="also compile (and run) each model whole")
Inputs = typer.Option([], "--input", help="input spec for a factory, e.g. 1x3x32x32xf32 (one per input)")
ManifestOption = typer.Option(None, "--manifest", help="write the unique ops and their origin models here (JSON)")


def print_ttsim_summary(results: list[OpResult], wholes: dict[str, WholeModelResult]) -> None:
    """Where ops ran on ttsim: how each fared there, and how the device model agreed with it."""
    for name, w in wholes.items():
        if w.ttsim is not None:
            pcc = f", pcc {w.ttsim.pcc:.5f} against the {w.reference}" if w.ttsim.pcc is not None else ""
            console.print(f"{name} whole on ttsim: {w.ttsim.outcome.value}{pcc} in {w.ttsim.seconds:.1f} s"
                          + (f": {w.ttsim.message}" if w.ttsim.message else ""))
            for where, trace in (("the model", w.accuracy_trace), ("ttsim", w.ttsim.accuracy_trace)):
                if trace is not None:  # each op's output on that device against XLA:CPU's value
                    console.print(f"  accuracy trace on {where}: {in_brief(trace)}")
    ran = [r.ttsim for r in results if r.ttsim is not None]
    if not ran:
        return
    outcomes = Counter(t.outcome.value for t in ran)
    # a difference says its kind and its largest size against the output's scale (agreement.difference)
    agreements = Counter(t.agreement + (f" ({t.difference})" if t.agreement == "differ" and t.difference else "")
                         for t in ran if t.agreement)
    worst = max((t.max_error for t in ran if t.agreement == "differ" and t.max_error is not None), default=None)
    console.print("ttsim: " + ", ".join(f"{n} {k}" for k, n in outcomes.most_common())
                  + ("; the device model against ttsim: " + ", ".join(f"{n} {k}" for k, n in agreements.most_common())
                     if agreements else "")
                  + (f"; the largest difference {worst:.2g} of its output's scale" if worst is not None else ""))


def print_slowest_passes(results: list[OpResult], top: int = 10) -> None:
    """The compiler passes that took longest over every timed op, with their share of the pass time."""
    totals: Counter[str] = Counter()
    for r in results:
        if r.pass_timing is not None:
            totals.update(r.pass_timing.passes)
    if not totals:
        console.print("no op was timed pass by pass")
        return
    whole = sum(totals.values())
    table = Table("pass", "seconds", "share", title=f"slowest compiler passes over {len(results)} ops")
    for name, seconds in totals.most_common(top):
        table.add_row(name, f"{seconds:.4f}", f"{seconds / whole:.1%}" if whole else "")
    console.print(table)


@app.command()
def compile(models: list[str] = Models, chip: str = ChipOption, optimization_level: int = OptLevel,
            math_fidelity: Optional[MathFidelity] = Fidelity, fp32_dest_acc: Optional[bool] = Fp32Acc,
            whole: bool = Whole, timeout: float = Timeout, input: list[str] = Inputs, seed: int = typer.Option(0),
            full: bool = Full, manifest: Optional[Path] = ManifestOption, mesh: Optional[str] = MeshOption,
            unshard: bool = UnshardOption, pass_timing: bool = PassTimingOption,
            export_memory: Optional[float] = ExportMemory, export_timeout: float = ExportTimeout,
            compiler: str = CompilerOption) -> None:
    """Compile every op through tt-mlir: per-op depth table, failures grouped, most-blocking ops first."""
    names, zoo = _with_factories(models, input)
    config = AnalysisConfig(models=names, chip=chip, compilers=[compiler], compiler=compiler_options(optimization_level, math_fidelity,
                                                                               fp32_dest_acc),
                            seed=seed, whole_model=whole, run_device=False, op_timeout_s=timeout, mesh=mesh,
                            unshard=unshard, pass_timing=1.0 if pass_timing else 0.0, reuse_cached=False,
                            export=export_budget(export_memory, export_timeout))
    _analyze_and_show(config, zoo, full, manifest)


@app.command()
def run(models: list[str] = Models, chip: str = ChipOption, optimization_level: int = OptLevel,
        math_fidelity: Optional[MathFidelity] = Fidelity, fp32_dest_acc: Optional[bool] = Fp32Acc,
        whole: bool = Whole, timeout: float = Timeout, input: list[str] = Inputs, seed: int = typer.Option(0),
        full: bool = Full, manifest: Optional[Path] = ManifestOption,
        harvest_mask: int = typer.Option(0, "--harvest-mask", min=0,
                                         help="harvested Tensix rows, a bit per row (rows 1 and 11: 2050)"),
        policy: Policy = typer.Option(Policy.FEWEST_CYCLES, "--policy", help="how op models are chosen"),
        decode: Optional[int] = typer.Option(None, "--decode", min=1, help="instead: prefill, then N decode steps with "
                                             "the key/value cache on the device (opbyop decode MODEL --steps N)"),
        mesh: Optional[str] = MeshOption, unshard: bool = UnshardOption, pass_timing: bool = PassTimingOption,
        device_backend: DeviceBackend = DeviceOption,
        ttnn_report: bool = typer.Option(False, "--ttnn-report", help="with --device ttsim: keep ttnn's own TT-NN "
                                         "Visualizer report of each op's run (each program runs twice on ttsim); "
                                         "`opbyop visualize --op` opens it beside opbyop's"),
        export_memory: Optional[float] = ExportMemory, export_timeout: float = ExportTimeout,
        compiler: str = CompilerOption) -> None:
    """Compile, run on the simulated device and check against XLA:CPU, for every op."""
    if decode is not None:  # a causal LM's generation loop, not the op-by-op view (opbyop/cli/decode_cmds.py)
        if input or manifest or harvest_mask:
            fail(OpbyopError("--decode takes none of --input, --manifest, --harvest-mask",
                             "drop them, or run without --decode for the op-by-op view"))
        run_decode_command(models, decode, chip=chip, seed=seed, optimization_level=optimization_level,
                           math_fidelity=math_fidelity, fp32_dest_acc=fp32_dest_acc, policy=policy,
                           timeout=max(timeout, 600.0), compiler=compiler)
        return
    names, zoo = _with_factories(models, input)
    if ttnn_report and device_backend is not DeviceBackend.ttsim:
        fail(OpbyopError("--ttnn-report needs --device ttsim", "add --device ttsim: ttnn writes the report of its own run"))
    device = DeviceOptions(harvesting_mask=harvest_mask, placement_policy=policy.value, backend=device_backend.value,
                           ttsim_report=ttnn_report)
    config = AnalysisConfig(models=names, chip=chip, compilers=[compiler], compiler=compiler_options(optimization_level, math_fidelity,
                                                                               fp32_dest_acc),
                            device=device, seed=seed, whole_model=whole, op_timeout_s=timeout, mesh=mesh,
                            unshard=unshard, pass_timing=1.0 if pass_timing else 0.0, reuse_cached=False,
                            export=export_budget(export_memory, export_timeout))
    _analyze_and_show(config, zoo, full, manifest, store=True)


@app.command()
def repro(op: str = typer.Argument(..., help="signature prefix, or model:position"), chip: str = ChipOption,
          optimization_level: int = OptLevel, math_fidelity: Optional[MathFidelity] = Fidelity,
          fp32_dest_acc: Optional[bool] = Fp32Acc, run_device: bool = typer.Option(True, "--run/--compile-only"),
          timeout: float = Timeout,
          passes: bool = typer.Option(False, "--passes", help="compile again with the compiler's IR printing on: "
                                      "every pass in order, the one that failed, the IR it was given"),
          compiler: str = CompilerOption) -> None:
    """Re-compile (and re-run) one stored op: its stages, message and artifact paths."""
    plan = plan_for(chip, compiler)
    workspace, unique = stored_op(op)
    settings = analysis_settings(optimization_level, math_fidelity, fp32_dest_acc, run_device, 0)
    settings = settings.model_copy(update={"failed_pass": False})  # searched below, only when asked
    log = workspace.root / "repro" / f"{unique.signature[:16]}.passes.log"
    with cli_worker(workspace, plan, "repro") as worker:
        result = worker.analyze(unique, settings, timeout)
        if passes:
            result.failed_pass = worker.find_failed_pass(unique, settings, timeout, keep_log=log)
    console.print(styled((unique.op_name, "bold"), " ", unique.signature))
    console.print("from: " + ", ".join(f"{o.model}:{o.position}" for o in unique.occurrences[:10]))
    if unique.provenance.framework_op or unique.provenance.source:
        p = unique.provenance
        console.print(f"framework op: {p.framework_op} in {p.module_path or '-'} at {p.source}")
    stages = Table("stage", "reached", "seconds")
    compiled = result.compile
    for stage in Stage:
        reached = stage.rank <= result.depth.rank
        seconds = compiled.stage_seconds.get(stage) if compiled else None
        stages.add_row(stage.value, "yes" if reached else (styled(("failed", "red")) if stage == result.failed_stage else "-"),
                       f"{seconds:.3f}" if seconds is not None else "")
    console.print(stages)
    console.print(styled("status: ", status_text(result.status)))
    if result.message:
        console.print(f"message: {result.message}")
    if compiled:
        for line in compiled.diagnostics:
            console.print(f"  compiler: {line}")
        for kind, digest in compiled.artifacts.items():
            console.print(f"  {kind}: {workspace.artifacts.path(digest)}")
    if unique.frontend_error is None:  # an op the frontend could not lower has no StableHLO module
        module = workspace.root / "repro" / f"{unique.signature[:16]}.mlir"
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(unique.module_text)
        console.print(f"  module: {module}")
    if passes:
        print_passes(result, log, workspace)
    if result.status not in (Status.SUCCESS, Status.SKIPPED):
        raise typer.Exit(1)


def print_passes(result: OpResult, log: Path, workspace) -> None:
    """The compiler's passes in the order they started, the failing one marked, and where to read more."""
    found = result.failed_pass
    started = [e for e in pass_events(log.read_text().splitlines()) if e.when == "Before"] if log.exists() else []
    table = Table("#", "pass", "class", "on")
    for i, event in enumerate(started, 1):
        mark = found is not None and found.position == i
        table.add_row(str(i), styled((event.argument, "red bold")) if mark else event.argument, event.name, event.anchor)
    console.print(table)
    if found is None or found.argument is None:
        console.print(f"failed pass: none ({found.reason if found else 'not searched'})")
    else:
        console.print(f"failed pass: {found.argument} ({found.name}, {found.outcome.value}) at position "
                      f"{found.position} of {found.passes_started}; last pass that succeeded: {found.last_succeeded}")
        if found.ir_before:
            console.print(f"  IR before it: {workspace.artifacts.path(found.ir_before)}")
    console.print(f"  verbose log: {log}")


@app.command("system-desc")
def system_desc(chip: str = typer.Argument(DEFAULT_CHIP, help=f"{chip_help()} to validate"),
                out: Optional[Path] = typer.Option(None, "--out", help="copy the descriptor here"),
                compiler: str = CompilerOption) -> None:
    """Produce (the plugin's mock mode, or derived by opbyop), provide (vendored) or validate a system descriptor."""
    started = time.monotonic()
    build = compiler_named(compiler)
    try:
        desc = resolve(chip, notices=Notices(say=console.print), compiler=build)
    except OpbyopError as e:
        fail(e)

    console.print(f"{desc.chip}: {desc.path} ({desc.source}, schema {desc.schema_hash[:16]}..., "
                  f"sha256 {desc.sha256[:16]}...) in {time.monotonic() - started:.1f} s")
    if chip in BOARDS:
        board, target = BOARDS[chip], target_for(chip)
        console.print(f"{board.chips} chip(s), meshes {', '.join(f'{r}x{c}' for r, c in board.meshes)}, "
                      f"topology {target.topology.value}")
    if out is not None:
        try:
            shutil.copyfile(desc.path, out)
        except OSError as e:
            fail(OpbyopError(f"cannot write {out}: {e.strerror or e}", "choose a writable path for --out"))
        console.print(f"written to {out}")
