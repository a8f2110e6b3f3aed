"""`opbyop corpus generate|run|nightly`: the single-op corpus, run through the run engine and stored
like any run, and the simulator's coverage of the TTNN ops the compiler emits, with golden pass rates
per TTNN op and dtype (`opbyop coverage --run`, the store's command, prints it for a stored run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from opbyop.cli.app import DeviceBackend, DeviceOption, app, console, fail
from opbyop.cli.worker_options import ChipOption, CompilerOption, compiler_named, worker_name
from opbyop.compiler.assets import Notices
from opbyop.config import AnalysisConfig, CompilerOptions, DeviceOptions
from opbyop.corpus.case import element_type
from opbyop.corpus.catalog import BUILDERS
from opbyop.corpus.config import load_corpus_config
from opbyop.corpus.coverage import CoverageRow, coverage
from opbyop.corpus.generate import generate
from opbyop.corpus.nightly import run_nightly
from opbyop.corpus.ops import CorpusSelection, selected
from opbyop.corpus.run import run_corpus
from opbyop.device.program import emitted_ops
from opbyop.errors import OpbyopError
from opbyop.jaxenv import prepare_jax
from opbyop.records import Status, TtsimOutcome, legacy_status
from opbyop.run.plan import RunPlan, new_run_id
from opbyop.run.sinks import open_sink, storing
from opbyop.workspace import Workspace

corpus = typer.Typer(help="The single-op StableHLO corpus (ops x dtypes x shapes x forms).", no_args_is_help=True)
app.add_typer(corpus, name="corpus")

OpFilter = typer.Option([], "--op", help="StableHLO op (add, reduce ...) or catalog builder; repeatable")
DtypeFilter = typer.Option([], "--dtype", help="f32, bf16, i64, complex64 ...; repeatable")


@corpus.command("generate")
def generate_cmd(out: Path = typer.Argument(..., help="directory to write the .mlir files and corpus.json into"),
                 op: list[str] = OpFilter, dtype: list[str] = DtypeFilter) -> None:
    """Write the corpus (reproducible: the same files every time)."""
    dtypes = [element_type(d) for d in dtype]
    unknown = [o for o in op if o not in BUILDERS]
    if unknown:
        fail(OpbyopError(f"no corpus builder named {', '.join(unknown)}", f"use one of: {', '.join(BUILDERS)}"))
    try:
        manifest = generate(out, op or None, dtypes or None)
    except OpbyopError as e:
        fail(e)
    console.print(Text(f"wrote {len(manifest.entries)} modules to {out}"))


@corpus.command("run")
def run_cmd(chip: str = ChipOption, op: list[str] = OpFilter, dtype: list[str] = DtypeFilter,
            form: list[str] = typer.Option([], "--form", help="args | const"),
            file: list[str] = typer.Option([], "--file", help="case file name glob (as `corpus generate` names "
                                           "them); repeatable"),
            limit: Optional[int] = typer.Option(None, "--limit", min=1, help="at most this many cases (the first)"),
            mesh: Optional[str] = typer.Option(None, "--mesh", help="ROWSxCOLS: the multichip cases of this mesh "
                                               "shape on --chip's board instead of the single-chip ones"),
            timeout: float = typer.Option(120.0, "--timeout", help="seconds per op"),
            math_fidelity: Optional[str] = typer.Option(None, "--math-fidelity", help="lofi | hifi2 | hifi3 | hifi4"),
            fp32_dest_acc: Optional[bool] = typer.Option(None, "--fp32-dest-acc/--no-fp32-dest-acc"),
            seed: int = typer.Option(0), device_backend: DeviceBackend = DeviceOption,
            compiler: str = CompilerOption,
            run_id: Optional[str] = typer.Option(None, "--run-id", help="resume or replace this run"),
            failures: bool = typer.Option(False, "--failures", help="also list every case short of a pass"),
            fmt: str = typer.Option("table", "--format", "-f", help="table | json")) -> None:
    """The selected corpus cases (compile, device, golden) as one run in one warm worker: stored like any
    run (results analysed before for the same compiler, chip and options are reused), then the coverage."""
    selection = CorpusSelection(ops=op, dtypes=[element_type(d) for d in dtype], forms=form, files=file, limit=limit,
                                mesh=mesh)
    if next(selected(selection), None) is None:
        fail(OpbyopError("no corpus case matches the filters", "check --op, --dtype, --form and --file (opbyop "
                         "corpus generate DIR writes every case, corpus.json names them)"))
    try:
        options = CompilerOptions(math_fidelity=math_fidelity, fp32_dest_acc_en=fp32_dest_acc)
    except ValueError as e:
        fail(OpbyopError(f"invalid compiler option: {e}", "use --math-fidelity lofi|hifi2|hifi3|hifi4"))
    prepare_jax()
    config = AnalysisConfig(models=[], chip=chip, compilers=[compiler], compiler=options, mesh=mesh, seed=seed,
                            op_timeout_s=timeout, whole_model=False, device=DeviceOptions(backend=device_backend.value))
    run_id = run_id or new_run_id()
    try:
        plan = RunPlan.from_config(config, notices=Notices(say=console.print), compiler=compiler_named(compiler))
        with open_sink(run_id) as sink:
            done = run_corpus(selection, config, Workspace.default(), sink, worker_name("corpus"), plan=plan)
    except OpbyopError as e:
        fail(e)
    report = coverage(CoverageRow.from_corpus(r) for r in done.cases)
    print_coverage(report, failures, fmt)
    if fmt != "json":
        console.print(Text(analysed_line(done.outcome)))
        if storing():
            console.print(Text(f"stored as run {run_id}; its coverage again: opbyop coverage --run {run_id}"))


@corpus.command("nightly")
def nightly_cmd(config: Optional[Path] = typer.Option(None, "--config", help="default: configs/corpus.yaml"),
                seed: int = typer.Option(0),
                compiler: Optional[str] = typer.Option(None, "--compiler", help="the compiler build under test, in "
                                                       "place of the configuration's compiler_build")) -> None:
    """The corpus as a nightly target: every chip and board mesh of the configuration one run each, its coverage."""
    prepare_jax()
    try:
        settings = load_corpus_config(config)
        if compiler is not None:
            settings = settings.model_copy(update={"compiler_build": compiler})
        chips = run_nightly(settings, Workspace.default(), seed, say=lambda line: console.print(Text(line)))
    except OpbyopError as e:
        fail(e)
    for chip in chips:
        console.print(Text(f"{chip.chip} (run {chip.run_id})", style="bold"))
        print_coverage(chip.coverage)


def analysed_line(outcome) -> str:  # noqa: ANN001  (opbyop.run.engine.RunOutcome)
    """How many unique ops a run analysed now, took from earlier runs, or found in its own run id."""
    reused = sum(1 for r in outcome.results.values() if r.reused_from)
    return (f"{len(outcome.prepared.unique)} unique ops: {len(outcome.results) - outcome.known} analysed, {reused} "
            f"reused from earlier runs, {outcome.known - reused} already in this run")


def print_coverage(report, failures: bool = False, fmt: str = "table") -> None:  # noqa: ANN001  (corpus.coverage.Coverage)
    """The coverage tables (TTNN ops, dtypes, ttsim), or the report as JSON."""
    if fmt == "json":
        sys.stdout.write(json.dumps(_as_json(report), indent=1) + "\n")
        return
    out = _console()
    out.print(_ops_table(report))
    out.print(_dtype_table(report))
    _print_ttsim(out, report)
    if failures:
        out.print(_failures_table(report))


def coverage_rows(programs: list[dict]) -> list[CoverageRow]:
    """Coverage rows of storage/sql/ttnn_programs.sql's records (a stored run), each program read from
    the workspace's artifact store."""
    artifacts = Workspace.default().artifacts
    out = []
    for row in programs:
        try:
            ttnn = emitted_ops(artifacts.read_text(row["ttnn_runtime"])) if row.get("ttnn_runtime") else []
        except FileNotFoundError:
            ttnn = []
        ttsim = row.get("ttsim_outcome")
        out.append(CoverageRow(label=row["signature"], op=row["op_name"], dtype=row.get("dtype") or "",
                               status=legacy_status(row["status"], row.get("message")), message=row.get("message"),
                               ttnn_ops=tuple(ttnn), chip=row.get("chip") or "", narrowing=row.get("narrowing"),
                               ttsim=TtsimOutcome(ttsim) if ttsim else None, ttsim_op=row.get("ttsim_op"),
                               ttsim_message=row.get("ttsim_message")))
    return out


