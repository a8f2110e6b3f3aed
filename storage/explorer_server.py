"""`opbyop explore`: Model Explorer's local server with a run's models and their overlays.

Everything it reads is written to a temporary directory (the modules, their attribute sidecars, the
node data); the server runs in this process until Ctrl-C, and the directory goes with it.
"""

from __future__ import annotations

import signal
import socket
import tempfile
from pathlib import Path
from typing import Callable

from opbyop.errors import StoreError
from storage.dataset import Store
from storage.explorer import PreparedModel, iter_models, prepare_model

HOST = "127.0.0.1"
ADAPTER_MODULE = "storage.explorer_adapter"


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port(port: int, host: str = HOST) -> None:
    """A clear error for a port in use; a port with only closing connections is free (the server
    binds with SO_REUSEADDR too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise StoreError(f"port {port} on {host} is taken ({e.strerror})",
                             "pass another --port, or leave it out to take a free one") from None


def explorer_config(prepared: list[PreparedModel]):  # -> model_explorer.config.ModelExplorerConfig
    """The models (read by the opbyop adapter) and each one's node data, one entry per metric."""
    import model_explorer

    from storage.explorer_adapter.main import ADAPTER_ID

    config = model_explorer.config()
    for p in prepared:
        config.add_model_from_path(str(p.module), adapterId=ADAPTER_ID)
    for p in prepared:
        for path in p.node_data.values():
            config.add_node_data_from_path(str(path), model_name=p.module.name)
    return config


def serve(store: Store, run_id: str, model: str | None, port: int | None, open_browser: bool,
          announce: Callable[[str], None]) -> None:
    """Prepare the run's models and serve them until Ctrl-C; `announce` gets the page's address."""
    import model_explorer

    if port is None:
        port = free_port()
    else:
        check_port(port)
    with tempfile.TemporaryDirectory(prefix="opbyop-explore-") as tmp:
        prepared = [prepare_model(store, run_id, m, Path(tmp)) for m in iter_models(store, run_id, model)]
        config = explorer_config(prepared)
        announce(f"http://{HOST}:{port}/?data={config.to_url_param_value()}")
        previous = signal.signal(signal.SIGTERM, _interrupt)  # a service manager's stop cleans up like Ctrl-C
        try:
            model_explorer.visualize_from_config(config=config, host=HOST, port=port, extensions=[ADAPTER_MODULE],
                                                 no_open_in_browser=not open_browser)
        finally:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
