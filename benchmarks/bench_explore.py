"""How long `opbyop explore` takes from the command to a served page, per stored model, against
Model Explorer alone on the same .mlir (no overlays), measured in the same run.

    OPBYOP_HOME=... python benchmarks/bench_explore.py --run RUN_ID [--model M ...]

Served = the server answers `/` after printing its address; the graph conversion itself happens when
the page asks for it, so the time to convert the module with the opbyop adapter is printed too. The
goal: every model of a stored run opens within 10 s of the command.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from opbyop_storage.dataset import Store
from opbyop_storage.exports.explorer import prepare_model, run_models


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _served(command: list[str], port: int, timeout: float = 120) -> float:
    """Seconds from starting `command` until 127.0.0.1:port answers; the command is then stopped."""
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while time.monotonic() - started < timeout:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
                return time.monotonic() - started
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"{command[:4]} exited with {proc.returncode}")
                time.sleep(0.05)
        raise TimeoutError(f"{command[:4]} served nothing within {timeout} s")
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # reported, and never left running
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            print(f"{command[:4]} ignored Ctrl-C for 30 s and was killed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--model", action="append")
    args = parser.parse_args()
    store = Store()
    models = args.model or run_models(store, args.run)
    print(f"{'model':<14}{'nodes':>7}{'prepare+convert s':>19}{'explore served s':>18}{'model-explorer alone s':>24}")
    for model in models:
        with tempfile.TemporaryDirectory() as tmp:
            t = time.monotonic()
            prepared = prepare_model(store, args.run, model, Path(tmp))
            from opbyop_storage.exports.explorer_adapter.main import OpbyopMlirAdapter

            graphs = OpbyopMlirAdapter().convert(str(prepared.module), {})["graphCollections"][0].graphs
            convert_s = time.monotonic() - t
            nodes = sum(len(g["nodes"]) for g in graphs)
            port = _free_port()
            ours = _served([sys.executable, "-m", "opbyop.cli.main", "explore", "--run", args.run, "--model", model,
                            "--port", str(port)], port)
            port = _free_port()
            alone = _served([str(Path(sys.executable).with_name("model-explorer")), str(prepared.module),
                             "--no_open_in_browser", f"--port={port}", "--host=127.0.0.1"], port)
        print(f"{model:<14}{nodes:>7}{convert_s:>19.2f}{ours:>18.2f}{alone:>24.2f}")


if __name__ == "__main__":
    main()