def _console() -> Console:
    """Tables stay whole when stdout is not a terminal (no wrapping to 80 columns)."""
    return console if console.is_terminal else Console(width=400)


def _rate(passes: int, total: int) -> str:
    return f"{passes}/{total}" if total else ""


def _ops_table(report) -> Table:
    dtypes = report.dtype_names
    seen = [o for o in report.ops if o.programs]
    title = (f"TTNN ops emitted: {len(seen)}, simulated {sum(o.simulated for o in seen)} "
             f"({100 * report.simulated_share:.0f}%); golden passes / device verdicts per dtype")
    table = Table("TTNN op", "programs", "simulated", "not simulated runs", "pass rate", *[escape(d) for d in dtypes],
                  title=title)
    for o in report.ops:
        rate = o.pass_rate
        table.add_row(Text(o.ttnn_op), str(o.programs), "yes" if o.simulated else Text("NO", style="red"),
                      str(o.not_simulated_runs or ""), f"{100 * rate:.0f}%" if rate is not None else "",
                      *[_rate(o.passes[d], o.verdicts[d]) for d in dtypes])
    return table


def _dtype_table(report) -> Table:
    table = Table("dtype", "ops", "compiled", "device verdicts", "passed", "pass rate", "golden_failed",
                  "run_failed", "not_simulated", "analyzer_error", title="per dtype (StableHLO ops)")
    for d in report.dtypes:
        s = d.statuses
        rate = d.pass_rate
        table.add_row(Text(d.dtype), str(sum(s.values())), str(d.compiled), str(d.verdicts), str(s[Status.SUCCESS]),
                      f"{100 * rate:.1f}%" if rate is not None else "", str(s[Status.GOLDEN_FAILED]),
                      str(s[Status.RUN_FAILED]), str(s[Status.NOT_SIMULATED]), str(s[Status.ANALYZER_ERROR]))
    return table


