"""The nightly from a terminal, as a Prefect user runs a flow: `opbyop nightly` (its own server and
cluster, like `opbyop analyze`) and `python flows/nightly.py` (Prefect's temporary server)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from cli_processes import all_gone, hanging_op, own_services, poll
from opbyop_storage.dataset import Store

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


def _env(tmp_path: Path) -> dict:
    """An operator's shell: no Prefect API configured, a workspace and a Prefect home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "OPBYOP_", "JAX_"))}
    env.update({"PREFECT_HOME": str(tmp_path / "prefect"), "OPBYOP_HOME": str(tmp_path / "home"),
                "PATH": f"{BIN}:{os.environ['PATH']}", "COLUMNS": "200"})
    return env


def _nightly_file(tmp_path: Path) -> Path:
    path = tmp_path / "nightly.yaml"
    path.write_text("models: [jax-mlp]\ntargets: [{chip: p150}]\nwhole_model: false\n")
    return path


def _stored_target_runs(tmp_path: Path) -> list:
    store = Store(tmp_path / "home" / "store")
    return [run for run in store.runs() if run.run_id.endswith("-t0")]


def test_opbyop_nightly_runs_each_target_on_a_server_and_cluster_of_its_own(tmp_path):
    """A one-chip target, then a mesh target on the same cluster: the mesh's golden runs get their
    host mesh although the cluster's workers were started for one chip."""
    from test_mesh import SHARDED_DOT

    sharded = tmp_path / "sharded.mlir"
    sharded.write_text(SHARDED_DOT)
    config = _nightly_file(tmp_path)
    config.write_text(f"models: [jax-mlp]\ntargets: [{{chip: p150}}, {{chip: p300, models: ['{sharded}']}}]\n"
                      "whole_model: false\n")
    done = subprocess.run([str(BIN / "opbyop"), "nightly", "--config", str(config), "--workers", "1"],
                          env=_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "nightly: Completed" in done.stdout and "p150 default options" in done.stdout, done.stdout
    runs = _stored_target_runs(tmp_path)
    assert len(runs) == 1 and runs[0].status.value == "completed"
    store = Store(tmp_path / "home" / "store")
    results = store.results(runs[0].run_id)
    assert results and all(r.status.value == "success" for r in results)
    (mesh_run,) = [run for run in store.runs() if run.run_id.endswith("-t1")]
    on_mesh = store.results(mesh_run.run_id)
    assert on_mesh and all(r.status.value == "success" for r in on_mesh), [(r.op_name, r.message) for r in on_mesh]


def test_the_nightly_script_has_the_products_prefect_settings_before_prefect_reads_them(tmp_path):
    """`python flows/nightly.py` runs that file first: Prefect, imported at its top, reads its settings
    once; the product's (a temporary server given 120 s, not 20) must be in the environment by then."""
    code = ("import runpy\nrunpy.run_path(sys.argv[1])\n"
            "from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS as timeout\n"
            "print(timeout.value())\n")
    done = subprocess.run([sys.executable, "-c", "import sys\n" + code, str(ROOT / "flows" / "nightly.py")],
                          env={**_env(tmp_path), "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "120", done.stdout


def test_a_bare_nightly_call_waits_for_prefect_s_temporary_server_on_a_small_machine(tmp_path):
    """No server anywhere: Prefect starts its temporary one, which takes longer than Prefect's own
    20 s limit on 2 busy cores; the product's settings (applied when `flows` is imported) allow it."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "flows" / "nightly.py"), str(_nightly_file(tmp_path))],
                            env=_env(tmp_path), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    assert "nightly: Completed" in out and "Timed out while attempting to connect" not in out
    runs = _stored_target_runs(tmp_path)
    assert len(runs) == 1 and Store(tmp_path / "home" / "store").results(runs[0].run_id)


def test_opbyop_nightly_runs_on_opbyop_serve_s_server_and_cluster_when_it_runs(tmp_path):
    """With `opbyop serve` running in the workspace, `opbyop nightly` starts neither a server nor a
    cluster: the service runs the nightly flow, every target on its cluster, and answers its outcome."""
    env = _env(tmp_path)
    serve_log = tmp_path / "serve.log"
    serve = subprocess.Popen([str(BIN / "opbyop"), "serve", "--workers", "1"], env=env, cwd=tmp_path,
                             stdout=open(serve_log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "now runs here" not in serve_log.read_text():
            assert serve.poll() is None and time.monotonic() < deadline, serve_log.read_text()[-3000:]
            time.sleep(1)
        cli = subprocess.Popen([str(BIN / "opbyop"), "nightly", "--config", str(_nightly_file(tmp_path))], env=env,
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        children = set()
        while cli.poll() is None:  # what the CLI starts while the nightly runs: nothing but itself
            try:
                children |= {p.pid for p in psutil.Process(cli.pid).children(recursive=True)}
            except psutil.NoSuchProcess:
                pass
            time.sleep(0.5)
        out = cli.stdout.read()
        assert cli.returncode == 0, out[-3000:] + serve_log.read_text()[-3000:]
        assert f"nightly on `opbyop serve` (pid {serve.pid}" in out and "nightly: Completed" in out, out
        assert "p150 default options" in out and not children
        runs = _stored_target_runs(tmp_path)
        assert len(runs) == 1 and runs[0].status.value == "completed"
    finally:
        os.killpg(serve.pid, signal.SIGINT)
    assert serve.wait(timeout=120) == 0, serve_log.read_text()[-3000:]


def test_the_service_reads_a_nightly_request_beside_analyze_requests_and_refuses_garbage():
    from opbyop_flows.hosting.service import AnalyzeRequest, NightlyRequest, read_request
    from opbyop.config import AnalysisConfig

    nightly = NightlyRequest(run_id="n1", config_file="/abs/nightly.yaml", client_pid=1)
    analyze = AnalyzeRequest(run_id="a1", config=AnalysisConfig(models=["mlp"]), client_pid=1)
    assert read_request(nightly.model_dump_json()) == nightly
    assert read_request(analyze.model_dump_json()) == analyze
    with pytest.raises(ValueError):
        read_request('{"run_id": "garbage", "config": ')
    with pytest.raises(ValueError):
        read_request('{"kind": "nightly", "run_id": "n2"}')  # no client: nobody to answer


def test_ctrl_c_of_opbyop_nightly_stops_its_run_prints_the_resume_command_and_leaves_nothing_behind(tmp_path):
    """Its op worker hangs on one op (OPBYOP_FAULT_INJECT), so the nightly cannot end by itself; a
    terminal's Ctrl-C once the first results are stored ends the command with 130 and the command
    that resumes it, and takes down the server, the cluster and the op workers it started."""
    victim, _ = hanging_op()
    config = _nightly_file(tmp_path)
    log = tmp_path / "nightly.log"
    proc = subprocess.Popen([str(BIN / "opbyop"), "nightly", "--config", str(config), "--workers", "2"],
                            env={**_env(tmp_path), "OPBYOP_FAULT_INJECT": f"hang:{victim}"}, cwd=tmp_path,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)

    def stored() -> bool:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            runs = _stored_target_runs(tmp_path)
            return bool(runs) and bool(Store(tmp_path / "home" / "store").results(runs[0].run_id))
        except Exception:  # the store's files may not exist yet
            return False
    poll("the nightly's first results in the store", stored, timeout=600)
    children = own_services(proc)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends to its foreground job
    assert proc.wait(timeout=120) == 130, log.read_text()[-3000:]
    out = log.read_text()
    assert "interrupted:" in out
    assert re.search(rf"resume it with: opbyop nightly --config {re.escape(str(config))}\s*$", out, re.M), out[-3000:]
    all_gone(children)
