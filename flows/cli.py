"""`opbyop analyze`: the analyze flow on a laptop, nothing started by hand.

At once, side by side: a Prefect server (or the one PREFECT_API_URL names), a LocalCluster whose op
workers warm up (or the scheduler --address names), and this process importing the flow. Then the
flow, with a progress bar fed from the store (results land there in batches); at the end the
summary, where the time went, and the report's path.

Ctrl-C asks the flow to stop: what was analysed is stored, the run is marked failed, the server and
the cluster are stopped, and the command to resume the run is printed. The server and the cluster
are tied to this process: they die with it even on kill -9 (flows/tied.py).
"""

from __future__ import annotations

import faulthandler
import os
import shlex
import signal
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console()
STOP_GRACE_SECONDS = 20.0  # how long Ctrl-C waits for the flow to store what it has before leaving
PROGRESS_SECONDS = 0.5  # how often the progress bar reads the store


def _defaults_for_laptop() -> None:
    from flows.settings import apply_defaults

    apply_defaults()
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # the progress bar tells the story
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")


def resume_command(names: list[str], chip: str, workers: int | None, address: str | None, reuse: bool, whole: bool,
                   timeout: float, run_id: str) -> str:
    words = ["opbyop", "analyze", *names, "--chip", chip]
    words += ["--workers", str(workers)] if workers else []
    words += ["--address", address] if address else []
    words += [] if reuse else ["--no-reuse"]
    words += [] if whole else ["--no-whole"]
    words += ["--timeout", f"{timeout:g}"] if timeout != 120.0 else []
    return shlex.join(words + ["--run-id", run_id])


class Launch:
    """What one CLI run starts, all at once from this (the main) thread, and stops together: the
    Prefect server, the Dask cluster, and the models' split (in a thread of this process)."""

    def __init__(self, workers: int | None, address: str | None, chip: str, log_dir):  # noqa: ANN001
        from flows.cluster import ClusterProcess
        from flows.handoff import Handoff
        from flows.server import PrefectApi

        self.handoff = Handoff()
        self.api = PrefectApi(log_dir)
        if self.api.started_here:  # before Prefect is imported, which reads it once
            os.environ["PREFECT_API_URL"] = self.api.url or ""
        self.cluster = None if address else ClusterProcess(workers or os.cpu_count() or 1, chip, log_dir)
        self._waits = {"server": self._background(self.api.wait)}
        if self.cluster is not None:
            self._waits["cluster"] = self._background(self.cluster.wait)

    def _background(self, wait) -> tuple[threading.Thread, dict]:  # noqa: ANN001
        """wait() in a thread, noting when it returned: each start-up is timed on its own."""
        box: dict[str, object] = {}

        def run() -> None:
            try:
                box["value"] = wait()
                box["seconds"] = time.monotonic() - self.handoff.started
            except BaseException as e:
                box["error"] = e

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread, box

    def wait(self) -> str | None:
        """Wait for the server and the cluster; the cluster's address (None: the one given)."""
        for name, (thread, box) in self._waits.items():
            while thread.is_alive():
                time.sleep(0.1)  # not join(timeout): see _watch
            if "error" in box:
                raise box["error"]  # type: ignore[misc]
            if name != "server" or self.api.started_here:
                self.handoff.phases[name] = float(box["seconds"])  # type: ignore[arg-type]
        return self._waits["cluster"][1]["value"] if "cluster" in self._waits else None  # type: ignore[return-value]

    def close(self) -> None:
        """Flush what Prefect still has to send, then ask the cluster and the server to stop."""
        if self.api.started_here:
            from flows.server import drain_prefect

            drain_prefect()
        for child in (self.cluster, self.api):
            if child is not None:
                child.close(wait=False)  # their supervisors finish the job, after this process too


