"""`opbyop analyze`, `opbyop nightly` and `opbyop serve`: the flows on a laptop, nothing started by hand.

At once, side by side: a Prefect server (or the one PREFECT_API_URL names), a LocalCluster whose op
workers warm up (or the scheduler --address names), and this process importing the flow. Then the
flow, in a thread of this process (the main thread stays free for Ctrl-C), with a progress bar fed
from the store (results land there in batches); at the end the summary, where the time went, and
the report's path.

Ctrl-C asks the flow to stop: what was analysed is stored, the run is marked failed, the server and
the cluster are stopped, and the command to resume the run is printed. The server and the cluster
are tied to this process: they die with it even on kill -9 (flows/hosting/tied.py).
"""

from __future__ import annotations

import faulthandler
import os
import shlex
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional

import psutil
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from flows.engine.phases import BESIDE, OTHER, format_phases
from flows.engine.run_ids import new_run_id
from flows.engine.summary import summary_of
from flows.hosting.handoff import Handoff, handing_off
from flows.hosting.server import PrefectApi, drain_prefect
from flows.hosting.service import AnalyzeRequest, NightlyRequest, Ticket, standing_service
from flows.hosting.settings import apply_defaults
from opbyop.cli.app import DeviceBackend, DeviceOption, make_console, positive_seconds, styled
from opbyop.compiler.assets import Notices
from opbyop.compiler.system_desc import resolve
from opbyop.compiler.targets import target_for
from opbyop.config import AnalysisConfig, ClusterConfig, DeviceOptions, ShrinkOption, load_zoo
from opbyop.environment import environment
from opbyop.errors import OpbyopError
from opbyop.pipeline import run_manifest_path
from opbyop.workspace import Workspace
from opbyop.compiler.boards import chip_help, mesh_help

console = make_console()  # prints data literally: stored strings never read as markup
STOP_GRACE_SECONDS = 20.0  # how long Ctrl-C waits for the flow to store what it has before leaving
PROGRESS_SECONDS = 0.5  # how often the progress bar reads the store


def _defaults_for_laptop() -> None:
    apply_defaults()
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # the progress bar tells the story
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")


def _say(*parts: str | tuple[str, str]) -> None:
    console.print(styled(*parts), soft_wrap=True)


def resume_command(names: list[str], chip: str, workers: int | None, address: str | None, reuse: bool, whole: bool,
                   timeout: float, run_id: str, device: str = "model") -> str:
    words = ["opbyop", "analyze", *names, "--chip", chip]
    words += ["--workers", str(workers)] if workers else []
    words += ["--address", address] if address else []
    words += [] if reuse else ["--no-reuse"]
    words += [] if whole else ["--no-whole"]
    words += ["--timeout", f"{timeout:g}"] if timeout != 120.0 else []
    words += ["--device", device] if device != "model" else []
    return shlex.join(words + ["--run-id", run_id])


