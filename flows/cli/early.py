"""`opbyop analyze`'s Prefect server, started first thing: before the command line is built (its
imports take seconds on 2 cores), so that it starts while this process imports; and its Dask cluster,
started as soon as a thread of its own finds a model of the command that will be exported, else left
to the command's Launch: at once when the run will want it soon, or on the run's first need
(flows/cli/cluster_need.py).

`opbyop`'s main calls `prepare(argv)` before anything else and hands what it returns to the command as
typer's context object; the arguments are read loosely here (only --workers, --address, --chip, the
first --compiler, whose op workers the cluster warms, --whole and --reuse, and the words that may name
models; the command line parses them properly later).
The command's Launch (flows/cli/launching.py) adopts what was started when it asks for the same, and
stops it otherwise; either way it is tied to this process (flows/hosting/tied.py). Nothing starts early
when a Prefect API is configured (nothing to start), when the workspace has a `opbyop serve` record
(the service may take the run) or when the command is asked for its help.
"""

from __future__ import annotations

import argparse
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from opbyop_flows.hosting.cluster_process import ClusterProcess
from opbyop_flows.hosting.server import PrefectApi, configured_api_url
from opbyop_flows.hosting.service_record import record_path
from opbyop_flows.hosting.settings import apply_defaults
from opbyop.boards import DEFAULT_CHIP
from opbyop.compiler_spec import INSTALLED
from opbyop.environment import environment, workspace_root



@dataclass
class Services:
    """A run's Prefect server and Dask cluster (either may be someone else's: then not started here),
    and the command options they were started for."""

    workers: int | None
    address: str | None  # --address, or the environment's scheduler
    chip: str
    log_dir: Path
    compiler: str  # the spec of the build the cluster's op workers warm for
    api: PrefectApi
    cluster: ClusterProcess | None

    def close(self) -> None:
        for child in (self.cluster, self.api):
            if child is not None:
                child.close(wait=False)


def defaults_for_laptop() -> None:
    """The product's Prefect settings, and quiet logs: the progress bar tells the story."""
    apply_defaults()
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")


def prepare(argv: list[str]) -> Services | None:
    """Start analyze's server now if `argv` is an analyze command that will want it, and its cluster
    too as soon as a model of it is found to be exported (flows/cli/cluster_need.py; the command's
    Launch tells the rest of the cluster's need)."""
    options = _analyze_options(argv)
    if options is None or configured_api_url() or record_path(workspace_root()).exists():
        return None
    defaults_for_laptop()  # in the server's and the cluster's environment too, as analyze would set them
    services = start(options.workers, options.address or environment().dask_address, options.chip,
                     workspace_root() / "logs", (options.compiler or [INSTALLED])[0])
    if services.cluster is not None:
        words = [word for word in argv[1:] if not word.startswith("-")]  # the models, and options' values
        threading.Thread(target=_start_if_exporting, args=(services.cluster, words, options.whole, options.reuse),
                         name="early-exports", daemon=True).start()
    return services


def _start_if_exporting(cluster: ClusterProcess, specs: list[str], weights: bool, reuse: bool) -> None:
    """Start the cluster if one of `specs` will be exported (beside this process's imports)."""
    # deferred: the frontends, MLIR and the store load in this thread while the command line imports
    from opbyop_flows.cli.cluster_need import exported
    from opbyop.config import AnalysisConfig

    try:
        wanted = exported(specs, AnalysisConfig.model_fields["seed"].default, weights, reuse) is not None
    except Exception:  # noqa: BLE001  (a guess only: the command's Launch tells the cluster's need again)
        wanted = False
    if wanted:
        cluster.start()


def start(workers: int | None, address: str | None, chip: str, log_dir: Path, compiler: str = INSTALLED) -> Services:
    """A Prefect server (none when an API is configured), starting in the background, and a LocalCluster
    (none when `address` names a scheduler) whose op workers warm for the build `compiler` names, not
    started yet: the command's Launch starts it at once or when the run first needs it."""
    api = PrefectApi(log_dir)
    if api.started_here:  # before Prefect is imported, which reads it once
        os.environ["PREFECT_API_URL"] = api.url or ""
    cluster = None if address else ClusterProcess(workers or os.cpu_count() or 1, chip, log_dir, compiler, start=False)
    return Services(workers, address, chip, log_dir, compiler, api, cluster)


def adopt(started: Services | None, workers: int | None, address: str | None, chip: str,
          log_dir: Path, compiler: str = INSTALLED) -> Services | None:
    """What `prepare` started, if it was for these options (the caller owns it from now on); anything
    else it started is stopped."""
    if started is None:
        return None
    if (started.workers, started.address, started.chip, started.log_dir, started.compiler) != \
            (workers, address, chip, log_dir, compiler):
        started.close()
        return None
    return started


def started_early(prepared: object) -> Services | None:
    """The early start among what the plugins' `prepare` returned (typer's context object)."""
    return next((p for p in prepared or () if isinstance(p, Services)), None)


def _analyze_options(argv: list[str]) -> argparse.Namespace | None:
    """analyze's --workers, --address, --chip and --compiler (None: not an analyze command, its help, or
    options this loose reading cannot tell: the command line then starts everything itself)."""
    if not argv or argv[0] != "analyze" or {"--help", "-h"} & set(argv):
        return None
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--workers", type=int)
    parser.add_argument("--address")
    parser.add_argument("--chip", default=DEFAULT_CHIP)
    parser.add_argument("--compiler", action="append")
    parser.add_argument("--whole", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--reuse", action=argparse.BooleanOptionalAction, default=True)
    try:
        options, _ = parser.parse_known_args(argv[1:])
    except (argparse.ArgumentError, SystemExit):
        return None
    return options if options.workers is None or options.workers >= 1 else None
