"""Who may have work on the Dask cluster at a time: every op at once, or one op alone.

When a Dask worker dies, every op it held fails with it, although at most one of them killed it.
Each of those ops is run once more ALONE (no other op anywhere on the cluster), so a second death
can only be its own doing. A shared/exclusive lock in the flow's process does that: op tasks hold it
shared while their work is on the cluster; a re-run takes it exclusively (waiting for the ops in
flight, holding back new ones, which retries rarely cost). Closing the gate (the run is being
stopped) makes every waiter give up at once, cancels the work in flight and kills the op workers
running it (on_dask.abort_in_flight, by the run's tag). A cluster that is lost loses its gate
(lose()): the waiters give up at once and nothing more is asked of the cluster, which cannot answer;
a run whose cluster is started again hands its work out through a new gate.
"""

from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from opbyop.worker import dask as on_dask

if TYPE_CHECKING:
    from distributed import Client


class GateClosed(RuntimeError):
    """The run is stopping, or its cluster was lost: no new work goes through this gate."""


class ClusterGate:
    def __init__(self, client: Client | None = None, plugin: str = "") -> None:
        """`client`: the Dask client the run's work goes through; `plugin`: the op workers' Dask
        plugin there. With both, close() also kills the op workers busy with the run's ops."""
        self.client, self.plugin = client, plugin
        self.tag = uuid.uuid4().hex  # sent with the run's work: on_dask.abort_in_flight stops only this run's
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting_exclusive = 0  # writers first: a retry is not starved by the stream of ops
        self._closed = False
        self.lost = False  # the cluster is gone (lose())
        self.why = "the run is stopping"  # what GateClosed says
        self._in_flight: set[Any] = set()  # Dask futures, cancelled on close

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: self._closed or not (self._exclusive or self._waiting_exclusive))
            self._check_open()
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting_exclusive += 1
            try:
                self._cond.wait_for(lambda: self._closed or not (self._exclusive or self._shared))
            finally:
                self._waiting_exclusive -= 1
            self._check_open()
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()

    @contextmanager
    def in_flight(self, future: Any) -> Iterator[None]:
        """Track a Dask future while its result is awaited, so that close() can cancel it."""
        with self._cond:
            if self._closed:
                future.cancel()
            self._in_flight.add(future)
        try:
            yield
        finally:
            with self._cond:
                self._in_flight.discard(future)

    def lose(self) -> None:
        """The cluster is gone: every waiter gives up at once (GateClosed), and nothing is asked of
        the cluster (Dask cancelled the futures in flight when it lost the scheduler)."""
        with self._cond:
            self._closed = self.lost = True
            self.why = "the Dask cluster was lost"
            self._cond.notify_all()

    def close(self) -> str:
        """Stop the run's work: waiters give up, futures are cancelled, and the op workers still
        busy with this run's ops are killed (a cancelled future does not stop a running op, which
        would hold its Dask worker up to the op's timeout on a cluster that outlives the run); the
        op workers refuse the run's ops that start later. Says what it stopped, for the run's log."""
        with self._cond:
            self._closed = True
            futures = list(self._in_flight)
            self._cond.notify_all()
        if self.lost:
            return f"{len(futures)} task(s) lost with the cluster"
        for future in futures:
            try:
                if future.client.status == "running":  # a client that lost its scheduler would wait for it
                    future.cancel()
            except Exception:  # the cluster may already be gone: nothing left to cancel
                pass
        if self.client is None or not self.plugin or self.client.status != "running":
            return f"{len(futures)} task(s) cancelled"
        try:  # also when nothing is awaited now: a task may be starting on a worker as we speak
            killed = sum(self.client.run(on_dask.abort_in_flight, self.plugin, self.tag).values())
        except Exception as e:  # a cluster that is going away stops them anyway
            return f"{len(futures)} task(s) cancelled; the op workers could not be told ({type(e).__name__}: {e})"
        return f"{len(futures)} task(s) cancelled, {killed} op worker(s) busy with them killed (restarted on next use)"

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise GateClosed(self.why)
