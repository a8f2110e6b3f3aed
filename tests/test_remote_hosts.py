"""Dask workers on other hosts that share nothing with the flow's host but the network.

The hosts are Linux network namespaces on a bridge with no uplink (tests/netns_hosts.py): a
scheduler host and worker hosts, each worker with its own OPBYOP_HOME; the analyze flow runs in the
root namespace and reaches the scheduler by address. Ops travel with what they need and come back
with their artifacts; a worker host killed mid-run costs only the ops it held, a host added mid-run
takes work, and the results match a single-host run of the same config row by row.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from distributed import Client

from opbyop_flows.analyze import RunFailed, RunSummary, analyze, new_run_id
from netns_hosts import Host, HostNetwork, unavailable
from opbyop.artifacts import ArtifactStore
from opbyop.config import AnalysisConfig, ClusterConfig
from opbyop.records import Status
from opbyop.worker.wire import home_id
from opbyop.workspace import OpIndex
from opbyop_storage.dataset import Store

pytestmark = pytest.mark.slow

DASK = str(Path(sys.executable).with_name("dask"))
SCHEDULER_PORT = 8786
EVERY_OP_SLOW = ";".join(f"slow:{c}" for c in "0123456789abcdef")  # each op waits a little on the worker hosts


@pytest.fixture
def network():
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    hosts = HostNetwork()
    try:
        yield hosts
    finally:  # namespaces, bridge and every process on them go, whatever the test did
        hosts.close()


def host_env(home: Path | None, **extra: str) -> dict[str, str]:
    """The environment of a process on a host: none of this host's opbyop, Prefect or Dask settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPBYOP_", "PREFECT_", "DASK_"))}
    if home is not None:
        env["OPBYOP_HOME"] = str(home)
    env.update(extra)
    return env


def start_scheduler(network: HostNetwork, tmp_path: Path) -> tuple[Host, str]:
    host = network.add("sched")
    network.start(host, [DASK, "scheduler", "--host", host.address, "--port", str(SCHEDULER_PORT),
                         "--dashboard-address", f"{host.address}:0"], host_env(None), tmp_path / "sched.log")
    return host, f"tcp://{host.address}:{SCHEDULER_PORT}"


def start_worker(network: HostNetwork, name: str, scheduler: str, tmp_path: Path, slow: bool = True,
                 flow_dir: Path | None = None) -> Host:
    """A worker host with its own home; the flow's directory (default tmp_path/flow) is not there.
    `slow`: each op waits a little."""
    host = network.add(name)
    (tmp_path / name / "tmp").mkdir(parents=True, exist_ok=True)
    network.start(host, [DASK, "worker", scheduler, "--host", host.address, "--name", name, "--nthreads", "1",
                         "--no-nanny", "--dashboard-address", f"{host.address}:0", "--death-timeout", "120"],
                  host_env(tmp_path / name / "home", OPBYOP_DASK_FAULT_INJECT=EVERY_OP_SLOW if slow else "",
                           TMPDIR=str(tmp_path / name / "tmp")),
                  tmp_path / f"{name}.log", hidden=(flow_dir or tmp_path / "flow",))
    return host


def ops_done_on(stream: list[dict], host: Host) -> list[str]:
    """The op tasks a host finished, by their keys (op-<signature prefix>-<nonce>)."""
    return [entry["key"] for entry in stream if str(entry["key"]).startswith("op-") and entry.get("status") == "OK"
            and str(entry.get("worker", "")).startswith(f"tcp://{host.address}:")]


