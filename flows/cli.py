"""`opbyop analyze`: the analyze flow on a laptop, nothing started by hand.

Prefect's ephemeral API, a LocalCluster and the local store; a progress bar fed from the store
(the run's results appear there in batches), then the summary and the report's path.
"""

from __future__ import annotations

import os
import threading
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console()


def _defaults_for_laptop() -> None:
    from flows.settings import apply_defaults

    apply_defaults()
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # the progress bar tells the story
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")


def register(app: typer.Typer) -> None:
    from opbyop.cli.app import positive_seconds  # option checks shared with the other commands

    @app.command()
    def analyze(models: list[str] = typer.Argument(None, help="zoo names, .mlir files, package.module:factory "
                                                              "(default: the zoo's 'default' tag)"),
                chip: str = typer.Option("p150", "--chip"),
                workers: Optional[int] = typer.Option(None, "--workers", min=1, help="LocalCluster workers (1 or more)"),
                address: Optional[str] = typer.Option(None, "--address", help="existing Dask scheduler"),
                run_id: Optional[str] = typer.Option(None, "--run-id", help="resume or replace this run"),
                reuse: bool = typer.Option(True, "--reuse/--no-reuse", help="reuse cached op results"),
                whole: bool = typer.Option(True, "--whole/--no-whole"),
                timeout: float = typer.Option(120.0, "--timeout", callback=positive_seconds,
                                              help="seconds per op (above 0)")) -> None:
        """Run the analyze flow: every op of MODELS compiled, simulated and checked, results stored."""
        _defaults_for_laptop()
        from flows.analyze import RunSummary, analyze as analyze_flow, new_run_id
        from opbyop.config import AnalysisConfig, ClusterConfig, load_zoo
        from opbyop.errors import OpbyopError
        from opbyop.workspace import Workspace
        from storage.dataset import Store

        try:
            names = models or [m.name for m in load_zoo().tagged("default")]
            config = AnalysisConfig(models=names, chip=chip, reuse_cached=reuse, whole_model=whole,
                                    op_timeout_s=timeout, cluster=ClusterConfig(address=address, workers=workers))
        except OpbyopError as e:
            console.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2)
        run_id = run_id or new_run_id()
        outcome: dict[str, object] = {}

        def target() -> None:
            try:
                outcome["state"] = analyze_flow(config=config, run_id=run_id, return_state=True)
            except BaseException as e:  # shown to the user below, with the run id to resume
                outcome["error"] = e

        thread = threading.Thread(target=target, name="analyze-flow")
        thread.start()
        store = Store(Workspace.default().store)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            task = progress.add_task(f"run {run_id}: starting", total=None)
            total = 0
            while thread.is_alive():
                thread.join(timeout=2.0)
                total = total or _total(store, run_id)  # the run's ops are stored once, before the fan-out
                if total:
                    progress.update(task, total=total, completed=_done(store, run_id),
                                    description=f"run {run_id}: ops")
        if "error" in outcome:
            console.print(f"[red]the run failed:[/red] {outcome['error']}\n"
                          f"resume it with: opbyop analyze {' '.join(names)} --run-id {run_id}")
            raise typer.Exit(1)
        state = outcome["state"]
        summary = state.result(raise_on_failure=False) if state.is_completed() else None
        if not isinstance(summary, RunSummary):
            console.print(f"[red]{state.name}:[/red] {state.message}")
            raise typer.Exit(1)
        _print(summary)

    def _total(store, run_id: str) -> int:
        try:
            return len({r.signature for r in store.ops(run_id) if r.signature})
        except Exception:  # the run's files may not exist yet
            return 0

    def _done(store, run_id: str) -> int:
        try:
            return len(store.completed_signatures(run_id))
        except Exception:
            return 0


def _print(summary) -> None:
    table = Table("status", "unique ops", title=f"run {summary.run_id}")
    for status, n in sorted(summary.statuses.items(), key=lambda kv: -kv[1]):
        table.add_row(status, str(n))
    console.print(table)
    for model, status in summary.whole.items():
        console.print(f"whole model {model}: {status}")
    for model, error in summary.model_errors.items():
        console.print(f"[red]{model}: {error}[/red]")
    console.print(summary.line(), highlight=False)
    if summary.report:
        console.print(f"report: {summary.report}")
    console.print(f"query it: opbyop sql \"SELECT status, count(*) FROM results WHERE run_id = '{summary.run_id}' GROUP BY 1\"")
