"""How `opbyop analyze` finds and uses a running `opbyop serve` (flows/hosting/serve.py): a standing Prefect
server, a warm Dask cluster, and a warm process that runs the analyze flow.

On its own, every `opbyop analyze` starts a server and a cluster (6-9 s on 2 cores: flows/hosting/server.py,
flows/hosting/cluster.py), imports Prefect, Dask and JAX (4-5 s) and stops it all at its end. With
`opbyop serve` running (another terminal, a systemd unit), analyze finds it through a record in the
workspace, hands it the run as a request file and shows the progress and the summary: the flow
runs in the service, where all of that is done once (benchmarks/bench_run.py, "mlp, opbyop serve").

`opbyop nightly` hands its nightly over the same way (a NightlyRequest: the nightly flow, every
target on the service's cluster). Requests run one at a time, in the order they came (torch.export
is not thread-safe). Files in <workspace>/service/: `<run id>.request.json` (the CLI), `<run id>.stop` (the CLI's Ctrl-C),
`<run id>.outcome.json` (the service, at the run's end). A run whose CLI dies (even kill -9) is
stopped as on Ctrl-C: what was analysed is stored, the run id resumes it. A record whose process is
gone, or whose server does not answer, is ignored: analyze then starts its own server and cluster.
Ctrl-C or SIGTERM stops the service (server, cluster, record); kill -9 takes the server and the
cluster with it too (flows/hosting/tied.py) and leaves a record that names a dead process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import psutil
from pydantic import BaseModel

from opbyop_flows.engine.summary import RunSummary
from opbyop_flows.hosting.server import configured_api_url, healthy
from opbyop_flows.hosting.service_record import record_path
from opbyop.atomic import write_text
from opbyop.config import AnalysisConfig, ShrinkOption, config_dir
from opbyop.errors import OpbyopError
from opbyop.workspace import Workspace

POLL_SECONDS = 0.1  # how often the service looks for requests, and a run for its stop request


class ServiceRecord(BaseModel):
    """What `opbyop serve` tells the analyze runs of its workspace."""

    pid: int  # the serving process: the record holds while it lives
    api_url: str
    dask_address: str
    chip: str  # its op workers are warm for this chip (others warm up on first use)
    workers: int
    store: str  # the store and the configs it uses: a CLI with others does not attach
    config_dir: str


class AnalyzeRequest(BaseModel):
    """One analyze run asked of the service."""

    run_id: str
    config: AnalysisConfig
    shrink: ShrinkOption = ShrinkOption()
    client_pid: int  # the CLI: when it is gone, the run stops


class NightlyRequest(BaseModel):
    """One nightly run asked of the service (`opbyop nightly`); its answer is an AnalyzeOutcome."""

    kind: Literal["nightly"] = "nightly"
    run_id: str  # names the request's files; the nightly's own run ids derive from its flow run
    config_file: str | None = None  # absolute: the service runs elsewhere
    models: list[str] | None = None
    expectations_file: str | None = None
    client_pid: int  # the CLI: when it is gone, the nightly stops


def read_request(text: str) -> AnalyzeRequest | NightlyRequest:
    """A request file's content, of either kind (ValueError when it is neither)."""
    data = json.loads(text)
    if isinstance(data, dict) and data.get("kind") == "nightly":
        return NightlyRequest.model_validate(data)
    return AnalyzeRequest.model_validate(data)


class AnalyzeOutcome(BaseModel):
    """How the run ended: its Prefect state, and the summary when the flow returned one."""

    run_id: str
    state: str  # Completed, Failed, Cancelled, Crashed ... or "Error" when the flow could not run
    completed: bool
    message: str = ""
    summary: RunSummary | None = None


def store_and_configs() -> tuple[str, str]:
    from opbyop_storage.location import is_object_url  # pyarrow: loaded only when used

    store = Workspace.default().store
    return str(store if is_object_url(store) else store.resolve()), str(config_dir().resolve())


def standing_service(workspace_root: Path) -> ServiceRecord | None:
    """The workspace's service, if its process lives and its Prefect API answers; None too when this
    process is configured for another Prefect API (the user's choice wins)."""
    try:
        record = ServiceRecord.model_validate_json(record_path(workspace_root).read_text())
    except (OSError, ValueError):
        return None
    configured = configured_api_url()
    if (record.store, record.config_dir) != store_and_configs() or (
            configured and configured.rstrip("/") != record.api_url.rstrip("/")):
        return None
    if not alive(record.pid) or not healthy(record.api_url, timeout=2.0):
        return None
    return record


def service_dir(workspace_root: Path) -> Path:
    return workspace_root / "service"


class Ticket:
    """The CLI's side of one request: submit it, ask it to stop, read its outcome."""

    def __init__(self, workspace_root: Path, service: ServiceRecord, request: AnalyzeRequest | NightlyRequest):
        self.service, self.request = service, request
        folder = service_dir(workspace_root)
        self._request = folder / f"{request.run_id}.request.json"
        self._stop = folder / f"{request.run_id}.stop"
        self._outcome = folder / f"{request.run_id}.outcome.json"

    def submit(self) -> None:
        for stale in (self._stop, self._outcome):  # from an earlier run of this id
            stale.unlink(missing_ok=True)
        write_text(self._request, self.request.model_dump_json())

    def stop(self) -> None:
        self._stop.touch()

    def outcome(self) -> AnalyzeOutcome | None:
        """The outcome once the run ended; raises when the service died before it did."""
        try:
            return AnalyzeOutcome.model_validate_json(self._outcome.read_text())
        except (OSError, ValueError):
            pass
        if not alive(self.service.pid):
            raise OpbyopError(f"`opbyop serve` (pid {self.service.pid}) stopped before run {self.request.run_id} "
                              f"ended", "start it again (or run without it), and resume the run with the command "
                              "below: what was analysed is stored")
        return None


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (killed, not yet reaped by its parent)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
