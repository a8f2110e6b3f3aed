"""What one CLI run starts and stops together: the Prefect server and the Dask cluster (Launch), the
flow in a thread of this process (FlowThread; the main thread stays free for Ctrl-C), and the
waits between them. The server and the cluster are tied to this process: they die with it even on
kill -9 (flows/hosting/tied.py)."""

from __future__ import annotations

import os
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn

import psutil
import typer

from opbyop_flows.cli.cluster_need import ClusterNeed
from opbyop_flows.cli.early import Services, adopt, start
from opbyop_flows.engine.phases import BESIDE, OTHER
from opbyop_flows.hosting.handoff import Handoff, handing_off
from opbyop_flows.hosting.server import drain_prefect, without_heartbeats
from opbyop_flows.cli.progress import say
from opbyop.compiler.assets import Notices
from opbyop.compiler.builds import Compiler, prepare
from opbyop.compiler.system_desc import SystemDesc, resolve
from opbyop.compiler_spec import INSTALLED
from opbyop.errors import OpbyopError
from opbyop.run.models import ExportPlace

STOP_GRACE_SECONDS = 20.0  # how long Ctrl-C waits for the flow to store what it has before leaving


class Launch:
    """What one CLI run starts, all at once from this (the main) thread, and stops together: the
    Prefect server and the Dask cluster (adopted when flows/cli/early.py made them for this run
    before the command line's imports); beside them each compiler build is prepared and the chip's
    system descriptor made for it if this is their first use (said on screen, with why).

    The cluster starts at once, unless `analysis` is the run's and flows/cli/cluster_need.py finds
    that the run will likely not want it (its store holding the same run): then on the run's first
    need (the first export placed on it, the first op handed out)."""

    def __init__(self, workers: int | None, address: str | None, chip: str, log_dir: Path,
                 started: Services | None = None, compilers: list[str] | None = None,
                 analysis: ClusterNeed | None = None):
        # what main started before the command line's imports, if it was for this run; else made now;
        # its cluster's op workers warm for the run's first build
        first = (compilers or [INSTALLED])[0]
        started = (adopt(started, workers, address, chip, log_dir, first)
                   or start(workers, address, chip, log_dir, first))
        self.api, self.cluster = started.api, started.cluster
        if self.cluster is not None and analysis is None:
            self.cluster.start()
        self.address = address  # a user's scheduler (None: the cluster started for the run)
        self._exports: ExportPlace | None = None
        self.handoff = Handoff(started=_process_started(), cluster=self.cluster)  # a run that loses it restarts it
        self._waits = {"server": _Started.watch(self.api.wait, self.handoff.started)}
        if self.cluster is not None and self.cluster.started:
            self._waits["cluster"] = _Started.watch(self.cluster.wait, self.handoff.started)
        self.notices = Notices(say=lambda text: say(text))
        self._waits["descriptor"] = _Started.watch(lambda: self._descriptors(chip, compilers or [INSTALLED], analysis),
                                                   self.handoff.started)

    def _descriptors(self, chip: str, compilers: list[str], analysis: ClusterNeed | None) -> list[SystemDesc]:
        """Each compiler build prepared (its first use on a machine fetches and starts it) and its
        descriptor; once the run's first build is known, its cluster started if the run wants it soon
        (unless the early start's look at the command's models started it already)."""
        prepared = [prepare(spec, self.notices) for spec in compilers]
        if analysis is not None and self.cluster is not None and not self.cluster.started:
            threading.Thread(target=self._start_if_wanted, args=(analysis, prepared[0]), name="cluster-need",
                             daemon=True).start()
        return [resolve(chip, notices=self.notices, compiler=compiler) for compiler in prepared]

    def _start_if_wanted(self, analysis: ClusterNeed, compiler: Compiler) -> None:
        try:
            wanted = analysis.why(compiler) is not None
        except Exception:  # noqa: BLE001  (a store or a kept export that cannot be read: the run will tell)
            wanted = True
        if wanted:
            self.cluster.start()

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

    def exports(self) -> ExportPlace:
        """The run's cluster as the place its models export, as soon as it answers (a client of its own,
        closed with the launch)."""
        # distributed: imported only when a run exports (the CLI starts its children before such imports)
        from opbyop_flows.hosting.cluster_exports import ClusterExports

        if self._exports is None:
            self._exports = ClusterExports(self.cluster.wait if self.cluster is not None else lambda: self.address or "")
        return self._exports

    def close(self) -> None:
        """Flush what Prefect still has to send, then ask the cluster and the server to stop."""
        if self._exports is not None:
            self._exports.close()
        if self.api.started_here:
            drain_prefect()
        for child in (self.cluster, self.api):
            if child is not None:
                child.close(wait=False)  # their supervisors finish the job, after this process too