def register(app: typer.Typer) -> None:
    from opbyop.cli.app import positive_seconds  # option checks shared with the other commands

    @app.command()
    def analyze(models: list[str] = typer.Argument(None, help="zoo names, .mlir files, package.module:factory "
                                                              "(default: the zoo's 'default' tag)"),
                chip: str = typer.Option("p150", "--chip"),
                workers: Optional[int] = typer.Option(None, "--workers", min=1, help="LocalCluster workers (1 or more)"),
                address: Optional[str] = typer.Option(None, "--address", help="existing Dask scheduler "
                                                      "(default: $OPBYOP_DASK_ADDRESS; none: a LocalCluster)"),
                run_id: Optional[str] = typer.Option(None, "--run-id", help="resume or replace this run"),
                reuse: bool = typer.Option(True, "--reuse/--no-reuse", help="reuse cached op results"),
                whole: bool = typer.Option(True, "--whole/--no-whole"),
                timeout: float = typer.Option(120.0, "--timeout", callback=positive_seconds,
                                              help="seconds per op (above 0)"),
                shrink: bool = typer.Option(False, "--shrink/--no-shrink", help="after the fan-out, search where each "
                                            "failing op starts failing (by dimension and dtype; stored in `shrinks`)"),
                shrink_seconds: float = typer.Option(60.0, "--shrink-seconds", callback=positive_seconds,
                                                     help="time budget of each failing op's search (above 0)"),
                manifest: Optional[Path] = typer.Option(None, "--manifest", help="also write the unique ops and "
                                                        "their origin models here (JSON; always beside the report)"),
                pass_timing: bool = typer.Option(False, "--pass-timing", help="compile every analysed op again with "
                                                 "MLIR pass timing: each pass's time (ops reused from the cache are "
                                                 "not timed: add --no-reuse)"),
                ) -> None:
        """Run the analyze flow: every op of MODELS compiled, simulated and checked, results stored."""
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 PID: where a stuck run is
        _defaults_for_laptop()
        from flows.run_ids import new_run_id
        from flows.service import standing_service
        from opbyop.config import AnalysisConfig, ClusterConfig, ShrinkOption, load_zoo
        from opbyop.environment import environment
        from opbyop.errors import OpbyopError
        from opbyop.workspace import Workspace

        address = address or environment().dask_address  # an existing cluster: none is started here
        try:
            names = models or [m.name for m in load_zoo().tagged("default")]
            config = AnalysisConfig(models=names, chip=chip, reuse_cached=reuse, whole_model=whole,
                                    op_timeout_s=timeout, cluster=ClusterConfig(address=address, workers=workers),
                                    pass_timing=1.0 if pass_timing else 0.0)
        except OpbyopError as e:
            console.print(f"[red]error:[/red] {escape(str(e))}")
            raise typer.Exit(2)
        run_id = run_id or new_run_id()
        resume = resume_command(names, chip, workers, address, reuse, whole, timeout, run_id)
        workspace = Workspace.default()
        shrink_option = ShrinkOption(failing=shrink, seconds_per_op=shrink_seconds)
        service = None if address or workers else standing_service(workspace.root)
        if service is not None:  # no cluster asked for, and the workspace's `opbyop serve` runs: it runs the flow
            _run_on_service(workspace.root, service, config, run_id, shrink_option, resume, manifest)
            return
        launch = Launch(workers, address, chip, workspace.root / "logs")
        outcome: dict[str, object] = {"shrink": shrink_option}
        try:
            _start(launch, config, run_id, outcome)
            _watch(outcome["thread"], workspace.store, run_id)
        except KeyboardInterrupt:
            _interrupted(launch, outcome.get("thread"), outcome.get("handoff"), resume)
        except OpbyopError as e:
            launch.close()
            console.print(f"[red]error:[/red] {escape(str(e))}")
            raise typer.Exit(1)
        try:
            _copy_manifest(workspace.root, run_id, manifest)
            _finish(outcome, resume)  # the outcome first, then the clean-up
        finally:
            launch.close()

    @app.command()
    def serve(chip: str = typer.Option("p150", "--chip", help="warm the op workers for this chip"),
              workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Dask workers (default: one per core)"),
              port: Optional[int] = typer.Option(None, "--port", min=1, max=65535,
                                                 help="the Prefect server's port (default: a free one)"),
              ) -> None:
        """Keep a Prefect server, a warm Dask cluster and a warm flow process running for `opbyop analyze`.

        analyze in this workspace then hands its runs to them instead of starting its own. Ctrl-C (or
        SIGTERM) stops them."""
        _defaults_for_laptop()
        from flows.serve import Service, terminate_as_interrupt, warm_imports
        from opbyop.errors import OpbyopError
        from opbyop.workspace import Workspace

        terminate_as_interrupt()
        root = Workspace.default().root
        service = Service(root, chip, workers or os.cpu_count() or 1, port)
        try:
            record = service.start()
            warm_imports()
            console.print(f"serving {escape(str(root))}: Prefect API {record.api_url} (UI "
                          f"{record.api_url.removesuffix('/api')}), Dask scheduler {record.dask_address}, "
                          f"{record.workers} op workers warming up for {escape(chip)}", highlight=False, soft_wrap=True)
            console.print("`opbyop analyze` in this workspace now runs here; Ctrl-C stops the service",
                          highlight=False, markup=False)
            service.serve(on_run=lambda request, outcome: console.print(
                f"run {request.run_id}: {outcome.state}", highlight=False, markup=False))
        except KeyboardInterrupt:
            console.print("stopping the cluster and the server", highlight=False)
        except OpbyopError as e:
            console.print(f"[red]error:[/red] {escape(str(e))}")
            raise typer.Exit(1)
        finally:
            service.stop()

    def _start(launch: Launch, config, run_id: str, outcome: dict) -> None:  # noqa: ANN001
        """Start the flow in a thread (the main thread stays free for Ctrl-C): outcome gets the
        thread, the handoff, and at the end the flow's state or the error that stopped it."""
        from flows.handoff import handing_off

        handoff = launch.handoff
        outcome["handoff"] = handoff
        handoff.start_splits(config.models, config.seed)
        from flows.analyze import analyze as analyze_flow  # imported while the server and cluster start

        address = launch.wait()
        if address:
            config = config.model_copy(update={"cluster": config.cluster.model_copy(update={"address": address})})

        def target() -> None:
            try:
                with handing_off(handoff):
                    outcome["state"] = analyze_flow(config=config, run_id=run_id, shrink=outcome["shrink"],
                                                    return_state=True)
            except BaseException as e:  # shown to the user, with the run id to resume
                outcome["error"] = e

        thread = threading.Thread(target=target, name="analyze-flow", daemon=True)
        outcome["thread"] = thread
        thread.start()

    def _watch(thread: threading.Thread, store_root, run_id: str) -> None:  # noqa: ANN001
        def running() -> bool:
            # not thread.join(timeout): a Ctrl-C that lands inside it can leave the thread marked
            # stopped while it runs (CPython 3.11), and the run would not be given its time to stop
            time.sleep(0.1)
            return thread.is_alive()

        _progress(running, store_root, run_id)

    def _interrupted(launch: Launch, thread: threading.Thread | None, handoff, resume: str) -> None:  # noqa: ANN001
        console.print("[yellow]interrupted:[/yellow] storing what was analysed, stopping the cluster and server")
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        try:
            if handoff is not None:
                handoff.stop.set()
            while thread is not None and thread.is_alive() and time.monotonic() < deadline:
                time.sleep(0.2)  # see _watch: no join(timeout) where Ctrl-C may land
        except KeyboardInterrupt:  # a second Ctrl-C: leave now
            pass
        launch.close()
        console.print(f"resume it with: {resume}", highlight=False, markup=False)
        if thread is not None and thread.is_alive():
            os._exit(130)  # the flow thread is stuck in Prefect's engine: do not wait for it at exit
        raise typer.Exit(130)


