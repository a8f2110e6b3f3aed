"""`opbyop analyze`, `opbyop nightly` and `opbyop serve`: the flows on a laptop, nothing started by hand.

Each command parses its options into a request (flows/hosting/service.py), hands it to carry_out, the
one path of a run, and prints the outcome. A running `opbyop serve` of the workspace takes the request
when no cluster is asked for; otherwise it runs here, at once, side by side: a Prefect server (or the
one PREFECT_API_URL names), a LocalCluster whose op workers warm up (or the scheduler --address
names), and this process importing the flow, then the flow, in a thread of this process, run by the
same function the service runs (flows/hosting/requests.py). Either way a progress bar is fed from
the store (results land there in batches); at the end the summary, where the time went, and the
report's path.

Ctrl-C asks the flow to stop: what was analysed is stored, the run is marked failed, the server and
the cluster are stopped, and the command to resume the run is printed.
"""

from __future__ import annotations

import faulthandler
import os
import shlex
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from opbyop_flows.cli.cluster_need import ClusterNeed
from opbyop_flows.cli.early import Services, defaults_for_laptop, started_early
from opbyop_flows.cli.launching import FlowThread, Launch, stop_and_wait, wait_while
from opbyop_flows.cli.progress import console, copy_manifest, print_summary, progress_from_store, say
from opbyop_flows.engine.run_ids import group_run_ids, new_run_id
from opbyop_flows.hosting.requests import run_request, warm_flow
from opbyop_flows.hosting.service import AnalyzeOutcome, AnalyzeRequest, NightlyRequest, Ticket, standing_service
from opbyop.boards import DEFAULT_CHIP
from opbyop.cli.app import DeviceBackend, DeviceOption, positive_seconds
from opbyop.compiler_spec import SPEC_FORMS, CompilerSpec
from opbyop.cli.worker_options import (ChipOption, ExportMemory, ExportTimeout, MeshOption, PassTimingOption,
                                       UnshardOption, export_budget)
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


