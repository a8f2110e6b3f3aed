"""The Dask cluster a run uses: an existing scheduler by address, or a LocalCluster on loopback.

The scheduler of either kind gets opbyop's settings: a worker that dies fails the ops it held at once
(allowed-failures 0: tasks/ops.py re-runs each of them alone, instead of Dask retrying them together
on the next worker, which the culprit would kill too), and a worker is sent no ops beyond the one it
runs (worker-saturation 1.0). Each worker of a LocalCluster offers the export resource, one model's
export at a time (flows/hosting/cluster_exports.py), and is not a daemonic process, since an export
runs in a child of its own (frontends.isolation); a user's workers opt in the same way. A scheduler reads those settings at start-up, into attributes; on an
existing scheduler the attributes are set (and read back) through Client.run_on_scheduler.

`python -m opbyop_flows.hosting.cluster` is the LocalCluster the CLI starts in a child process at once, beside the
Prefect server and the export, warming its op workers before the flow asks for them
(flows/hosting/cluster_process.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

import dask
from distributed import Client, LocalCluster

from opbyop.compiler.builds import prepare
from opbyop.compiler.system_desc import resolve
from opbyop.compiler.targets import target_for
from opbyop.compiler_spec import INSTALLED
from opbyop.config import ClusterConfig
from opbyop.environment import environment
from opbyop.errors import OpbyopError
from opbyop.jaxenv import prepare_jax
from opbyop.worker import dask as on_dask
from opbyop.workspace import Workspace

SCHEDULER_SETTINGS = {"distributed.scheduler.allowed-failures": 0,
                      "distributed.scheduler.worker-saturation": 1.0}
WORKER_SETTINGS = {"distributed.worker.daemon": False,  # an export's child is a child of the Dask worker
                   # Dask's statistical profiler samples each worker's threads every 10 ms, for a
                   # dashboard opbyop does not open; on 2 cores that is CPU taken from the ops
                   "distributed.worker.profile.enabled": False}
_ATTRIBUTES = {"distributed.scheduler.allowed-failures": "allowed_failures",
               "distributed.scheduler.worker-saturation": "WORKER_SATURATION"}


def local_cluster(workers: int) -> LocalCluster:
    """Every listener on loopback; no dashboard (it would still open 8787 unless given a port); each
    worker takes exports, one at a time."""
    with dask.config.set({**SCHEDULER_SETTINGS, **WORKER_SETTINGS}):
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                            dashboard_address="127.0.0.1:0", resources={on_dask.EXPORT_RESOURCE: 1})


def apply_scheduler_settings(client: Client) -> None:
    """Set opbyop's settings on the scheduler the client talks to and check that they hold there."""
    wanted = {_ATTRIBUTES[k]: v for k, v in SCHEDULER_SETTINGS.items()}

    def configure(dask_scheduler, values=wanted):  # noqa: ANN001  (runs on the scheduler: pickled by value)
        for name, value in values.items():
            setattr(dask_scheduler, name, value)
        return {name: getattr(dask_scheduler, name) for name in values}

    try:
        actual = client.run_on_scheduler(configure)
    except Exception as e:
        raise OpbyopError(f"could not apply allowed-failures and worker-saturation on the Dask scheduler at "
                          f"{client.scheduler.address}: {type(e).__name__}: {e}",
                          "start that scheduler with DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0 and "
                          "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION=1.0 in its environment") from None
    if actual != wanted:
        raise OpbyopError(f"the Dask scheduler at {client.scheduler.address} kept {actual} instead of {wanted}",
                          "start that scheduler with DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0 and "
                          "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION=1.0 in its environment")


@contextmanager
def dask_client(config: ClusterConfig) -> Iterator[Client]:
    """A client for the run; a LocalCluster it started is closed with it, an existing one is not."""
    address = config.address or environment().dask_address
    if address:
        try:
            client = Client(address, set_as_default=True, timeout=30)
        except OSError as e:
            raise OpbyopError(f"no Dask scheduler answers at {address}: {e}",
                              "start it (dask scheduler), or leave the address empty for a local cluster") from None
        with client:
            apply_scheduler_settings(client)
            yield client
        return
    with local_cluster(config.workers or os.cpu_count() or 1) as cluster, \
            Client(cluster, set_as_default=True) as client:
        yield client


def serve(workers: int, chip: str, compiler_spec: str | None = None) -> None:
    """Run a LocalCluster until terminated; print its address; warm its op workers for `chip` and the
    build `compiler_spec` names (None: the installed plugin), the build the run that started it asks for."""
    with local_cluster(workers) as cluster, Client(cluster) as client:
        print(json.dumps({"address": cluster.scheduler_address}), flush=True)
        try:
            # the run's first build: a run of another build warms its own workers
            compiler = prepare(compiler_spec or INSTALLED)
            desc = resolve(chip, compiler=compiler)
            plugin = on_dask.OpWorkerPlugin.for_home(Workspace.default().root, {desc.chip: desc.path.read_bytes()},
                                                     host_devices=target_for(chip).chips,
                                                     compiler=compiler)  # the run's own plugin
            client.register_plugin(plugin)
            client.run(on_dask.warm_up, plugin.name, desc.chip)
        except Exception as e:  # the flow's own warm-up meets the same error and reports it
            print(f"warm-up failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        threading.Event().wait()  # until SIGTERM, from the CLI or from its supervisor when the CLI dies


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="a LocalCluster for one CLI run (see flows/hosting/cluster_process.py)")
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--chip", required=True)
    parser.add_argument("--compiler", help="the spec of the build whose op workers it warms (default: installed)")
    args = parser.parse_args(argv)

    prepare_jax()
    serve(args.workers, args.chip, args.compiler)


if __name__ == "__main__":
    main()