def _progress(running: Callable[[], bool], store_root: Path, run_id: str) -> None:
    """A progress bar fed from the store (results land there in batches) while `running()` says so;
    `running()` paces the loop (a short wait: the end shows at once), the store is read every
    PROGRESS_SECONDS (each read costs CPU the run could use)."""
    from storage.dataset import Store

    store = Store(store_root)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        task = progress.add_task(f"run {run_id}: starting", total=None)
        total, read = 0, time.monotonic()
        while running():
            if time.monotonic() - read < PROGRESS_SECONDS:
                continue
            read = time.monotonic()
            total = total or _total(store, run_id)  # the run's ops are stored once, before the fan-out
            if total:
                progress.update(task, total=total, completed=_done(store, run_id), description=f"run {run_id}: ops")


def _total(store, run_id: str) -> int:  # noqa: ANN001
    try:
        return len({r.signature for r in store.ops(run_id) if r.signature})
    except Exception:  # the run's files may not exist yet
        return 0


def _done(store, run_id: str) -> int:  # noqa: ANN001
    try:
        return len(store.completed_signatures(run_id))
    except Exception:
        return 0


def _run_on_service(workspace_root: Path, service, config, run_id: str, shrink, resume: str,  # noqa: ANN001
                    manifest: Optional[Path]) -> None:
    """Hand the run to `opbyop serve`, show its progress from the store, then its summary. Ctrl-C
    asks the service to stop the run (what was analysed is stored) and prints how to resume it."""
    from flows.service import AnalyzeRequest, Ticket
    from opbyop.errors import OpbyopError
    from opbyop.workspace import Workspace

    console.print(f"run {run_id} on `opbyop serve` (pid {service.pid}, Prefect API {service.api_url})",
                  highlight=False, markup=False, soft_wrap=True)
    ticket = Ticket(workspace_root, service, AnalyzeRequest(run_id=run_id, config=config, shrink=shrink,
                                                            client_pid=os.getpid()))
    ticket.submit()
    box: dict[str, object] = {}

    def running() -> bool:
        box["outcome"] = ticket.outcome()
        if box["outcome"] is None:
            time.sleep(0.1)
        return box["outcome"] is None

    try:
        _progress(running, Workspace(workspace_root).store, run_id)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted:[/yellow] the service stores what was analysed and stops the run")
        ticket.stop()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        try:
            while ticket.outcome() is None and time.monotonic() < deadline:
                time.sleep(0.2)
        except (KeyboardInterrupt, OpbyopError):
            pass
        console.print(f"resume it with: {resume}", highlight=False, markup=False)
        raise typer.Exit(130)
    except OpbyopError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        console.print(f"resume it with: {resume}", highlight=False, markup=False)
        raise typer.Exit(1)
    outcome = box["outcome"]
    _copy_manifest(workspace_root, run_id, manifest)
    if outcome.summary is not None:  # type: ignore[union-attr]
        _print(outcome.summary)  # type: ignore[union-attr]
    if not outcome.completed:  # type: ignore[union-attr]
        console.print(f"[red]{escape(outcome.state)}:[/red] {escape(outcome.message)}", highlight=False)  # type: ignore[union-attr]
        console.print(f"resume it with: {resume}", highlight=False, markup=False)
        raise typer.Exit(1)