class Launch:
    """What one CLI run starts, all at once from this (the main) thread, and stops together: the
    Prefect server and the Dask cluster; beside them the chip's system descriptor is made if this is
    its first use (said on screen, with why)."""

    def __init__(self, workers: int | None, address: str | None, chip: str, log_dir: Path):
        from flows.hosting.cluster import ClusterProcess  # dask: loaded only when used

        self.handoff = Handoff(started=_process_started())
        self.api = PrefectApi(log_dir)
        if self.api.started_here:  # before Prefect is imported, which reads it once
            os.environ["PREFECT_API_URL"] = self.api.url or ""
        self.cluster = None if address else ClusterProcess(workers or os.cpu_count() or 1, chip, log_dir)
        self._waits = {"server": _Started.watch(self.api.wait, self.handoff.started)}
        if self.cluster is not None:
            self._waits["cluster"] = _Started.watch(self.cluster.wait, self.handoff.started)
        self.notices = Notices(say=lambda text: _say(text))
        self._waits["descriptor"] = _Started.watch(lambda: resolve(chip, notices=self.notices), self.handoff.started)

    def wait(self, busy_until: float) -> str | None:
        """Wait for the server, the cluster and the descriptor; put the start-up on the run's time line
        (this thread was busy until `busy_until`, importing); the cluster's address (None: the one given)."""
        for started in self._waits.values():
            started.join()
        self.handoff.phases.update(self._time_line(busy_until))
        return self._waits["cluster"].value if "cluster" in self._waits else None

    def _time_line(self, busy_until: float) -> dict[str, float]:
        """The start-up's steps: this thread's own work, then each start-up the run was still waiting
        for, in the order they ended (each charged from the previous end: the critical path); each
        start-up's own time beside. The descriptor's lock waits and plugin unpacking are their own steps."""
        line, cursor = {"imports": busy_until - self.handoff.started}, busy_until
        for name, started in sorted(self._waits.items(), key=lambda kv: kv[1].ended):
            if started.ended > cursor:
                line[name], cursor = started.ended - cursor, started.ended
            line[name + BESIDE] = started.seconds
        for part, seconds in self.notices.seconds.items():  # on the path only as far as the descriptor is
            moved = min(seconds, line.get("descriptor", 0.0))
            if moved:
                line["descriptor"] -= moved
                line[part] = moved
        self.handoff.flow_called = time.monotonic()
        line[OTHER] = self.handoff.flow_called - cursor
        return line

    def close(self) -> None:
        """Flush what Prefect still has to send, then ask the cluster and the server to stop."""
        if self.api.started_here:
            drain_prefect()
        for child in (self.cluster, self.api):
            if child is not None:
                child.close(wait=False)  # their supervisors finish the job, after this process too


def _process_started() -> float:
    """When this process started, on time.monotonic()'s clock: a run's time line starts with the command."""
    return time.monotonic() - max(0.0, time.time() - psutil.Process().create_time())


@dataclass
class _Started:
    """A start-up's wait() running in a thread, timed on its own."""

    thread: threading.Thread
    value: Any = None
    seconds: float = 0.0  # from the run's start to its end
    ended: float = 0.0  # time.monotonic() when it ended
    error: BaseException | None = None

    @classmethod
    def watch(cls, wait: Callable[[], Any], since: float) -> _Started:
        started = cls(thread=threading.Thread(target=lambda: None))

        def run() -> None:
            try:
                started.value = wait()
            except BaseException as e:
                started.error = e
            finally:
                started.ended = time.monotonic()
                started.seconds = started.ended - since

        started.thread = threading.Thread(target=run, daemon=True)
        started.thread.start()
        return started

    def join(self) -> None:
        _wait_while(self.thread.is_alive, 0.1)
        if self.error is not None:
            raise self.error


def _wait_while(condition: Callable[[], bool], step: float, deadline: float | None = None) -> None:
    """Short sleeps, not Thread.join(timeout): a Ctrl-C that lands inside join can leave the thread
    marked stopped while it runs (CPython 3.11), and the run would not be given its time to stop."""
    while condition() and (deadline is None or time.monotonic() < deadline):
        time.sleep(step)


def _stop_and_wait(ticket) -> None:  # noqa: ANN001
    """Ask `opbyop serve` to stop a run it took, and give the run STOP_GRACE_SECONDS to store what it
    has; a second Ctrl-C, or the service gone, ends the wait at once."""
    ticket.stop()
    try:
        _wait_while(lambda: ticket.outcome() is None, 0.2, time.monotonic() + STOP_GRACE_SECONDS)
    except (KeyboardInterrupt, OpbyopError):
        pass


