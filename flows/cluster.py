"""The Dask cluster a run uses: an existing scheduler by address, or a LocalCluster on loopback."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import dask
from distributed import Client, LocalCluster

from opbyop.config import ClusterConfig

ADDRESS_ENV = "OPBYOP_DASK_ADDRESS"


@contextmanager
def dask_client(config: ClusterConfig) -> Iterator[Client]:
    """A client for the run; a LocalCluster it started is closed with it, an existing one is not."""
    address = config.address or os.environ.get(ADDRESS_ENV)
    # A worker that dies running an op fails that op at once (recorded as crashed) instead of
    # being retried on the next worker, which the same op would kill too; and a worker holds only
    # the op it runs (no queued extra), so its death costs no other op.
    with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                          "distributed.scheduler.worker-saturation": 1.0}):
        if address:
            with Client(address, set_as_default=True) as client:
                yield client
            return
        workers = config.workers or os.cpu_count() or 1
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=None) as cluster, Client(cluster, set_as_default=True) as client:
            yield client
