"""`opbyop analyze`, `opbyop nightly` and `opbyop serve`: the flows on a laptop, nothing started by hand.

At once, side by side: a Prefect server (or the one PREFECT_API_URL names), a LocalCluster whose op
workers warm up (or the scheduler --address names), and this process importing the flow. Then the
flow, in a thread of this process, with a progress bar fed from the store (results land there in
batches); at the end the summary, where the time went, and the report's path. A running `opbyop
serve` of the workspace takes the run instead when no cluster is asked for.

Ctrl-C asks the flow to stop: what was analysed is stored, the run is marked failed, the server and
the cluster are stopped, and the command to resume the run is printed.
"""

from __future__ import annotations

import faulthandler
import os
import shlex
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import typer

from opbyop_flows.cli.early import Services, defaults_for_laptop, started_early
from opbyop_flows.cli.launching import FlowThread, Launch, stop_and_wait, wait_while
from opbyop_flows.cli.progress import console, copy_manifest, print_summary, progress_from_store, say
from opbyop_flows.engine.run_ids import group_run_ids, new_run_id
from opbyop_flows.engine.summary import summary_of
from opbyop_flows.hosting.service import AnalyzeRequest, NightlyRequest, Ticket, standing_service
from opbyop.cli.app import DeviceBackend, DeviceOption, positive_seconds
from opbyop.boards import DEFAULT_CHIP, chip_help, mesh_help
from opbyop.compiler_spec import SPEC_FORMS, CompilerSpec
from opbyop.cli.worker_options import ExportMemory, ExportTimeout, export_budget
from opbyop.compiler.targets import target_for
from opbyop.config import AnalysisConfig, ClusterConfig, DeviceOptions, ShrinkOption, load_zoo
from opbyop.environment import environment
from opbyop.errors import OpbyopError
from opbyop.run.plan import host_devices
from opbyop.workspace import Workspace


def resume_command(names: list[str], chip: str, workers: int | None, address: str | None, reuse: bool, whole: bool,
                   timeout: float, run_id: str, device: str = "model", compilers: list[str] | None = None) -> str:
    words = ["opbyop", "analyze", *names, "--chip", chip]
    words += [w for spec in compilers or [] if spec != "installed" or len(compilers) > 1 for w in ("--compiler", spec)]
    words += ["--workers", str(workers)] if workers else []
    words += ["--address", address] if address else []
    words += [] if reuse else ["--no-reuse"]
    words += [] if whole else ["--no-whole"]
    words += ["--timeout", f"{timeout:g}"] if timeout != 120.0 else []
    words += ["--device", device] if device != "model" else []
    return shlex.join(words + ["--run-id", run_id])


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

    @property
    def run_ids(self) -> list[str]:
        """The store's runs of this command: one per compiler build."""
        return group_run_ids(self.run_id, len(self.config.per_compiler()))