@dataclass
class FlowThread:
    """A flow called in a thread of this process, handed what the CLI started; its state or error."""

    name: str
    call: Callable[[], Any]  # the flow, called with return_state=True
    handoff: Handoff
    thread: threading.Thread | None = None
    state: Any = None  # prefect State
    error: BaseException | None = None

    def start(self) -> None:
        def target() -> None:
            try:
                with handing_off(self.handoff):
                    self.state = self.call()
            except BaseException as e:  # shown to the user, with the command to resume
                self.error = e

        self.thread = threading.Thread(target=target, name=self.name, daemon=True)
        self.thread.start()

    def running(self) -> bool:
        time.sleep(0.1)
        return self.thread is not None and self.thread.is_alive()

    def stop(self, launch: Launch, resume: str) -> NoReturn:
        """Ctrl-C: ask the flow to store what it has and stop, then the cluster and the server."""
        _say(("interrupted:", "yellow"), " storing what was analysed, stopping the cluster and server")
        try:
            self.handoff.stop.set()
            _wait_while(lambda: self.thread is not None and self.thread.is_alive(), 0.2,
                        time.monotonic() + STOP_GRACE_SECONDS)
        except KeyboardInterrupt:  # a second Ctrl-C: leave now
            pass
        launch.close()
        _say(f"resume it with: {resume}")
        if self.thread is not None and self.thread.is_alive():
            os._exit(130)  # the flow thread is stuck in Prefect's engine: do not wait for it at exit
        raise typer.Exit(130)


@dataclass
class AnalyzeCommand:
    """What `opbyop analyze` was asked, as the flow's configuration and the command that resumes it."""

    names: list[str]
    config: Any  # opbyop.config.AnalysisConfig
    run_id: str
    shrink: Any  # opbyop.config.ShrinkOption
    resume: str
    manifest: Optional[Path]
    workspace_root: Path


