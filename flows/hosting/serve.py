"""The `opbyop serve` process: its Prefect server and Dask cluster, and the loop that runs the
analyze and nightly requests of its workspace (the protocol: flows/hosting/service.py)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from opbyop_flows.hosting.cluster_process import ClusterProcess
from opbyop_flows.hosting.handoff import Handoff
from opbyop_flows.hosting.requests import run_request
from opbyop_flows.hosting.server import PrefectApi, drain_prefect
from opbyop_flows.hosting.service import (POLL_SECONDS, AnalyzeOutcome, AnalyzeRequest, NightlyRequest, ServiceRecord, alive,
                           read_request, record_path, service_dir, store_and_configs)
from opbyop.atomic import write_text
from opbyop.errors import OpbyopError
from opbyop.jaxenv import prepare_jax

STOP_GRACE_SECONDS = 20.0  # how long a run stopped with the service has to store what it has


class Service:
    """The server and the cluster of one `opbyop serve`, started together, stopped together."""

    def __init__(self, workspace_root: Path, chip: str, workers: int, port: int | None):
        log_dir = workspace_root / "logs"
        self.root, self.chip, self.workers = workspace_root, chip, workers
        self.api = PrefectApi(log_dir, port=port, temporary=False)
        self.cluster = ClusterProcess(workers, chip, log_dir)

    def start(self) -> ServiceRecord:
        """Wait for both, then publish the record (atomically: a reader sees all of it or none)."""
        store, configs = store_and_configs()
        record = ServiceRecord(pid=os.getpid(), api_url=self.api.wait(), dask_address=self.cluster.wait(),
                               chip=self.chip, workers=self.workers, store=store, config_dir=configs)
        os.environ["PREFECT_API_URL"] = record.api_url  # for the flows run here (Prefect is imported after)
        write_text(record_path(self.root), record.model_dump_json(indent=2))
        return record

    def serve(self, on_run=None) -> None:  # noqa: ANN001
        """Run the requests as they come, until the server or the cluster exits (an error: the
        service is gone). `on_run(request, outcome)` after each run."""
        folder = service_dir(self.root)
        folder.mkdir(parents=True, exist_ok=True)
        while True:
            self._check_children()
            for path in sorted(folder.glob("*.request.json"), key=lambda p: p.stat().st_mtime):
                try:
                    request = read_request(path.read_text())
                except (OSError, ValueError) as e:  # another opbyop version's: its CLI waits for an answer
                    run_id = path.name.removesuffix(".request.json")
                    _answer(folder, AnalyzeOutcome(run_id=run_id, state="Error", completed=False,
                                                   message=f"`opbyop serve` could not read the request: {e}"))
                    path.unlink(missing_ok=True)
                    continue
                path.unlink(missing_ok=True)
                outcome = self._run(request, folder)
                if on_run is not None:
                    on_run(request, outcome)
            time.sleep(POLL_SECONDS)

    def _check_children(self) -> None:
        for name, child in (("Prefect server", self.api), ("Dask cluster", self.cluster)):
            code = child.exit_code()
            if code is not None:
                raise OpbyopError(f"the {name} of this service exited ({code})",
                                  f"see the logs in {self.root / 'logs'}, then start `opbyop serve` again")

    def _run(self, request: AnalyzeRequest | NightlyRequest, folder: Path) -> AnalyzeOutcome:
        """The flow in a thread; this one stops it when the CLI asks or is gone."""
        handoff = Handoff(cluster=self.cluster)  # a run that loses it starts it again (at another address)
        box: dict[str, AnalyzeOutcome] = {}
        thread = threading.Thread(target=lambda: box.update(outcome=run_request(request, handoff, self.cluster.wait())),
                                  name=f"run-{request.run_id}", daemon=True)
        thread.start()
        stop = folder / f"{request.run_id}.stop"
        stopping = False
        try:
            while thread.is_alive():  # sleep, not join(timeout): a Ctrl-C inside that can mark the thread stopped
                time.sleep(POLL_SECONDS)
                if not handoff.stop.is_set() and (stop.exists() or not alive(request.client_pid)):
                    handoff.stop.set()
        except KeyboardInterrupt:  # the service is stopping: the run stores what it has first
            stopping = True
            handoff.stop.set()
            deadline = time.monotonic() + STOP_GRACE_SECONDS
            while thread.is_alive() and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS)
            raise
        finally:
            stop.unlink(missing_ok=True)
            outcome = box.get("outcome") or AnalyzeOutcome(
                run_id=request.run_id, state="Error", completed=False,
                message=f"the run had not stored its end within {STOP_GRACE_SECONDS:.0f} s")
            if stopping:  # the CLI says why its run ended without being asked to
                outcome.message = f"`opbyop serve` was stopped during the run; {outcome.message}".rstrip("; ")
            _answer(folder, outcome)
        return outcome

    def stop(self) -> None:
        """Withdraw the record first (no new run attaches), then stop the cluster and the server."""
        path = record_path(self.root)
        try:
            if ServiceRecord.model_validate_json(path.read_text()).pid == os.getpid():
                path.unlink()
        except (OSError, ValueError):
            pass
        drain_prefect()  # the runs' last logs and events, while the server still listens
        for child in (self.cluster, self.api):
            child.close(wait=True)


def _answer(folder: Path, outcome: AnalyzeOutcome) -> None:
    write_text(folder / f"{outcome.run_id}.outcome.json", outcome.model_dump_json())


def warm_imports() -> None:
    """What every run needs, imported before the first request: the flow (Prefect, Dask), JAX."""
    prepare_jax()
    # imported here, after prepare_jax and not at the top: warming them is this function's whole point
    import opbyop_flows.analyze  # noqa: F401
    import opbyop_flows.nightly  # noqa: F401
    import opbyop.frontends.loader  # noqa: F401


def terminate_as_interrupt() -> None:
    """SIGTERM (systemd, kill) stops the service in order, as Ctrl-C does."""
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