def analyze(ctx: typer.Context,
            models: list[str] = typer.Argument(None, help="zoo names, .mlir files, package.module:factory "
                                                          "(default: the zoo's 'default' tag)"),
            chip: str = typer.Option(DEFAULT_CHIP, "--chip", help=chip_help()),
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
            export_memory: Optional[float] = ExportMemory, export_timeout: float = ExportTimeout,
            compilers: list[str] = typer.Option(None, "--compiler", help=f"the compiler build under test: {SPEC_FORMS}. "
                                                "Repeat it: each build analyses every op, each a run of its own, "
                                                "compared op by op with the one before (default: installed)"),
            ) -> None:
    """Run the analyze flow: every op of MODELS compiled, simulated and checked, results stored."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 PID: where a stuck run is
    defaults_for_laptop()
    early = started_early(ctx.obj)  # the server and cluster main's early start began for this command

    address = address or environment().dask_address  # an existing cluster: none is started here
    try:
        names = models or [m.name for m in load_zoo().tagged("default")]
        for spec in compilers or []:
            CompilerSpec.parse(spec)  # a spec that names no build fails here, before anything starts
        config = AnalysisConfig(models=names, chip=chip, compilers=compilers or ["installed"], reuse_cached=reuse,
                                whole_model=whole,
                                op_timeout_s=timeout, cluster=ClusterConfig(address=address, workers=workers),
                                mesh=mesh, unshard=unshard, pass_timing=1.0 if pass_timing else 0.0,
                                device=DeviceOptions(backend=device_backend.value),
                                export=export_budget(export_memory, export_timeout))
        target_for(chip, mesh)  # a --chip or --mesh that names no target fails here, before anything starts
    except OpbyopError as e:
        if early:
            early.close()
        say(("error:", "red"), f" {e}")
        raise typer.Exit(2)
    run_id = run_id or new_run_id()
    command = AnalyzeCommand(names=names, config=config, run_id=run_id,
                             shrink=ShrinkOption(failing=shrink, seconds_per_op=shrink_seconds),
                             resume=resume_command(names, chip, workers, address, reuse, whole, timeout, run_id,
                                                   device_backend.value, config.compilers),
                             manifest=manifest, workspace_root=Workspace.default().root)
    service = None if address or workers else standing_service(command.workspace_root)
    if service is not None:  # no cluster asked for, and the workspace's `opbyop serve` runs: it runs the flow
        if early:
            early.close()
        _run_on_service(command, service)
    else:
        _run_here(command, workers, address, chip, early)


def _run_here(command: AnalyzeCommand, workers: int | None, address: str | None, chip: str,
              early: Services | None) -> None:
    """The flow in this process, on a server and a cluster started (or named) for this run (`early`:
    what main's early start began, adopted if it was for the same)."""
    launch = Launch(workers, address, chip, command.workspace_root / "logs", early, command.config.compilers)
    flow_thread: FlowThread | None = None
    try:
        launch.handoff.start_splits(command.config.models, command.config.seed, host_devices(command.config),
                                    command.config.export)
        from opbyop_flows.analyze import analyze as analyze_flow  # imported while the server and cluster start

        with console.status("starting: the Prefect server, the Dask cluster, the descriptor; exporting"):
            config = _on_address(command.config, launch.wait(busy_until=time.monotonic()))
        flow_thread = FlowThread("analyze-flow", lambda: analyze_flow(
            config=config, run_id=command.run_id, shrink=command.shrink, return_state=True), launch)
        flow_thread.start()
        progress_from_store(flow_thread.running, Workspace(command.workspace_root).store, command.run_ids)
    except KeyboardInterrupt:
        if flow_thread is None:
            flow_thread = FlowThread("analyze-flow", lambda: None, launch)
        flow_thread.stop(command.resume)
    except OpbyopError as e:
        launch.close()
        say(("error:", "red"), f" {e}")
        raise typer.Exit(1)
    try:
        copy_manifest(command.workspace_root, command.run_id, command.manifest)
        _finish(flow_thread, command.resume)  # the outcome first, then the clean-up
    finally:
        launch.close()


def _on_address(config, address: str | None):  # noqa: ANN001, ANN202
    """The configuration with the cluster this CLI started (None: the one it was given)."""
    if not address:
        return config
    return config.model_copy(update={"cluster": config.cluster.model_copy(update={"address": address})})


def _run_on_service(command: AnalyzeCommand, service) -> None:  # noqa: ANN001
    """Hand the run to `opbyop serve`, show its progress from the store, then its summary. Ctrl-C
    asks the service to stop the run (what was analysed is stored) and prints how to resume it."""
    say(f"run {command.run_id} on `opbyop serve` (pid {service.pid}, Prefect API {service.api_url})")
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
        progress_from_store(running, Workspace(command.workspace_root).store, command.run_ids)
    except KeyboardInterrupt:
        say(("interrupted:", "yellow"), " the service stores what was analysed and stops the run")
        stop_and_wait(ticket)
        say(f"resume it with: {command.resume}")
        raise typer.Exit(130)
    except OpbyopError as e:
        say(("error:", "red"), f" {e}")
        say(f"resume it with: {command.resume}")
        raise typer.Exit(1)
    copy_manifest(command.workspace_root, command.run_id, command.manifest)
    if outcome.summary is not None:
        print_summary(outcome.summary)
    if not outcome.completed:
        say((f"{outcome.state}:", "red"), f" {outcome.message}")
        say(f"resume it with: {command.resume}")
        raise typer.Exit(1)


def _finish(flow_thread: FlowThread, resume: str) -> None:
    if flow_thread.error is not None:
        say(("the run failed:", "red"), f" {flow_thread.error}")
        say(f"resume it with: {resume}")
        raise typer.Exit(1)
    state = flow_thread.state
    summary = summary_of(state.result(raise_on_failure=False))
    if summary is None:
        say((f"{state.name}:", "red"), f" {state.message or ''}")
        say(f"resume it with: {resume}")
        raise typer.Exit(1)
    print_summary(summary)
    if not state.is_completed():
        say((f"{state.name}:", "red"), f" {summary.error or state.message or ''}")
        raise typer.Exit(1)


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
    defaults_for_laptop()

    try:
        from opbyop_flows.nightly import load_nightly  # prefect, dask: loaded only when used

        chosen = load_nightly(config_file)
    except OpbyopError as e:
        say(("error:", "red"), f" {e}")
        raise typer.Exit(2)
    address = address or environment().dask_address
    chip = chosen.targets[0].chip if chosen.targets else DEFAULT_CHIP  # the cluster's op workers warm up for it
    root = Workspace.default().root

    service = None if address or workers else standing_service(root)
    if service is not None:  # no cluster asked for, and the workspace's `opbyop serve` runs: it runs the nightly
        _nightly_on_service(root, service, config_file, models, expectations)
        return
    launch = Launch(workers, address, chip, root / "logs")
    resume = shlex.join(["opbyop", "nightly"] + (["--config", str(config_file)] if config_file else []))
    flow_thread: FlowThread | None = None
    try:
        from opbyop_flows.nightly import nightly as nightly_flow  # prefect, dask: loaded only when used

        cluster = ClusterConfig(address=launch.wait(busy_until=time.monotonic()) or address, workers=workers)
        flow_thread = FlowThread("nightly-flow", lambda: nightly_flow(
            config_file=str(config_file) if config_file else None, models=models or None,
            expectations_file=str(expectations) if expectations else None, cluster=cluster, return_state=True),
            launch)
        flow_thread.start()
        wait_while(flow_thread.running, 0.0)
    except KeyboardInterrupt:
        if flow_thread is None:
            flow_thread = FlowThread("nightly-flow", lambda: None, launch)
        flow_thread.stop(resume)
    except OpbyopError as e:
        launch.close()
        say(("error:", "red"), f" {e}")
        raise typer.Exit(1)
    try:
        if flow_thread.error is not None:
            say(("the nightly failed:", "red"), f" {flow_thread.error}")
            raise typer.Exit(1)
        state = flow_thread.state
        say(f"nightly: {state.name}")
        for line in (state.message or "").split("; "):
            say(f"  {line}")
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
    say(f"nightly on `opbyop serve` (pid {service.pid}, Prefect API {service.api_url})")
    ticket = Ticket(root, service, request)
    ticket.submit()
    try:
        wait_while(lambda: ticket.outcome() is None, 0.2)
    except KeyboardInterrupt:
        say(("interrupted:", "yellow"), " the service stores what was analysed and stops the nightly")
        stop_and_wait(ticket)
        raise typer.Exit(130)
    except OpbyopError as e:
        say(("error:", "red"), f" {e}")
        raise typer.Exit(1)
    outcome = ticket.outcome()
    say(f"nightly: {outcome.state}")
    for line in outcome.message.split("; "):
        say(f"  {line}")
    if not outcome.completed:
        raise typer.Exit(1)


def serve(chip: str = typer.Option(DEFAULT_CHIP, "--chip", help="warm the op workers for this chip"),
          workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Dask workers (default: one per core)"),
          port: Optional[int] = typer.Option(None, "--port", min=1, max=65535,
                                             help="the Prefect server's port (default: a free one)"),
          ) -> None:
    """Keep a Prefect server, a warm Dask cluster and a warm flow process running for `opbyop analyze`
    and `opbyop nightly`.

    analyze and nightly in this workspace then hand their runs to them instead of starting their own. Ctrl-C (or
    SIGTERM) stops them."""
    defaults_for_laptop()
    from opbyop_flows.hosting.serve import Service, terminate_as_interrupt, warm_imports  # dask: loaded only when used

    terminate_as_interrupt()
    root = Workspace.default().root
    service = Service(root, chip, workers or os.cpu_count() or 1, port)
    try:
        record = service.start()
        warm_imports()
        say(f"serving {root}: Prefect API {record.api_url} (UI {record.api_url.removesuffix('/api')}), Dask "
             f"scheduler {record.dask_address}, {record.workers} op workers warming up for {chip}")
        say("`opbyop analyze` (and `opbyop nightly`) in this workspace now runs here; Ctrl-C stops the service")
        service.serve(on_run=lambda request, outcome: say(f"run {request.run_id}: {outcome.state}"))
    except KeyboardInterrupt:
        say("stopping the cluster and the server")
    except OpbyopError as e:
        say(("error:", "red"), f" {e}")
        raise typer.Exit(1)
    finally:
        service.stop()


def register(app: typer.Typer) -> None:
    """The commands this package adds to `opbyop` (the entry point group opbyop.cli)."""
    app.command()(analyze)
    app.command()(nightly)
    app.command()(serve)