def analyze(models: list[str] = typer.Argument(None, help="zoo names, .mlir files, package.module:factory "
                                                          "(default: the zoo's 'default' tag)"),
            chip: str = typer.Option("p150", "--chip", help=chip_help()),
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
            mesh: Optional[str] = typer.Option(None, "--mesh", help=mesh_help()),
            unshard: bool = typer.Option(False, "--unshard", help="analyse a sharded model on a single chip "
                                         "with its shardings removed (noted); otherwise an error"),
            pass_timing: bool = typer.Option(False, "--pass-timing", help="compile every analysed op again with "
                                             "MLIR pass timing: each pass's time (ops reused from the cache are "
                                             "not timed: add --no-reuse)"),
            device_backend: DeviceBackend = DeviceOption,
            ) -> None:
    """Run the analyze flow: every op of MODELS compiled, simulated and checked, results stored."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 PID: where a stuck run is
    _defaults_for_laptop()

    address = address or environment().dask_address  # an existing cluster: none is started here
    try:
        names = models or [m.name for m in load_zoo().tagged("default")]
        config = AnalysisConfig(models=names, chip=chip, reuse_cached=reuse, whole_model=whole,
                                op_timeout_s=timeout, cluster=ClusterConfig(address=address, workers=workers),
                                mesh=mesh, unshard=unshard, pass_timing=1.0 if pass_timing else 0.0,
                                device=DeviceOptions(backend=device_backend.value))
        chips = target_for(chip, mesh).chips
        if chips > 1:  # the cluster's workers run sharded ops' golden on a host mesh of that many devices
            os.environ.setdefault("OPBYOP_HOST_DEVICES", str(chips))
    except OpbyopError as e:
        _say(("error:", "red"), f" {e}")
        raise typer.Exit(2)
    run_id = run_id or new_run_id()
    command = AnalyzeCommand(names=names, config=config, run_id=run_id,
                             shrink=ShrinkOption(failing=shrink, seconds_per_op=shrink_seconds),
                             resume=resume_command(names, chip, workers, address, reuse, whole, timeout, run_id,
                                                   device_backend.value),
                             manifest=manifest, workspace_root=Workspace.default().root)
    service = None if address or workers else standing_service(command.workspace_root)
    if service is not None:  # no cluster asked for, and the workspace's `opbyop serve` runs: it runs the flow
        _run_on_service(command, service)
    else:
        _run_here(command, workers, address, chip)


def _run_here(command: AnalyzeCommand, workers: int | None, address: str | None, chip: str) -> None:
    """The flow in this process, on a server and a cluster started (or named) for this run."""
    launch = Launch(workers, address, chip, command.workspace_root / "logs")
    flow_thread: FlowThread | None = None
    try:
        launch.handoff.start_splits(command.config.models, command.config.seed)
        from flows.analyze import analyze as analyze_flow  # imported while the server and cluster start

        with console.status("starting: the Prefect server, the Dask cluster, the descriptor; exporting"):
            config = _on_address(command.config, launch.wait(busy_until=time.monotonic()))
        flow_thread = FlowThread("analyze-flow", lambda: analyze_flow(
            config=config, run_id=command.run_id, shrink=command.shrink, return_state=True), launch.handoff)
        flow_thread.start()
        _progress(flow_thread.running, Workspace(command.workspace_root).store, command.run_id)
    except KeyboardInterrupt:
        if flow_thread is None:
            flow_thread = FlowThread("analyze-flow", lambda: None, launch.handoff)
        flow_thread.stop(launch, command.resume)
    except OpbyopError as e:
        launch.close()
        _say(("error:", "red"), f" {e}")
        raise typer.Exit(1)
    try:
        _copy_manifest(command.workspace_root, command.run_id, command.manifest)
        _finish(flow_thread, command.resume)  # the outcome first, then the clean-up
    finally:
        launch.close()


def _on_address(config, address: str | None):  # noqa: ANN001, ANN202
    """The configuration with the cluster this CLI started (None: the one it was given)."""
    if not address:
        return config
    return config.model_copy(update={"cluster": config.cluster.model_copy(update={"address": address})})


def nightly(config_file: Optional[Path] = typer.Option(None, "--config", help="the nightly configuration "
                                                       "(default: configs/nightly.yaml)"),
            models: list[str] = typer.Option(None, "--model", help="only these models (repeat the option)"),
            expectations: Optional[Path] = typer.Option(None, "--expectations",
                                                        help="expected outcomes (default: configs/expectations.yaml)"),
            workers: Optional[int] = typer.Option(None, "--workers", min=1, help="LocalCluster workers (1 or more)"),
            address: Optional[str] = typer.Option(None, "--address", help="existing Dask scheduler "
                                                  "(default: $OPBYOP_DASK_ADDRESS; none: a LocalCluster)"),
            ) -> None:
    """Run the nightly flow once, now: every target of the nightly configuration, compared with the
    previous night and checked against the expectations. Without --workers and --address, a running
    `opbyop serve` of this workspace runs it on its server and cluster."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    _defaults_for_laptop()

    try:
        from flows.nightly import load_nightly  # prefect, dask: loaded only when used

        chosen = load_nightly(config_file)
    except OpbyopError as e:
        _say(("error:", "red"), f" {e}")
        raise typer.Exit(2)
    address = address or environment().dask_address
    chip = chosen.targets[0].chip if chosen.targets else "p150"  # the cluster's op workers warm up for it
    root = Workspace.default().root

    service = None if address or workers else standing_service(root)
    if service is not None:  # no cluster asked for, and the workspace's `opbyop serve` runs: it runs the nightly
        _nightly_on_service(root, service, config_file, models, expectations)
        return
    launch = Launch(workers, address, chip, root / "logs")
    resume = shlex.join(["opbyop", "nightly"] + (["--config", str(config_file)] if config_file else []))
    flow_thread: FlowThread | None = None
    try:
        from flows.nightly import nightly as nightly_flow  # prefect, dask: loaded only when used

        cluster = ClusterConfig(address=launch.wait(busy_until=time.monotonic()) or address, workers=workers)
        flow_thread = FlowThread("nightly-flow", lambda: nightly_flow(
            config_file=str(config_file) if config_file else None, models=models or None,
            expectations_file=str(expectations) if expectations else None, cluster=cluster, return_state=True),
            launch.handoff)
        flow_thread.start()
        _wait_while(flow_thread.running, 0.0)
    except KeyboardInterrupt:
        if flow_thread is None:
            flow_thread = FlowThread("nightly-flow", lambda: None, launch.handoff)
        flow_thread.stop(launch, resume)
    except OpbyopError as e:
        launch.close()
        _say(("error:", "red"), f" {e}")
        raise typer.Exit(1)
    try:
        if flow_thread.error is not None:
            _say(("the nightly failed:", "red"), f" {flow_thread.error}")
            raise typer.Exit(1)
        state = flow_thread.state
        _say(f"nightly: {state.name}")
        for line in (state.message or "").split("; "):
            _say(f"  {line}")
        if not state.is_completed():
            raise typer.Exit(1)
    finally:
        launch.close()


