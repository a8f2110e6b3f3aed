"""`opbyop visualize`: TT-NN Visualizer on 127.0.0.1 with a run's report loaded.

The report (memory and performance folders) is written to a temporary directory, which also holds the
visualizer's own data (its instance database, its event log): nothing is left in the user's home.
Where the report carries ttnn's own report of the op's run on ttsim, the visualizer opens that too, as
an instance of its own beside opbyop's (two addresses on the same server). The
visualizer runs from its own environment (opbyop.visualizer) in a session of its own, since it starts
gunicorn workers under it; Ctrl-C (or SIGTERM) stops that whole session and removes the directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from opbyop.errors import StoreError
from opbyop.sessions import stop_session
from opbyop.visualizer import locate
from opbyop_storage.dataset import Store
from opbyop_storage.exports.local_server import HOST, check_port, free_port, interrupt, wait_until_served
from opbyop_storage.exports.visualizer import MEMORY_FOLDER, PERFORMANCE_FOLDER, TTNN_FOLDER, Report, export_visualizer

START_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Served:
    """A visualizer answering on `port` with the report opened as `instance_id`."""

    port: int
    instance_id: str
    report: Report
    folder: Path
    ttnn_instance_id: str | None = None  # ttnn's own report of the op's run on ttsim, where there is one

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/operations?instanceId={self.instance_id}"

    @property
    def ttnn_url(self) -> str | None:
        return None if self.ttnn_instance_id is None else \
            f"http://{HOST}:{self.port}/operations?instanceId={self.ttnn_instance_id}"

    def api(self, path: str, instance_id: str | None = None) -> str:
        """The address of one of the visualizer's API routes for this report (or another instance)."""
        joiner = "&" if "?" in path else "?"
        return f"http://{HOST}:{self.port}/api/{path}{joiner}instanceId={instance_id or self.instance_id}"


def _environment(home: Path) -> dict[str, str]:
    """The visualizer's settings (its environment is its interface): its data under `home`, no browser
    opened, no usage recorded."""
    return {**os.environ, "HOME": str(home), "APP_DATA_DIRECTORY": str(home / "app"),
            "REPORT_DATA_DIRECTORY": str(home / "data"), "LAUNCH_BROWSER_ON_START": "false",
            "USAGE_RECORDING_DISABLED": "true", "FLASK_ENV": "production"}


@contextmanager
def running(store: Store, run_id: str, model: str | None = None, signature: str | None = None,
            port: int | None = None, visualizer: Path | None = None) -> Iterator[tuple[Served, subprocess.Popen]]:
    """The run's report exported and the visualizer serving it, for the block's duration; stopped and
    its directory removed after."""
    executable = locate(visualizer)
    if port is None:
        port = free_port()
    else:
        check_port(port)
    with tempfile.TemporaryDirectory(prefix="opbyop-visualize-") as tmp:
        folder = Path(tmp) / "report"
        report = export_visualizer(store, run_id, folder, model, signature)
        home = Path(tmp) / "home"
        home.mkdir()
        child = subprocess.Popen([str(executable), "--host", HOST, "--port", str(port)], env=_environment(home),
                                 cwd=tmp, stdout=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_until_served(child, f"http://{HOST}:{port}/api/up", "TT-NN Visualizer",
                              "`make visualizer` reinstalls it", START_TIMEOUT_S, poll_s=0.2)
            instance_id = _open_report(port, folder / MEMORY_FOLDER, folder / PERFORMANCE_FOLDER)
            ttnn = _open_report(port, folder / TTNN_FOLDER, None) if report.ttnn_report is not None else None
            yield Served(port=port, instance_id=instance_id, report=report, folder=folder, ttnn_instance_id=ttnn), child
        finally:
            stop_session(child, grace=15.0)


def serve(store: Store, run_id: str, model: str | None, signature: str | None, port: int | None,
          visualizer: Path | None, announce: Callable[[str, str | None], None]) -> None:
    """Serve the run's report until Ctrl-C; `announce` gets the page's address once it answers, and that
    of ttnn's own report of the op's run on ttsim where there is one (else None)."""
    previous = signal.signal(signal.SIGTERM, interrupt)  # a service manager's stop cleans up like Ctrl-C
    try:
        with running(store, run_id, model, signature, port, visualizer) as (served, child):
            announce(served.url, served.ttnn_url)
            try:
                code = child.wait()
            except KeyboardInterrupt:
                return
            raise StoreError(f"TT-NN Visualizer stopped by itself (exit status {code})",
                             "run the command again; its messages are above")
    finally:
        signal.signal(signal.SIGTERM, previous)


def _open_report(port: int, memory: Path, performance: Path | None) -> str:
    """Open a report's folders in the visualizer, as its --profiler-path and --performance-path do;
    the instance id its pages and API take."""
    folder = memory.parent
    body = json.dumps({"profiler_path": str(memory.resolve()),
                       "performance_path": str(performance.resolve()) if performance else None}).encode()
    request = urllib.request.Request(f"http://{HOST}:{port}/api/instance/local-paths", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)["instance_id"]
    except OSError as e:
        detail = e.read().decode(errors="replace") if hasattr(e, "read") else str(e)
        raise StoreError(f"TT-NN Visualizer refused the report at {folder}: {detail}",
                         "export it with `opbyop export visualizer` and load it in the visualizer to see why") from None