TTSIM_STOPS = [o for o in TtsimOutcome if o is not TtsimOutcome.RAN]


def _print_ttsim(out: Console, report) -> None:
    """How the programs fared on ttsim, per TTNN op, and every way they stopped there (only for
    results run with `--device ttsim`)."""
    if report.on_ttsim:
        out.print(_ttsim_table(report))
        out.print(_ttsim_stops_table(report))


def _ttsim_table(report) -> Table:
    rows = report.on_ttsim
    ran = sum(r.ttsim is TtsimOutcome.RAN for r in rows)
    title = (f"on ttsim: {ran} of {len(rows)} programs ran; per TTNN op, the programs using it that ran "
             "and those stopped at it")
    table = Table("TTNN op", "ran", *[o.value for o in TTSIM_STOPS], title=title)
    for o in sorted((o for o in report.ops if o.ttsim), key=lambda o: (-sum(o.ttsim.values()), o.ttnn_op)):
        table.add_row(Text(o.ttnn_op), str(o.ttsim[TtsimOutcome.RAN] or ""), *[str(o.ttsim[s] or "") for s in TTSIM_STOPS])
    return table


def _ttsim_stops_table(report) -> Table:
    table = Table("outcome", "TTNN op", "programs", "message", title="ttsim's limits and tt-metal's rejections met")
    for outcome, op, message, n in report.ttsim_stops():
        table.add_row(outcome.value, Text(op), str(n), Text(" ".join(message.split())[:300]))
    return table


def _failures_table(report) -> Table:
    table = Table("status", "op", "variant", "dtype", "form", "chip", "file / signature", "message",
                  title="ops short of a pass after compiling")
    for r in report.failures():
        table.add_row(r.status.value, *(Text(v) for v in (r.op, r.variant, r.dtype, r.form, r.chip, r.label)),
                      Text((r.message or "")[:160]))
    return table


def _as_json(report) -> dict:
    return {
        "ops": [{"ttnn_op": o.ttnn_op, "programs": o.programs, "simulated": o.simulated,
                 "not_simulated_runs": o.not_simulated_runs, "pass_rate": o.pass_rate,
                 "per_dtype": {d: {"passes": o.passes[d], "verdicts": o.verdicts[d]} for d in o.verdicts},
                 "ttsim": {k.value: n for k, n in o.ttsim.items()}}
                for o in report.ops],
        "ttsim_stops": [{"outcome": o.value, "ttnn_op": op, "message": m, "programs": n}
                        for o, op, m, n in report.ttsim_stops()],
        "dtypes": [{"dtype": d.dtype, "ops": sum(d.statuses.values()), "compiled": d.compiled, "verdicts": d.verdicts,
                    "pass_rate": d.pass_rate, "statuses": {s.value: n for s, n in d.statuses.items()}}
                   for d in report.dtypes],
        "failures": [{"status": r.status.value, "op": r.op, "variant": r.variant, "dtype": r.dtype, "form": r.form,
                      "chip": r.chip, "label": r.label, "message": r.message} for r in report.failures()],
    }