def _nightly_on_service(root: Path, service, config_file: Optional[Path], models: list[str] | None,  # noqa: ANN001
                        expectations: Optional[Path]) -> None:
    """Hand the nightly to `opbyop serve` and wait for its outcome; Ctrl-C asks the service to stop it."""
    import uuid

    request = NightlyRequest(run_id=f"nightly-{uuid.uuid4().hex[:12]}", client_pid=os.getpid(), models=models or None,
                             config_file=str(config_file.resolve()) if config_file else None,
                             expectations_file=str(expectations.resolve()) if expectations else None)
    _say(f"nightly on `opbyop serve` (pid {service.pid}, Prefect API {service.api_url})")
    ticket = Ticket(root, service, request)
    ticket.submit()
    try:
        _wait_while(lambda: ticket.outcome() is None, 0.2)
    except KeyboardInterrupt:
        _say(("interrupted:", "yellow"), " the service stores what was analysed and stops the nightly")
        _stop_and_wait(ticket)
        raise typer.Exit(130)
    except OpbyopError as e:
        _say(("error:", "red"), f" {e}")
        raise typer.Exit(1)
    outcome = ticket.outcome()
    _say(f"nightly: {outcome.state}")
    for line in outcome.message.split("; "):
        _say(f"  {line}")
    if not outcome.completed:
        raise typer.Exit(1)


def serve(chip: str = typer.Option("p150", "--chip", help="warm the op workers for this chip"),
          workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Dask workers (default: one per core)"),
          port: Optional[int] = typer.Option(None, "--port", min=1, max=65535,
                                             help="the Prefect server's port (default: a free one)"),
          ) -> None:
    """Keep a Prefect server, a warm Dask cluster and a warm flow process running for `opbyop analyze`
    and `opbyop nightly`.

    analyze and nightly in this workspace then hand their runs to them instead of starting their own. Ctrl-C (or
    SIGTERM) stops them."""
    _defaults_for_laptop()
    from flows.hosting.serve import Service, terminate_as_interrupt, warm_imports  # dask: loaded only when used

    terminate_as_interrupt()
    root = Workspace.default().root
    service = Service(root, chip, workers or os.cpu_count() or 1, port)
    try:
        record = service.start()
        warm_imports()
        _say(f"serving {root}: Prefect API {record.api_url} (UI {record.api_url.removesuffix('/api')}), Dask "
             f"scheduler {record.dask_address}, {record.workers} op workers warming up for {chip}")
        _say("`opbyop analyze` (and `opbyop nightly`) in this workspace now runs here; Ctrl-C stops the service")
        service.serve(on_run=lambda request, outcome: _say(f"run {request.run_id}: {outcome.state}"))
    except KeyboardInterrupt:
        _say("stopping the cluster and the server")
    except OpbyopError as e:
        _say(("error:", "red"), f" {e}")
        raise typer.Exit(1)
    finally:
        service.stop()


def register(app: typer.Typer) -> None:
    """The commands this package adds to `opbyop` (the entry point group opbyop.cli)."""
    app.command()(analyze)
    app.command()(nightly)
    app.command()(serve)