def analyze(ctx: typer.Context,
            models: list[str] = typer.Argument(None, help="zoo names, .mlir files, package.module:factory "
                                                          "(default: the zoo's 'default' tag)"),
            chip: str = ChipOption,
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
            mesh: Optional[str] = MeshOption, unshard: bool = UnshardOption, pass_timing: bool = PassTimingOption,
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
    root = Workspace.default().root
    request = AnalyzeRequest(run_id=run_id, config=config, client_pid=os.getpid(),
                             shrink=ShrinkOption(failing=shrink, seconds_per_op=shrink_seconds))
    resume = resume_command(names, chip, workers, address, reuse, whole, timeout, run_id, device_backend.value,
                            config.compilers)
    outcome = carry_out(request, Where(workers, address, chip, root, early), resume)
    copy_manifest(root, _progress_ids(request)[-1], manifest)  # a group's runs share their models: the last one's
    if outcome.summary is not None:
        print_summary(outcome.summary)
    if not outcome.completed:
        say((f"{outcome.state}:", "red"), f" {outcome.message}")
        say(f"resume it with: {resume}")
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
    request = NightlyRequest(run_id=f"nightly-{uuid.uuid4().hex[:12]}", client_pid=os.getpid(), models=models or None,
                             config_file=str(config_file.resolve()) if config_file else None,
                             expectations_file=str(expectations.resolve()) if expectations else None)
    resume = shlex.join(["opbyop", "nightly"] + (["--config", str(config_file)] if config_file else []))
    outcome = carry_out(request, Where(workers, address, chip, Workspace.default().root), resume)
    say(f"nightly: {outcome.state}")
    for line in outcome.message.split("; "):
        say(f"  {line}")
    if not outcome.completed:
        raise typer.Exit(1)


@dataclass
class Where:
    """Where a command's run goes: the workspace's `opbyop serve` unless a cluster is asked for (workers,
    address), else this process with a server and a cluster of its own (`early`: what main's early
    start began for the command)."""

    workers: int | None
    address: str | None
    chip: str  # the op workers of a cluster started here warm up for it
    root: Path
    early: Services | None = None


def carry_out(request: AnalyzeRequest | NightlyRequest, where: Where, resume: str) -> AnalyzeOutcome:
    """The one path of every run asked on the command line: handed to `opbyop serve`, or carried out
    here by the same function the service runs (flows/hosting/requests.py); either way its progress
    shown from the store (an analyze's), Ctrl-C stopping it (what was analysed is stored, `resume`
    printed, exit 130), and its outcome returned."""
    service = None if where.address or where.workers else standing_service(where.root)
    if service is not None:  # no cluster asked for, and the workspace's `opbyop serve` runs: it runs the flow
        if where.early:
            where.early.close()
        return _on_service(request, service, where.root, resume)
    return _here(request, where, resume)


def _progress_ids(request: AnalyzeRequest | NightlyRequest) -> list[str]:
    """The store's runs an analyze request makes (one per compiler build); a nightly shows no bar."""
    return group_run_ids(request.run_id, len(request.config.per_compiler())) if isinstance(request, AnalyzeRequest) \
        else []


def _wait(running, store_root, ids: list[str]) -> None:  # noqa: ANN001
    if ids:
        progress_from_store(running, store_root, ids)
    else:
        wait_while(running, 0.0)


def _on_service(request: AnalyzeRequest | NightlyRequest, service, root: Path, resume: str) -> AnalyzeOutcome:  # noqa: ANN001
    """Hand the run to `opbyop serve` and follow it; Ctrl-C asks the service to stop it."""
    what = "nightly" if isinstance(request, NightlyRequest) else f"run {request.run_id}"
    say(f"{what} on `opbyop serve` (pid {service.pid}, Prefect API {service.api_url})")
    ticket = Ticket(root, service, request)
    ticket.submit()
    outcome = None

    def running() -> bool:
        nonlocal outcome
        outcome = ticket.outcome()
        if outcome is None:
            time.sleep(0.1)
        return outcome is None

    try:
        _wait(running, Workspace(root).store, _progress_ids(request))
    except KeyboardInterrupt:
        noun = "nightly" if isinstance(request, NightlyRequest) else "run"
        say(("interrupted:", "yellow"), f" the service stores what was analysed and stops the {noun}")
        stop_and_wait(ticket)
        say(f"resume it with: {resume}")
        raise typer.Exit(130)
    except OpbyopError as e:
        say(("error:", "red"), f" {e}")
        say(f"resume it with: {resume}")
        raise typer.Exit(1)
    return outcome


def _here(request: AnalyzeRequest | NightlyRequest, where: Where, resume: str) -> AnalyzeOutcome:
    """The run in this process, on a server and a cluster started (or named) for it, the models split
    while they start."""
    compilers = request.config.compilers if isinstance(request, AnalyzeRequest) else None
    need = ClusterNeed(request.config, Workspace(where.root).store) if isinstance(request, AnalyzeRequest) else None
    launch = Launch(where.workers, where.address, where.chip, where.root / "logs", where.early, compilers, need)
    flow_thread: FlowThread | None = None
    try:
        if isinstance(request, AnalyzeRequest):
            config = request.config
            launch.handoff.splits.prefetch(config.models, config.seed, config.export, host_devices(config),
                                            weights=config.keeps_weights, reuse=config.reuse_cached,
                                            place=launch.exports())
        warm_flow(request)  # imported while the server and cluster start
        with console.status("starting: the Prefect server, the Dask cluster, the descriptor; exporting"):
            address = launch.wait(busy_until=time.monotonic()) or where.address
        flow_thread = FlowThread(f"run-{request.run_id}", lambda: run_request(request, launch.handoff, address), launch)
        flow_thread.start()
        _wait(flow_thread.running, Workspace(where.root).store, _progress_ids(request))
    except KeyboardInterrupt:
        if flow_thread is None:
            flow_thread = FlowThread(f"run-{request.run_id}", lambda: None, launch)
        flow_thread.stop(resume)
    except OpbyopError as e:
        launch.close()
        say(("error:", "red"), f" {e}")
        raise typer.Exit(1)
    try:
        if flow_thread.outcome is not None:
            return flow_thread.outcome
        return AnalyzeOutcome(run_id=request.run_id, state="Error", completed=False,
                              message=f"the run failed: {flow_thread.error}")
    finally:
        launch.close()


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