def wait_until(condition, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def run(config: AnalysisConfig) -> tuple[object, RunSummary]:
    state = analyze(config=config, run_id=new_run_id(), return_state=True)
    data = state.result(raise_on_failure=False)
    summary = data.summary if isinstance(data, RunFailed) else data
    assert isinstance(summary, RunSummary), state
    return state, summary


def rows(store: Store, run_id: str) -> dict[str, tuple]:
    return {r.signature: (r.status, r.depth, r.failed_stage, r.golden.passed if r.golden else None,
                          repr(r.golden.pcc) if r.golden else None) for r in store.results(run_id)}


def test_workers_on_other_hosts_survive_a_lost_host_take_a_new_one_and_match_a_single_host_run(
        harness, network, tmp_path, monkeypatch):
    home = tmp_path / "flow" / "home"
    monkeypatch.setenv("OPBYOP_HOME", str(home))
    home_id(home)  # the flow's home has its identity before any worker looks for it
    _, scheduler = start_scheduler(network, tmp_path)
    w1, w2 = (start_worker(network, name, scheduler, tmp_path) for name in ("w1", "w2"))
    base = AnalysisConfig(models=["mlp"], whole_model=False, reuse_cached=False)
    with Client(scheduler, timeout=60) as watcher:
        watcher.wait_for_workers(2, timeout=120)
        watcher.get_task_stream()  # the scheduler records finished tasks from now on
        outcome: dict[str, object] = {}
        flow = threading.Thread(target=lambda: outcome.update(zip(("state", "summary"), run(
            base.model_copy(update={"cluster": ClusterConfig(address=scheduler)})))))
        flow.start()
        try:
            wait_until(lambda: len(ops_done_on(watcher.get_task_stream(), w1)) >= 2, 240, "w1 to finish two ops")
            w3 = start_worker(network, "w3", scheduler, tmp_path)  # added mid-run
            network.kill(w1)  # lost mid-run, with the op it held
        finally:
            flow.join(timeout=420)
        assert not flow.is_alive(), "the run did not end"
        stream = watcher.get_task_stream()
    state, summary = outcome["state"], outcome["summary"]
    store = Store(home / "store")
    results = store.results(summary.run_id)
    assert state.is_completed() and summary.error is None, state
    # nothing lost: every unique op has its result, and a success
    assert len(results) == summary.ops_unique > 60 and all(r.status is Status.SUCCESS for r in results)
    # only the lost host's ops ran again: every op finished exactly once on the cluster
    finished = Counter(str(e["key"]).split("-")[1] for e in stream
                       if str(e["key"]).startswith("op-") and e.get("status") == "OK")
    assert set(finished) == {r.signature[:16] for r in results} and set(finished.values()) == {1}
    # what w1 finished before it died was kept, not redone; w3 joined mid-run and took work
    workers = Counter(r.worker.split("-")[1] for r in results)
    assert workers["w1"] == len(ops_done_on(stream, w1)) >= 2
    assert workers["w3"] == len(ops_done_on(stream, w3)) >= 1 and workers["w2"] >= 1
    # ops that read real values of their arguments got them from the flow's host
    assert any(OpIndex(home / "ops").get(r.signature).input_values for r in results)
    # each worker kept its own home; the artifacts the results name came back to the flow's
    flow_artifacts = ArtifactStore(home / "artifacts")
    assert all(flow_artifacts.path(digest) for r in results for digest in r.compile.artifacts.values())
    assert not list((home / "logs").glob("dask-w*"))
    for name in ("w1", "w2", "w3"):
        assert list((tmp_path / name / "home" / "system_descs").glob("*.ttsys")), name
        assert list((tmp_path / name / "home" / "logs").glob(f"dask-{name}-*")), name

    # the same config on one host: the same rows
    _, single = run(base.model_copy(update={"cluster": ClusterConfig(workers=2)}))
    assert rows(store, single.run_id) == rows(store, summary.run_id)


def test_a_whole_model_runs_on_a_worker_host_that_has_not_got_its_values(harness, network, tmp_path, monkeypatch):
    home = tmp_path / "flow" / "home"
    monkeypatch.setenv("OPBYOP_HOME", str(home))
    home_id(home)
    _, scheduler = start_scheduler(network, tmp_path)
    start_worker(network, "w1", scheduler, tmp_path, slow=False)
    with Client(scheduler, timeout=60) as watcher:
        watcher.wait_for_workers(1, timeout=120)
    config = AnalysisConfig(models=["jax-mlp"], whole_model=True, reuse_cached=False,
                            cluster=ClusterConfig(address=scheduler))
    state, summary = run(config)
    assert state.is_completed() and summary.whole == {"jax-mlp": "success"}, state
    assert summary.statuses == {"success": summary.ops_unique}
    whole = Store(home / "store").models(summary.run_id)[0].summary.whole
    flow_artifacts = ArtifactStore(home / "artifacts")
    assert whole.compile.artifacts and all(flow_artifacts.path(d) for d in whole.compile.artifacts.values())
    assert not list((tmp_path / "w1" / "home" / "scratch").glob("values-*.npz"))  # its copy of the values is gone


def test_the_nightly_on_worker_hosts_stores_the_same_rows_as_on_one_host(harness, network, tmp_path, monkeypatch):
    from opbyop_flows.nightly import nightly
    from prefect.client.orchestration import get_client

    from opbyop_flows.engine.run_ids import run_id_for

    nightly_file = tmp_path / "nightly.yaml"
    nightly_file.write_text("models: [jax-mlp]\ntargets: [{chip: p150}, {chip: n150}]\nwhole_model: false\n")
    _, scheduler = start_scheduler(network, tmp_path)
    for name in ("w1", "w2"):
        start_worker(network, name, scheduler, tmp_path, slow=False)
    with Client(scheduler, timeout=60) as watcher:
        watcher.wait_for_workers(2, timeout=120)

    def night(home: Path, cluster: ClusterConfig) -> tuple[Store, list[str]]:
        monkeypatch.setenv("OPBYOP_HOME", str(home))
        home_id(home)
        state = nightly(config_file=str(nightly_file), cluster=cluster, return_state=True)
        assert state.is_completed(), state.message
        with get_client(sync_client=True) as client:
            base = run_id_for(client.read_flow_run(state.state_details.flow_run_id))
        return Store(home / "store"), [f"{base}-t0", f"{base}-t1"]

    remote, remote_runs = night(tmp_path / "flow" / "hosts-home", ClusterConfig(address=scheduler))
    local, local_runs = night(tmp_path / "flow" / "local-home", ClusterConfig(workers=2))
    for remote_run, local_run in zip(remote_runs, local_runs):
        assert remote.run(remote_run).chip == local.run(local_run).chip
        assert rows(remote, remote_run) == rows(local, local_run) and len(rows(local, local_run)) >= 8
    # each worker host got each target's descriptor once, kept by its content hash in its own home
    for name in ("w1", "w2"):
        assert len(list((tmp_path / name / "home" / "system_descs").glob("*.ttsys"))) == 2, name