def _progress(running: Callable[[], bool], store_root: Path | str, run_id: str) -> None:
    """A progress bar fed from the store (results land there in batches) while `running()` says so;
    `running()` paces the loop (a short wait: the end shows at once), the store is read every
    PROGRESS_SECONDS (each read costs CPU the run could use)."""
    from storage.dataset import Store  # pyarrow: loaded only when used

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


def _run_on_service(command: AnalyzeCommand, service) -> None:  # noqa: ANN001
    """Hand the run to `opbyop serve`, show its progress from the store, then its summary. Ctrl-C
    asks the service to stop the run (what was analysed is stored) and prints how to resume it."""
    _say(f"run {command.run_id} on `opbyop serve` (pid {service.pid}, Prefect API {service.api_url})")
    ticket = Ticket(command.workspace_root, service, AnalyzeRequest(
        run_id=command.run_id, config=command.config, shrink=command.shrink, client_pid=os.getpid()))
    ticket.submit()
    outcome = None

    def running() -> bool:
        nonlocal outcome
        outcome = ticket.outcome()
        if outcome is None:
            time.sleep(0.1)
        return outcome is None

    try:
        _progress(running, Workspace(command.workspace_root).store, command.run_id)
    except KeyboardInterrupt:
        _say(("interrupted:", "yellow"), " the service stores what was analysed and stops the run")
        _stop_and_wait(ticket)
        _say(f"resume it with: {command.resume}")
        raise typer.Exit(130)
    except OpbyopError as e:
        _say(("error:", "red"), f" {e}")
        _say(f"resume it with: {command.resume}")
        raise typer.Exit(1)
    _copy_manifest(command.workspace_root, command.run_id, command.manifest)
    if outcome.summary is not None:
        _print(outcome.summary)
    if not outcome.completed:
        _say((f"{outcome.state}:", "red"), f" {outcome.message}")
        _say(f"resume it with: {command.resume}")
        raise typer.Exit(1)


def _copy_manifest(root: Path, run_id: str, target: Optional[Path]) -> None:
    """The run's manifest (opbyop.pipeline.write_manifest, beside the report) also at --manifest."""
    written = run_manifest_path(root, run_id)
    if target is None or not written.exists():
        return
    try:
        shutil.copyfile(written, target)
        _say(f"manifest: {target}")
    except OSError as e:
        _say(("error:", "red"), f" cannot write the manifest {target}: {e}")


def _finish(flow_thread: FlowThread, resume: str) -> None:
    if flow_thread.error is not None:
        _say(("the run failed:", "red"), f" {flow_thread.error}")
        _say(f"resume it with: {resume}")
        raise typer.Exit(1)
    state = flow_thread.state
    summary = summary_of(state.result(raise_on_failure=False))
    if summary is None:
        _say((f"{state.name}:", "red"), f" {state.message or ''}")
        _say(f"resume it with: {resume}")
        raise typer.Exit(1)
    _print(summary)
    if not state.is_completed():
        _say((f"{state.name}:", "red"), f" {summary.error or state.message or ''}")
        raise typer.Exit(1)


def _print(summary) -> None:  # noqa: ANN001
    table = Table("status", "unique ops", title=f"run {summary.run_id}")
    for status, n in sorted(summary.statuses.items(), key=lambda kv: -kv[1]):
        table.add_row(status, str(n))
    console.print(table)
    for model, status in summary.whole.items():
        _say(f"whole model {model}: {status}")
    for model, error in summary.model_errors.items():
        _say((f"{model}: {error}", "red"))
    _say(summary.line())
    if summary.phases:
        _say(f"time: {format_phases(summary.phases)}")
    if summary.report:
        _say(f"report: {summary.report}")
    _say(f"query it: opbyop sql \"SELECT status, count(*) FROM results WHERE run_id = '{summary.run_id}' GROUP BY 1\"")