def _copy_manifest(root, run_id: str, target: Optional[Path]) -> None:  # noqa: ANN001
    """The run's manifest (opbyop.pipeline.write_manifest, beside the report) also at --manifest."""
    import shutil

    from opbyop.pipeline import run_manifest_path

    written = run_manifest_path(root, run_id)
    if target is None or not written.exists():
        return
    try:
        shutil.copyfile(written, target)
        console.print(f"manifest: {target}", highlight=False, markup=False)
    except OSError as e:
        console.print(f"[red]error:[/red] cannot write the manifest {escape(str(target))}: {escape(str(e))}")


def _finish(outcome: dict, resume: str) -> None:
    from flows.summary import summary_of

    if "error" in outcome:
        console.print(f"[red]the run failed:[/red] {escape(str(outcome['error']))}", highlight=False)
        console.print(f"resume it with: {resume}", highlight=False, markup=False)
        raise typer.Exit(1)
    state = outcome["state"]
    summary = summary_of(state.result(raise_on_failure=False))
    if summary is None:
        console.print(f"[red]{escape(state.name)}:[/red] {escape(state.message or '')}", highlight=False)
        console.print(f"resume it with: {resume}", highlight=False, markup=False)
        raise typer.Exit(1)
    _print(summary)
    if not state.is_completed():
        console.print(f"[red]{escape(state.name)}:[/red] {escape(summary.error or state.message or '')}",
                      highlight=False)
        raise typer.Exit(1)


def _print(summary) -> None:  # noqa: ANN001
    from flows.phases import format_phases

    table = Table("status", "unique ops", title=f"run {escape(summary.run_id)}")
    for status, n in sorted(summary.statuses.items(), key=lambda kv: -kv[1]):
        table.add_row(status, str(n))
    console.print(table)
    for model, status in summary.whole.items():
        console.print(f"whole model {escape(model)}: {escape(status)}", highlight=False)
    for model, error in summary.model_errors.items():
        console.print(f"[red]{escape(model)}: {escape(error)}[/red]", highlight=False)
    console.print(summary.line(), highlight=False, markup=False)
    if summary.phases:
        console.print(f"time: {format_phases(summary.phases)}", highlight=False, markup=False, soft_wrap=True)
    if summary.report:
        console.print(f"report: {summary.report}", highlight=False, markup=False)
    console.print(f"query it: opbyop sql \"SELECT status, count(*) FROM results WHERE run_id = '{summary.run_id}' "
                  f"GROUP BY 1\"", highlight=False, markup=False, soft_wrap=True)
