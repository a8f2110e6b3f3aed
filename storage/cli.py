"""The store's commands, added to `opbyop` through the `opbyop.cli` entry point:
sql, query, runs, report, compare, capacity, coverage, catalog, expectations update/check, export optest."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from opbyop.cli.app import make_console, positive_seconds, print_error, styled
from opbyop.cli.coverage_cmds import coverage_rows, print_coverage
from opbyop.corpus.coverage import coverage
from opbyop.errors import OpbyopError
from opbyop.run.capacity import EXPORT
from opbyop.run.sinks import supply_sink
from opbyop_storage.aggregate import previous_run_id, run_query
from opbyop_storage.capacity import CapacityPlan, capacity_plan
from opbyop_storage.catalog import build_catalog
from opbyop_storage.compare import compare_group, compare_runs
from opbyop_storage.dataset import Store
from opbyop_storage.expectations import (compare, default_path, from_outcomes, load_expectations, run_outcomes,
                                  save_expectations)
from opbyop_storage.exports.explorer import Metric, export_node_data
from opbyop_storage.files import SkippedFile, default_root
from opbyop_storage.location import StoreRoot, parse_root
from opbyop_storage.exports.optest import export_optest
from opbyop_storage.exports.perf_csv import export_perf
from opbyop_storage.exports.visualizer import MEMORY_FOLDER, PERFORMANCE_FOLDER, TTNN_FOLDER, export_visualizer
from opbyop_storage.exports.visualizer_server import serve as serve_visualizer
from opbyop_storage.queries import get_query, load_queries
from opbyop_storage.readonly import DEFAULT_TIMEOUT_S, QueryInterrupted, StoreConnection, run_sql
from opbyop_storage.exports.report import write_report
from opbyop_storage.run_sink import store_sink

console = make_console()  # data printed literally; a pipe gets whole lines
err_console = make_console(stderr=True)

STORE_HELP = ("store root, a directory or s3://bucket/prefix (default: $OPBYOP_STORE, else $OPBYOP_HOME/store "
              "(default ./.opbyop/store))")
FORMATS = ("table", "csv", "json")


def _fail(error: OpbyopError, code: int = 2) -> None:
    print_error(error)
    raise typer.Exit(code)


def _root(store: Optional[Path]) -> StoreRoot:
    """--store as given (typer's Path folds an s3:// URL's '//': parse_root restores it), else the default."""
    return parse_root(store) if store is not None else default_root()


def _check_run(store: Optional[Path], run: str) -> None:
    """A clear error for a run id that is not there, or whose files cannot all be read (rather than
    an empty or partial answer that looks like a real one)."""
    Store(_root(store)).check_readable(run)


def _model(store: Store, run: str, model: str | None) -> str | None:
    """--model as the run recorded it, whichever form was typed (None: every model)."""
    return None if model is None else store.model_named(run, model)


def _warn_skipped(skipped: list[SkippedFile]) -> None:
    if skipped:
        err_console.print(styled(("warning: ", "yellow"), f"{len(skipped)} unreadable file(s) skipped:"))
        for s in skipped:
            err_console.print(f"  {s}", soft_wrap=True)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    return str(value)


def print_rows(columns: list[str], rows: list[tuple[Any, ...]], fmt: str, title: str | None = None) -> None:
    if fmt not in FORMATS:
        _fail(OpbyopError(f"unknown format {fmt!r}", f"use one of {', '.join(FORMATS)}"))
    if fmt == "json":
        sys.stdout.write(json.dumps([dict(zip(columns, r)) for r in rows], default=str, indent=1) + "\n")
    elif fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")  # a shell reads its lines (csv.writer writes \r\n)
        writer.writerow(columns)
        writer.writerows([[_cell(v) for v in r] for r in rows])
    else:
        table = Table(*columns, title=title)
        for r in rows:
            table.add_row(*(_cell(v) for v in r))
        console.print(table)
        console.print(f"{len(rows)} row(s)", style="dim")


def _timeout_option() -> Any:
    return typer.Option(DEFAULT_TIMEOUT_S, "--timeout", callback=positive_seconds,
                        help="seconds before the query is stopped (Ctrl-C stops it too)")


MEMORY_HELP = "DuckDB's memory limit, e.g. 2GB (default: half the machine's memory)"


def _query_failed(e: OpbyopError) -> None:
    _fail(e, 130 if isinstance(e, QueryInterrupted) else 2)


def sql(query: str = typer.Argument(..., help='a read-only query, e.g. "SELECT * FROM runs"'),
        fmt: str = typer.Option("table", "--format", "-f", help="table | csv | json"),
        store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
        timeout: float = _timeout_option(),
        memory_limit: Optional[str] = typer.Option(None, "--memory-limit", help=MEMORY_HELP)) -> None:
    """Run a read-only SQL query over the store (views: runs, ops, results, models, occurrences, stages, statuses)."""
    try:
        result = run_sql(query, _root(store), timeout=timeout, memory_limit=memory_limit)
    except OpbyopError as e:
        _query_failed(e)
    _warn_skipped(result.skipped)
    print_rows(result.columns, result.rows, fmt)


def query(name: Optional[str] = typer.Argument(None, help="a named aggregation from storage/sql (see --list)"),
          run: Optional[str] = typer.Option(None, "--run", help="run id"),
          previous: Optional[str] = typer.Option(None, "--previous", help="previous run id (default: the last "
                                                 "completed run of the same chip and options)"),
          n: int = typer.Option(30, "--n", min=1, help="number of runs for trends and pass rates"),
          limit: int = typer.Option(50, "--limit", min=0),
          group: Optional[str] = typer.Option(None, "--group", help="a group of runs (one per compiler build)"),
          fmt: str = typer.Option("table", "--format", "-f", help="table | csv | json"),
          store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
          list_queries: bool = typer.Option(False, "--list", help="list the named queries and their parameters"),
          timeout: float = _timeout_option(),
          memory_limit: Optional[str] = typer.Option(None, "--memory-limit", help=MEMORY_HELP)) -> None:
    """Run one named aggregation query (depth_histogram, blockers, regressions, trend ...)."""
    if list_queries or name is None:
        rows = [(q.name, ", ".join(q.params), q.description) for q in load_queries().values()]
        print_rows(["query", "parameters", "description"], rows, fmt, title="named queries (opbyop query NAME)")
        return
    try:
        wanted = get_query(name)
        if run is not None:
            _check_run(store, run)
        if previous is not None:
            _check_run(store, previous)
        if "run_id" in wanted.params and run is None:
            raise OpbyopError(f"query {name!r} is about one run", "pass --run RUN_ID (`opbyop runs` lists them)")
        with StoreConnection(_root(store), memory_limit=memory_limit, timeout=timeout) as con:
            prev = previous or (previous_run_id(con, run) if run else None)
            result = run_query(con, name, run_id=run, prev_run_id=prev, n=n, limit=limit, group_id=group)
    except OpbyopError as e:
        _query_failed(e)
    _warn_skipped(result.skipped)
    print_rows(result.columns, result.rows, fmt, title=f"{name} {run or ''} {f'vs {prev}' if prev else ''}")


def coverage_cmd(run: list[str] = typer.Option(..., "--run", help="a run in the store (a corpus run, or any); "
                                               "repeat it to count several together"),
                 chip: list[str] = typer.Option([], "--chip", help="only ops of runs on this chip; repeatable"),
                 failures: bool = typer.Option(False, "--failures", help="also list every op short of a pass"),
                 fmt: str = typer.Option("table", "--format", "-f", help="table | json"),
                 store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP)) -> None:
    """The simulator's coverage of the TTNN ops a run's programs use: simulated or not, golden pass rate per
    TTNN op and dtype, and how they fared on ttsim."""
    try:
        for one in run:
            _check_run(store, one)
        with StoreConnection(_root(store)) as con:
            programs = [row for one in run for row in run_query(con, "ttnn_programs", run_id=one).records()]
    except OpbyopError as e:
        _fail(e)
    rows = [r for r in coverage_rows(programs) if not chip or r.chip in chip]
    if not rows:
        _fail(OpbyopError(f"run(s) {', '.join(run)} hold no analysed op" + (f" on {', '.join(chip)}" if chip else ""),
                          "name a run that analysed ops (`opbyop runs` lists them)"))
    print_coverage(coverage(rows), failures, fmt)


def runs(limit: int = typer.Option(50, "--limit", min=0),
         fmt: str = typer.Option("table", "--format", "-f", help="table | csv | json"),
         store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP)) -> None:
    """List the runs in the store, newest first."""
    try:
        with StoreConnection(_root(store)) as con:
            result = run_query(con, "runs_overview", limit=limit)
    except OpbyopError as e:
        _fail(e)
    _warn_skipped(result.skipped)
    print_rows(result.columns, result.rows, fmt, title=f"runs in {_root(store)}")


def report(run: str = typer.Option(..., "--run", help="run id"),
           out: Optional[Path] = typer.Option(None, "--out", help="HTML file (default: report-<run>.html)"),
           expectations: Optional[Path] = typer.Option(None, "--expectations",
                                                       help="expectations file (default: configs/expectations.yaml)"),
           no_expectations: bool = typer.Option(False, "--no-expectations"),
           previous: Optional[str] = typer.Option(None, "--previous", help="run to compare with"),
           n: int = typer.Option(30, "--n", min=1, help="runs in the trend"),
           store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP)) -> None:
    """Write the self-contained HTML report of a run."""
    target = out or Path(f"report-{run}.html")
    try:
        _check_run(store, run)
        write_report(_root(store), run, target, expectations, not no_expectations, previous, n)
    except OpbyopError as e:
        _fail(e)
    console.print(f"wrote {target}")


SHOWN_CHANGES = ("regression", "progression", "message")


def compare_cmd(runs: list[str] = typer.Argument(None, help="RUN_BEFORE RUN_AFTER: the second against the first"),
                group: Optional[str] = typer.Option(None, "--group", help="every run of a group (the run id given to "
                                                    "`opbyop analyze --compiler A --compiler B`), each against the "
                                                    "one before it, and the compiler under which each op starts or "
                                                    "stops failing"),
                limit: int = typer.Option(20, "--limit", min=0, help="ops shown per kind of change"),
                fmt: str = typer.Option("table", "--format", "-f", help="table | csv | json (json: every op)"),
                store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP)) -> None:
    """Two runs op by op (typically two compilers): regressions, progressions, changed messages, the ops
    whose compile time moved most; with --group, every step of a group and where each op changed."""
    runs = runs or []
    if (group is None) == (len(runs) != 2):
        _fail(OpbyopError("compare takes two run ids, or --group GROUP",
                          "e.g. `opbyop compare RUN_A RUN_B` (`opbyop runs` lists them), or `opbyop compare --group G`"))
    try:
        for run in runs:
            _check_run(store, run)
        with StoreConnection(_root(store)) as con:
            if group is not None:
                found = compare_group(con, group)
                steps, history = found.steps, found.history
            else:
                steps, history = [compare_runs(con, runs[1], runs[0])], []
    except OpbyopError as e:
        _fail(e)
    if fmt == "json":
        sys.stdout.write(json.dumps({"steps": [{**s.summary(), "ops": s.rows} for s in steps], "history": history},
                                    default=str, indent=1) + "\n")
        return
    for step in steps:
        _print_step(step, limit, fmt)
    if history:
        changed = [h for h in history if h["starts_failing_under"] or h["stops_failing_under"]]
        print_rows(["op", "signature", "starts failing under", "stops failing under", "statuses"],
                   [(h["op_name"], h["signature"][:12], h["starts_failing_under"], h["stops_failing_under"],
                     h["statuses"]) for h in changed[:limit or None]], fmt,
                   title=f"where ops change across the group ({len(changed)} of {len(history)} ops change)")


def _print_step(step, limit: int, fmt: str) -> None:  # noqa: ANN001  (opbyop_storage.compare.RunComparison)
    console.print(styled((step.line(), "bold")), soft_wrap=True)
    for change in SHOWN_CHANGES:
        rows = step.of(change)
        if not rows:
            continue
        print_rows(["op", "signature", "occ.", "before", "after", "failed stage", "failed pass", "message before",
                    "message after"],
                   [(r["op_name"], r["signature"][:12], r["occurrences"], f"{r['previous_status']} {r['previous_depth']}",
                     f"{r['status']} {r['depth']}", r["failed_stage"] or r["previous_failed_stage"],
                     r["failed_pass"] or r["previous_failed_pass"], r["previous_message"], r["message"])
                    for r in rows[:limit or None]], fmt, title=f"{change} ({len(rows)})")
    moved = step.compile_time_changes(min(limit, 10))
    if moved:
        print_rows(["op", "signature", "compile s before", "compile s after", "change s"],
                   [(r["op_name"], r["signature"][:12], r["previous_compile_s"], r["compile_s"], r["compile_s_change"])
                    for r in moved], fmt, title="compile time moved most")


PLANNED_WORKERS = [2, 8, 32, 128]


def capacity(ctx: typer.Context,
             run: Optional[str] = typer.Option(None, "--run", help="run id (default: the latest run in the store)"),
             workers: list[int] = typer.Option(PLANNED_WORKERS, "--workers", min=1,
                                               help="worker counts to plan for, e.g. --workers 2 8 32 128"),
             measured_workers: Optional[int] = typer.Option(
                 None, "--measured-workers", min=1, help="the workers the run ran with, when the store does not "
                                                         "say (or says otherwise): the check is for this count"),
             export_places: Optional[int] = typer.Option(
                 None, "--export-places", min=1, help="models exported at once (default: one per worker; "
                                                      "with --exports-beside, one)"),
             exports_beside: bool = typer.Option(False, "--exports-beside",
                                                 help="plan the exports beside the workers, as a run whose "
                                                      "cluster takes no exports makes them in its own process"),
             fmt: str = typer.Option("table", "--format", "-f", help="table | csv | json"),
             store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP)) -> None:
    """Plan a stored run on more (or fewer) workers from its own timings: its exports, ops and whole
    models list-scheduled on W workers, beside the wall it measured; the plan at its own worker count
    is the check."""
    try:
        counts = [*workers, *_more_counts(ctx.args)]
        if run is not None:
            _check_run(store, run)
        found = capacity_plan(_root(store), run, counts, export_places, not exports_beside, measured_workers)
    except OpbyopError as e:
        _fail(e)
    _print_capacity(found, fmt)


def _more_counts(extra: list[str]) -> list[int]:
    """The worker counts after the first of `--workers 2 8 32 128` (typer takes one value per flag)."""
    if not all(a.isdigit() and int(a) >= 1 for a in extra):
        raise OpbyopError(f"unexpected argument(s): {' '.join(extra)}",
                          "give worker counts of 1 or more after --workers, e.g. --workers 2 8 32 128")
    return [int(a) for a in extra]


def _print_capacity(found: CapacityPlan, fmt: str) -> None:
    t, measured = found.timings, found.timings.measured_wall
    rows = [(p.workers, round(p.wall, 1), round(p.plan.last_end(EXPORT), 1), round(p.plan.busy(), 2),
             _rounded(found.against_measured(p)), p.workers == found.measured_workers) for p in found.plans]
    columns = ["workers", "planned_s", "exports_done_s", "workers_busy", "vs_measured_pct", "ran_with"]
    if fmt != "table":
        print_rows(columns, rows, fmt)
        return
    rows = [(*r[:-1], "yes" if r[-1] else "") for r in rows]
    places = (f"{found.export_places} export place{'s' if found.export_places > 1 else ''}" if found.export_places
              else "one export at a time per worker" if found.exports_on_workers else "1 export place")
    console.print(f"run {t.run_id} ({t.status}): {t.exports} exports, {t.ops} ops analysed ({t.reused} reused: "
                  f"not planned), {t.wholes} whole models; each op +{t.handing_out * 1000:.0f} ms handing it out",
                  soft_wrap=True)
    console.print(f"measured: {_seconds(measured)} ({t.wall_from}) on "
                  f"{found.measured_workers or '?'} workers ({found.measured_workers_from}); "
                  f"{t.work.start_up:.1f} s start-up and {t.work.fixed:.1f} s more outside the planned work, "
                  f"the same at every worker count", soft_wrap=True)
    console.print(f"exports: {places}, " + ("each on a worker, once the start-up is over" if found.exports_on_workers
                                            else f"beside the workers, from {t.work.exports_from:.1f} s into the run "
                                                 "(when it started exporting)"), soft_wrap=True)
    print_rows(columns, rows, fmt, title=f"capacity plan of run {t.run_id}")
    if found.check is not None:
        at = found.at(found.measured_workers)
        console.print(f"check: planned {at.wall:.1f} s on {at.workers} workers against the measured "
                      f"{measured:.1f} s: {found.check:+.1f}%", soft_wrap=True)
    elif measured:
        console.print("check: the run does not say how many workers it ran with; pass --measured-workers N "
                      "to check the plan at N against its measured wall", soft_wrap=True)
    else:
        console.print("check: the run has no measured wall time (no time line, no end)", soft_wrap=True)


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f} s"


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def catalog(out: Optional[Path] = typer.Option(None, "--out", help="catalog file (default: <store>/opbyop.duckdb)"),
            store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP)) -> None:
    """Write a DuckDB catalog file with views over the store (for the DuckDB CLI, Superset, ...)."""
    try:
        path = build_catalog(_root(store), out)
    except OpbyopError as e:
        _fail(e)
    console.print(f"wrote {path}  (open with: duckdb -readonly {path})")


expectations_app = typer.Typer(help="Expected depths (configs/expectations.yaml) against runs.", no_args_is_help=True)


@expectations_app.command("update")
def expectations_update(run: str = typer.Option(..., "--run", help="run id to take the depths from"),
                        file: Optional[Path] = typer.Option(None, "--file", help="default: configs/expectations.yaml"),
                        store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP)) -> None:
    """Rewrite the expectations file so that the run meets it exactly (hand-written reasons kept)."""
    path = file or default_path()
    try:
        previous = load_expectations(path) if path.exists() else None
        _check_run(store, run)
        updated = from_outcomes(run_outcomes(_root(store), run), previous)
        save_expectations(updated, path)
    except OpbyopError as e:
        _fail(e)
    console.print(f"wrote {path}: {len(updated.expectations)} entries from run {run}")


@expectations_app.command("check")
def expectations_check(run: str = typer.Option(..., "--run", help="run id"),
                       file: Optional[Path] = typer.Option(None, "--file", help="default: configs/expectations.yaml"),
                       fmt: str = typer.Option("table", "--format", "-f", help="table | csv | json"),
                       store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP)) -> None:
    """Compare a run with the expectations; exit 1 on an unexpected failure or pass."""
    try:
        _check_run(store, run)
        rep = compare(run, run_outcomes(_root(store), run), load_expectations(file))
    except OpbyopError as e:
        _fail(e)
    columns = ["kind", "signature", "op_name", "expected", "actual", "status", "failed_stage", "rule", "models", "message"]
    rows = [(kind, m.signature[:16], m.op_name, m.expected.value, m.actual.value, m.status.value,
             m.failed_stage.value if m.failed_stage else None, m.rule, m.models, m.message)
            for kind, group in (("unexpected failure", rep.unexpected_failures), ("unexpected pass", rep.unexpected_passes))
            for m in group]
    print_rows(columns, rows, fmt, title=f"expectations vs {run}")
    err_console.print(f"{rep.checked} checked, {rep.matched} as expected, {len(rep.unexpected_failures)} unexpected "
                      f"failures, {len(rep.unexpected_passes)} unexpected passes, {rep.not_compared} not compared")
    if not rep.ok:
        raise typer.Exit(1)


export_app = typer.Typer(help="Export a run to other formats.", no_args_is_help=True)


@export_app.command("optest")
def export_optest_cmd(run: str = typer.Option(..., "--run", help="run id"),
                      out: Path = typer.Option(..., "--out", help="JSON file to write"),
                      job_id: int = typer.Option(0, "--github-job-id", help="github_job_id of every record"),
                      store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP)) -> None:
    """Write the run as OpTest records (tt-github-actions) in a JSON array."""
    try:
        s = Store(_root(store))
        s.check_readable(run)
        count = export_optest(s, run, out, job_id)
    except OpbyopError as e:
        _fail(e)
    _warn_skipped(s.skipped)
    console.print(f"wrote {count} OpTest records to {out}")


@export_app.command("perf")
def export_perf_cmd(run: str = typer.Option(..., "--run", help="run id"),
                    out: Path = typer.Option(Path("ops_perf.csv"), "--out", help="CSV file to write"),
                    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP)) -> None:
    """Write the run's simulated per-op device time as tt-metal's ops perf CSV (read it with tt-perf-report)."""
    try:
        s = Store(_root(store))
        s.check_readable(run)
        count = export_perf(s, run, out)
    except OpbyopError as e:
        _fail(e)
    _warn_skipped(s.skipped)
    console.print(f"wrote {count} device op rows to {out}  (read it with: tt-perf-report {out})")


@export_app.command("visualizer")
def export_visualizer_cmd(run: str = typer.Option(..., "--run", help="run id"),
                          out: Path = typer.Option(..., "--out", help="folder to write the report into"),
                          model: Optional[str] = typer.Option(None, "--model", help="one model of the run"),
                          op: Optional[str] = typer.Option(None, "--op", help="one op's program, by signature"),
                          store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP)) -> None:
    """Write the run (or one model, or one op's program) as a TT-NN Visualizer report: a memory report
    (db.sqlite, config.json) and the matching performance report (the ops perf CSV and a device log)."""
    try:
        s = Store(_root(store))
        s.check_readable(run)
        report = export_visualizer(s, run, out, _model(s, run, model), op)
    except OpbyopError as e:
        _fail(e)
    _warn_skipped(s.skipped)
    console.print(f"wrote {len(report.operations)} operations (peak circular buffers {report.peak_l1_bytes:,} B per "
                  f"core) to {out / MEMORY_FOLDER} and their performance report to {out / PERFORMANCE_FOLDER}  "
                  "(load them in TT-NN Visualizer, or run `opbyop visualize`)", soft_wrap=True)
    if report.ttnn_report is not None:
        console.print(f"wrote ttnn's own report of the op's run on ttsim to {out / TTNN_FOLDER}", soft_wrap=True)


METRIC_HELP = "status | depth | pcc | cycles | peak_l1"


@export_app.command("model-explorer")
def export_model_explorer_cmd(run: str = typer.Option(..., "--run", help="run id"),
                              model: str = typer.Option(..., "--model", help="model of the run"),
                              out: Path = typer.Option(..., "--out", help="node data JSON file to write"),
                              metric: str = typer.Option("status", "--metric", help=METRIC_HELP),
                              store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP)) -> None:
    """Write a model's node data for Model Explorer, keyed to the graph it draws of the model's .mlir."""
    try:
        chosen = _metric(metric)
        s = Store(_root(store))
        s.check_readable(run)
        count = export_node_data(s, run, _model(s, run, model), chosen, out)
    except OpbyopError as e:
        _fail(e)
    console.print(f"wrote {metric} of {count} nodes to {out}  (load it in Model Explorer beside the model's graph)")


def _metric(name: str):  # -> opbyop_storage.exports.explorer.Metric
    try:
        return Metric(name)
    except ValueError:
        raise OpbyopError(f"unknown metric {name!r}", f"use one of {METRIC_HELP}") from None


def explore(run: str = typer.Option(..., "--run", help="run id"),
            model: Optional[str] = typer.Option(None, "--model", help="one model (default: every model of the run)"),
            port: Optional[int] = typer.Option(None, "--port", min=1, max=65535, help="default: a free port"),
            open_browser: bool = typer.Option(False, "--open/--no-open", help="open the page in a browser"),
            store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP)) -> None:
    """Open a run's models in Model Explorer on 127.0.0.1, coloured by status, depth, PCC, cycles and
    peak L1 (the node data menu); each op's attributes name its signature and repro command. Ctrl-C stops it."""
    from opbyop_storage.exports.explorer_server import serve  # model_explorer (and torch): loaded only when used

    def announce(url: str) -> None:
        console.print(f"Model Explorer for run {run}: {url}", soft_wrap=True)

    try:
        s = Store(_root(store))
        s.check_readable(run)
        serve(s, run, _model(s, run, model), port, open_browser, announce)
    except OpbyopError as e:
        _fail(e)
    except KeyboardInterrupt:
        pass
    console.print("stopped")


def visualize(run: str = typer.Option(..., "--run", help="run id"),
              model: Optional[str] = typer.Option(None, "--model", help="one model of the run"),
              op: Optional[str] = typer.Option(None, "--op", help="one op's program, by signature"),
              port: Optional[int] = typer.Option(None, "--port", min=1, max=65535, help="default: a free port"),
              visualizer: Optional[Path] = typer.Option(
                  None, "--visualizer", help="a ttnn-visualizer executable or its environment (default: the "
                                             "checkout's .venv-visualizer, from `make visualizer`)"),
              store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP)) -> None:
    """Open a run's report in TT-NN Visualizer on 127.0.0.1: each TTNN op's circular buffers per core, its
    DRAM tensors, source line and verdict, and the simulated ops perf report. Ctrl-C stops it."""
    def announce(url: str, ttnn_url: str | None) -> None:
        console.print(f"TT-NN Visualizer for run {run}: {url}", soft_wrap=True)
        if ttnn_url is not None:
            console.print(f"ttnn's own report of the op's run on ttsim: {ttnn_url}", soft_wrap=True)

    try:
        s = Store(_root(store))
        s.check_readable(run)
        serve_visualizer(s, run, _model(s, run, model), op, port, visualizer, announce)
    except OpbyopError as e:
        _fail(e)
    except KeyboardInterrupt:
        pass
    console.print("stopped")


def register(app: typer.Typer) -> None:
    """Called by opbyop's CLI for the `opbyop.cli` entry point `store`: the store's commands, and the
    store as the sink of the CLI's runs (opbyop never imports it)."""
    supply_sink(store_sink)
    app.command("sql")(sql)
    app.command("query")(query)
    app.command("runs")(runs)
    app.command("report")(report)
    app.command("compare")(compare_cmd)
    app.command("capacity", context_settings={"allow_extra_args": True})(capacity)
    app.command("coverage")(coverage_cmd)
    app.command("catalog")(catalog)
    app.command("explore")(explore)
    app.command("visualize")(visualize)
    app.add_typer(expectations_app, name="expectations")
    app.add_typer(export_app, name="export")
