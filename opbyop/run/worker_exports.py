"""A model's export and split as a task of the run's Dask cluster (flows/hosting/cluster_exports.py
sends them): on a worker that offers opbyop.worker.dask.EXPORT_RESOURCE, so that each worker takes one heavy export
at a time, in the same budgeted child as in the run's own process (frontends.isolation)."""

from __future__ import annotations

import multiprocessing
import os
import socket

from opbyop.run.models import ModelAsk, PlaceRefused, SplitOutcome


def prepare_on_worker(ask: ModelAsk) -> SplitOutcome:
    """Runs on a Dask worker: the model exported (or its kept export taken) and split there. A worker
    that cannot start the export's child refuses (PlaceRefused): the run exports it itself."""
    where = f"{socket.gethostname()} (pid {os.getpid()})"
    if multiprocessing.current_process().daemon:
        raise PlaceRefused(f"the Dask worker on {where} is a daemonic process, which cannot start an export's "
                           "child; fix: start the workers that offer the export resource with "
                           "DASK_DISTRIBUTED__WORKER__DAEMON=False")
    outcome = ask.prepared()
    if outcome.graph is not None:
        outcome.graph.notes.append(f"prepared on the Dask worker on {where} in {outcome.seconds:.1f} s")
    return outcome
