"""`opbyop explore`: Model Explorer's local server with a run's models and their overlays.

Everything it reads is written to a temporary directory (the modules, their attribute sidecars, the
node data). The server runs in a child process of its own session: Model Explorer's start-up loop
swallows a Ctrl-C that lands during its health check, and its version check (a request to PyPI
without a time limit) would hold the interpreter's exit on a machine without network. This process
takes Ctrl-C (or SIGTERM), stops the child, and removes the directory.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from opbyop.errors import StoreError
from opbyop.sessions import stop_session
from opbyop_storage.dataset import Store
from opbyop_storage.exports.explorer import PreparedModel, iter_models, prepare_model
from opbyop_storage.exports.local_server import HOST, check_port, free_port, interrupt, wait_until_served

ADAPTER_MODULE = "opbyop_storage.exports.explorer_adapter"
START_TIMEOUT_S = 60.0


def explorer_config(spec: dict[str, Any]):  # -> model_explorer.config.ModelExplorerConfig
    """The models (read by the opbyop adapter) and each one's node data, one entry per metric."""
    import model_explorer

    from opbyop_storage.exports.explorer_adapter.main import ADAPTER_ID  # model_explorer (and torch): loaded only when used

    config = model_explorer.config()
    for model in spec["models"]:
        config.add_model_from_path(model["module"], adapterId=ADAPTER_ID)
    for model in spec["models"]:
        for path in model["node_data"]:
            config.add_node_data_from_path(path, model_name=Path(model["module"]).name)
    return config


def _spec(prepared: list[PreparedModel], port: int, open_browser: bool) -> dict[str, Any]:
    return {"port": port, "open_browser": open_browser,
            "models": [{"module": str(p.module), "node_data": [str(path) for path in p.node_data.values()]}
                       for p in prepared]}


def serve(store: Store, run_id: str, model: str | None, port: int | None, open_browser: bool,
          announce: Callable[[str], None]) -> None:
    """Prepare the run's models and serve them until Ctrl-C; `announce` gets the page's address once
    the server answers."""
    if port is None:
        port = free_port()
    else:
        check_port(port)
    previous = signal.signal(signal.SIGTERM, interrupt)  # a service manager's stop cleans up like Ctrl-C
    try:
        with tempfile.TemporaryDirectory(prefix="opbyop-explore-") as tmp:
            prepared = [prepare_model(store, run_id, m, Path(tmp)) for m in iter_models(store, run_id, model)]
            spec = _spec(prepared, port, open_browser)
            spec_path = Path(tmp) / "explore.json"
            spec_path.write_text(json.dumps(spec))
            child = subprocess.Popen([sys.executable, "-m", "opbyop_storage.exports.explorer_server", str(spec_path)],
                                     stdout=subprocess.DEVNULL, start_new_session=True)
            try:
                wait_until_served(child, f"http://{HOST}:{port}/check_health", "the Model Explorer server",
                                  "check that ai-edge-model-explorer is installed", START_TIMEOUT_S, poll_s=0.05)
                announce(f"http://{HOST}:{port}/?data={explorer_config(spec).to_url_param_value()}")
                code = child.wait()
                raise StoreError(f"the Model Explorer server stopped by itself (exit status {code})",
                                 "run the command again; its messages are above")
            except KeyboardInterrupt:
                pass
            finally:
                stop_session(child)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _child(spec_path: Path) -> None:
    """The server itself (in the child process): Model Explorer's own start, serving until stopped."""
    from model_explorer import server

    spec = json.loads(spec_path.read_text())
    server.start(host=HOST, port=spec["port"], config=explorer_config(spec), extensions=[ADAPTER_MODULE],
                 no_open_in_browser=not spec["open_browser"], skip_health_check=True)


if __name__ == "__main__":
    _child(Path(sys.argv[1]))
