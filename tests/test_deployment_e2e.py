"""End to end, as an operator sets it up: a local Prefect server on 127.0.0.1, a process work pool,
the deployments from deployments/prefect.yaml, a worker, an ad-hoc run through the API, and its
results found in the store."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from storage.dataset import Store

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real `prefect server start` on loopback, with its own PREFECT_HOME (SQLite)."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "DO_NOT_TRACK": "1", "PATH": f"{BIN}:{os.environ['PATH']}"}
    env.pop("PREFECT_API_URL", None)
    env.pop("JAX_PLATFORMS", None)  # as on an operator's machine: the flow must choose for itself
    log = open(home / "server.log", "w")
    proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            break
        except OSError:
            time.sleep(1)
    else:
        proc.kill()
        pytest.fail(f"prefect server did not start: {(home / 'server.log').read_text()[-2000:]}")
    yield {**env, "PREFECT_API_URL": url}
    proc.terminate()
    proc.wait(timeout=30)


def prefect(env: dict, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run([str(BIN / "prefect"), *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"prefect {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_adhoc_deployment_runs_on_a_worker_and_lands_in_the_store(server, tmp_path):
    env = {**server, "OPBYOP_ROOT": str(ROOT), "OPBYOP_HOME": str(tmp_path / "home")}
    prefect(env, "work-pool", "create", "opbyop-process", "--type", "process")
    prefect(env, "--no-prompt", "deploy", "--all", "--prefect-file", "deployments/prefect.yaml")

    nightly = json.loads(_inspect(env, "nightly/nightly"))
    assert nightly["schedules"][0]["schedule"]["cron"] == "0 2 * * *"
    adhoc = json.loads(_inspect(env, "analyze/adhoc"))
    form = adhoc["parameter_openapi_schema"]
    assert "AnalysisConfig" in form["definitions"] and "chip" in form["definitions"]["AnalysisConfig"]["properties"]

    worker_log = open(tmp_path / "worker.log", "w")
    worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "opbyop-process"], env=env,
                              cwd=ROOT, stdout=worker_log, stderr=subprocess.STDOUT)
    try:
        parameters = {"models": ["jax-mlp"], "whole_model": False, "cluster": {"workers": 1}}
        out = prefect(env, "deployment", "run", "analyze/adhoc", "--param", f"config={json.dumps(parameters)}",
                      "--param", "run_id=e2e-adhoc", "--watch", "--watch-timeout", "600", timeout=700)
        assert "Completed" in out, out + (tmp_path / "worker.log").read_text()[-3000:]
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    results = Store(tmp_path / "home" / "store").results("e2e-adhoc")
    assert results and all(r.status.value == "success" for r in results)


def _inspect(env: dict, name: str) -> str:
    """`prefect deployment inspect` prints a Python-literal dict; ask the API for JSON instead."""
    code = ("import asyncio, json, sys\n"
            "from prefect.client.orchestration import get_client\n"
            "async def main():\n"
            "    async with get_client() as c:\n"
            "        d = await c.read_deployment_by_name(sys.argv[1])\n"
            "        print(json.dumps(d.model_dump(mode='json')))\n"
            "asyncio.run(main())\n")
    proc = subprocess.run([sys.executable, "-c", code, name], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
