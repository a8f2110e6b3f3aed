"""A run survives the loss of the Dask cluster opbyop started for it: the cluster is started again,
its op workers warmed, and what was on it handed out again in the same run. A user's own scheduler
that is lost is not restarted; a cluster lost more often than the limit stops the run."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from distributed import Client

from opbyop_flows.analyze import new_run_id
from opbyop_flows.hosting.cluster_process import ClusterProcess
from opbyop_flows.hosting.handoff import Handoff
from opbyop_flows.hosting.requests import run_request
from opbyop_flows.hosting.run_cluster import MAX_CLUSTER_RESTARTS, RunCluster
from opbyop_flows.hosting.service import AnalyzeRequest
from opbyop.boards import DEFAULT_CHIP
from opbyop.config import AnalysisConfig, ClusterConfig
from opbyop.errors import OpbyopError
from opbyop.records import Status
from opbyop_storage.dataset import Store

EVERY_OP_SLOW = ";".join(f"slow:{c}" for c in "0123456789abcdef")  # each op waits a little: a kill lands mid-run


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def cluster_process(tmp_path):
    process = ClusterProcess(2, DEFAULT_CHIP, tmp_path / "logs")
    process.wait()
    yield process
    process.close()


class KillWhenOpsRun(threading.Thread):
    """Kills the cluster's process (SIGKILL, as the kernel's out-of-memory killer would) once the
    scheduler has ops processing: the run's work is in flight on it."""

    def __init__(self, process: ClusterProcess):
        super().__init__(daemon=True)
        self.process, self.killed, self.in_flight = process, None, 0

    def run(self) -> None:
        with Client(self.process.wait(), timeout=30, set_as_default=False) as watcher:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                ops = [key for keys in watcher.processing().values() for key in keys if str(key).startswith("op-")]
                if ops:
                    self.killed, self.in_flight = self.process.pid, len(ops)
                    os.kill(self.killed, signal.SIGKILL)
                    return
                time.sleep(0.1)


def analyze_on(process: ClusterProcess, handoff: Handoff, *models: str):
    """The analyze flow as the CLI runs it (flows/hosting/requests.py), on `process`'s cluster."""
    config = AnalysisConfig(models=list(models), cluster=ClusterConfig(address=process.wait()), reuse_cached=False)
    return run_request(AnalyzeRequest(run_id=new_run_id(), config=config, client_pid=os.getpid()), handoff,
                       process.wait())


@pytest.mark.slow
def test_a_lost_cluster_of_opbyops_own_is_started_again_and_its_ops_redone_in_the_same_run(
        harness, home, clean_env, cluster_process):
    clean_env.setenv("OPBYOP_DASK_FAULT_INJECT", EVERY_OP_SLOW)  # read by the Dask workers, restarted ones too
    killer = KillWhenOpsRun(cluster_process)
    killer.start()
    start = time.monotonic()
    outcome = analyze_on(cluster_process, Handoff(cluster=cluster_process), "jax-mlp", "mlp")
    wall = time.monotonic() - start
    summary = outcome.summary
    print(f"wall {wall:.1f} s: {summary.line()}")
    assert killer.killed and killer.in_flight  # the cluster was killed with ops on it
    assert outcome.completed, outcome.message
    results = Store(home / "store").results(summary.run_id)
    assert len(results) == summary.ops_unique > 60
    assert not [r for r in results if r.status is Status.INFRA_ERROR]  # every op has a real result
    assert all(r.status is Status.SUCCESS for r in results)
    assert summary.whole == {"jax-mlp": "success", "mlp": "success"}
    assert (summary.cluster_lost, summary.cluster_restarts) == (1, 1) and summary.redone >= 1
    assert f"lost once and restarted once: {summary.redone} op" in summary.line()
    assert "cluster restart (beside)" in summary.phases
    assert cluster_process.exit_code() is None and cluster_process.pid != killer.killed  # a new one serves


@pytest.mark.slow
def test_a_lost_scheduler_of_a_users_own_is_not_restarted_and_its_ops_name_it(
        harness, home, clean_env, cluster_process):
    clean_env.setenv("OPBYOP_DASK_FAULT_INJECT", EVERY_OP_SLOW)
    killer = KillWhenOpsRun(cluster_process)
    killer.start()
    address = cluster_process.wait()
    outcome = analyze_on(cluster_process, Handoff(), "jax-mlp")  # given only its address: a user's scheduler
    summary = outcome.summary
    assert killer.killed and not outcome.completed
    assert (summary.cluster_lost, summary.cluster_restarts) == (1, 0) and "lost once, not restarted" in summary.line()
    assert f"the Dask scheduler at {address} was lost" in summary.error and "start it again" in summary.error
    lost = [r for r in Store(home / "store").results(summary.run_id) if r.status is Status.INFRA_ERROR]
    assert lost and all(r.message == f"the Dask scheduler at {address} was lost while this op ran on it; fix: start it "
                        f"again; the next run with the same run id ({summary.run_id}) resumes" for r in lost)
    assert cluster_process.exit_code() is not None  # nothing started it again


@pytest.mark.slow
def test_a_cluster_lost_more_often_than_the_limit_stops_with_the_figure():
    with RunCluster(ClusterConfig(workers=1)) as cluster:  # a LocalCluster in this process: opbyop's own
        assert cluster.ours
        addresses = {cluster.address}
        for _ in range(MAX_CLUSTER_RESTARTS):
            cluster.restart("run-8")
            addresses.add(cluster.address)
            assert not cluster.lost()
        assert len(addresses) == MAX_CLUSTER_RESTARTS + 1  # each time a new one
        with pytest.raises(OpbyopError, match=f"lost {MAX_CLUSTER_RESTARTS + 1} times during run run-8, more than "
                                              f"the {MAX_CLUSTER_RESTARTS} restarts allowed") as over:
            cluster.restart("run-8")
        assert "the next run with the same run id (run-8) resumes" in over.value.fix