def _process_started() -> float:
    """When this process started, on time.monotonic()'s clock: a run's time line starts with the command."""
    return time.monotonic() - _process_age()


def _process_age() -> float:
    """Seconds since this process started, from /proc's clock of ticks since boot (psutil's create_time
    adds the boot time, which /proc gives in whole seconds: up to a second off)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22: starttime
    except (OSError, ValueError, IndexError):  # no /proc (not Linux)
        return max(0.0, time.time() - psutil.Process().create_time())


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
        wait_while(self.thread.is_alive, 0.1)
        if self.error is not None:
            raise self.error


def wait_while(condition: Callable[[], bool], step: float, deadline: float | None = None) -> None:
    """Short sleeps, not Thread.join(timeout): a Ctrl-C that lands inside join can leave the thread
    marked stopped while it runs (CPython 3.11), and the run would not be given its time to stop."""
    while condition() and (deadline is None or time.monotonic() < deadline):
        time.sleep(step)


def stop_and_wait(ticket) -> None:  # noqa: ANN001
    """Ask `opbyop serve` to stop a run it took, and give the run STOP_GRACE_SECONDS to store what it
    has; a second Ctrl-C, or the service gone, ends the wait at once."""
    ticket.stop()
    try:
        wait_while(lambda: ticket.outcome() is None, 0.2, time.monotonic() + STOP_GRACE_SECONDS)
    except (KeyboardInterrupt, OpbyopError):
        pass


@dataclass
class FlowThread:
    """A run carried out in a thread of this process, handed what the CLI started (`launch`); its
    outcome or error. On a server of the run's own the flow sends no heartbeats (nothing reads them)."""

    name: str
    call: Callable[[], Any]  # the request run (flows/hosting/requests.py): its AnalyzeOutcome
    launch: Launch
    thread: threading.Thread | None = None
    outcome: Any = None  # flows.hosting.service.AnalyzeOutcome
    error: BaseException | None = None

    def start(self) -> None:
        def target() -> None:
            try:
                with (handing_off(self.launch.handoff),
                      without_heartbeats() if self.launch.api.started_here else nullcontext()):
                    self.outcome = self.call()
            except BaseException as e:  # shown to the user, with the command to resume
                self.error = e

        self.thread = threading.Thread(target=target, name=self.name, daemon=True)
        self.thread.start()

    def running(self) -> bool:
        time.sleep(0.1)
        return self.thread is not None and self.thread.is_alive()

    def stop(self, resume: str) -> NoReturn:
        """Ctrl-C: ask the flow to store what it has and stop, then the cluster and the server."""
        say(("interrupted:", "yellow"), " storing what was analysed, stopping the cluster and server")
        try:
            self.launch.handoff.stop.set()
            wait_while(lambda: self.thread is not None and self.thread.is_alive(), 0.2,
                        time.monotonic() + STOP_GRACE_SECONDS)
        except KeyboardInterrupt:  # a second Ctrl-C: leave now
            pass
        self.launch.close()
        say(f"resume it with: {resume}")
        if self.thread is not None and self.thread.is_alive():
            os._exit(130)  # the flow thread is stuck in Prefect's engine: do not wait for it at exit
        raise typer.Exit(130)
