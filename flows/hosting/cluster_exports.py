"""Models exported on the run's Dask cluster: each one a Dask task on a worker that offers the export
resource (opbyop.run.worker_exports), so workers on every host export, one model at a time each, and the
process that runs the flow coordinates.

The run's split thread (opbyop.run.models.Splits) hands a model here only when it must be exported;
a kept export is checked and read in the run's own process (milliseconds, and no cluster needed). A
thread per model in flight waits for its task; the cluster's resources, not these threads, bound how
many export at once. Exports go before ops (a higher Dask priority): every op of a model waits for
its export, no export waits for an op.

A cluster none of whose workers offers the resource (a user's scheduler whose workers were started
without it) refuses, once and in the run's log with the fix: its models export in the run's own
process, as does a model whose task the cluster lost (opbyop.run.models hands it back)."""

from __future__ import annotations

import logging
import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from distributed import Client

from opbyop.frontends.specs import recorded_name
from opbyop.run.models import ModelAsk, PlaceRefused, SplitOutcome
from opbyop.worker.dask import EXPORT_RESOURCE
from opbyop.run.worker_exports import prepare_on_worker

EXPORTS_IN_FLIGHT = 256  # threads that wait on export tasks (the cluster's export resources bound what runs)
EXPORT_PRIORITY = 1  # above the ops' (0): an export is what a model's ops wait for

log = logging.getLogger("opbyop.exports")


def offers_exports(client: Client) -> bool:
    """Whether a worker of the client's cluster offers the export resource."""
    return any(EXPORT_RESOURCE in (worker.get("resources") or {})
               for worker in client.scheduler_info()["workers"].values())


class ClusterExports:
    """The run's Dask cluster as the place its models are exported (opbyop.run.models.ExportPlace).
    `address()` gives the scheduler's address, starting the cluster if need be (called on the first
    export only: a run whose exports are all kept starts nothing for them); a cluster that does not
    answer within `connect_timeout` seconds hands the export back."""

    def __init__(self, address: Callable[[], str], logger: logging.Logger | logging.LoggerAdapter = log,
                 connect_timeout: float = 30.0):
        self._address = address
        self._connect_timeout = connect_timeout
        self._logger = logger
        self._pool = ThreadPoolExecutor(EXPORTS_IN_FLIGHT, thread_name_prefix="cluster-export")
        self._lock = threading.Lock()
        self._client: Client | None = None
        self._refused: str | None = None

    def prepare(self, ask: ModelAsk) -> Future:
        return self._pool.submit(self._export, ask)

    def _export(self, ask: ModelAsk) -> SplitOutcome:
        future = self._connected().submit(prepare_on_worker, ask, resources={EXPORT_RESOURCE: 1}, pure=False,
                                          priority=EXPORT_PRIORITY,
                                          key=f"export-{recorded_name(ask.spec)}-{uuid.uuid4().hex[:8]}")
        try:
            return future.result()
        finally:
            future.release()

    def _connected(self) -> Client:
        """The client (connected on first use, again after a lost cluster); PlaceRefused when no worker
        offers the export resource."""
        with self._lock:
            if self._refused is not None:
                raise PlaceRefused(self._refused)
            if self._client is None or self._client.status != "running":
                if self._client is not None:
                    self._client.close()
                self._client = Client(self._address(), set_as_default=False, timeout=self._connect_timeout)
            if not offers_exports(self._client):
                address = self._client.scheduler.address
                self._refused = (f"no Dask worker at {address} offers the `{EXPORT_RESOURCE}` resource; fix: start "
                                 f"workers that may export with `dask worker {address} --resources {EXPORT_RESOURCE}=1`"
                                 " and DASK_DISTRIBUTED__WORKER__DAEMON=False in their environment")
                self._logger.warning("models export in the run's own process: %s", self._refused)
                raise PlaceRefused(self._refused)
            return self._client

    def close(self) -> None:
        """Let go of the client; exports still waiting are handed back (none, once a run has its models)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
