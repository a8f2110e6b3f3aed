"""The nightly deployment as an operator grows it: Prefect's server on PostgreSQL (deployments/README.md's
set-up, literally), the flow in its process worker, the ops on Dask worker hosts that share nothing
with it but the network (network namespaces, each host with its own home); the stored rows are those
of the same nightly on one host."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from distributed import Client

from storage.dataset import Store
from test_deployment_e2e import ARTIFACTS, _target_run_ids, api, deployed, postgres, run_and_wait  # noqa: F401
from test_remote_hosts import network, rows, start_scheduler, start_worker  # noqa: F401  (fixtures too)

pytestmark = pytest.mark.slow


def test_the_nightly_deployment_on_postgresql_and_worker_hosts_stores_the_rows_of_one_host(
        deployed, postgres, network, tmp_path):
    config = tmp_path / "nightly.yaml"
    config.write_text("models: [jax-mlp]\ntargets: [{chip: p150}]\nwhole_model: false\nreuse_cached: false\n")
    _, scheduler = start_scheduler(network, tmp_path)
    for name in ("w1", "w2"):  # the deployment's home (Prefect's and opbyop's) is not on these hosts
        start_worker(network, name, scheduler, tmp_path, slow=False, flow_dir=Path(deployed["home"]))
    with Client(scheduler, timeout=60) as watcher:
        watcher.wait_for_workers(2, timeout=120)

    def night(cluster: dict) -> str:
        run = run_and_wait(deployed, "nightly/nightly", {"config_file": str(config), "cluster": cluster})
        assert run["state"] == "COMPLETED", run
        tables = postgres["server"].psql("SELECT count(*) FROM flow_run WHERE id = '%s';" % run["id"])
        assert re.search(r"^\s*1\s*$", tables, re.M), tables  # kept in PostgreSQL
        (target_run,) = _target_run_ids(api(deployed, ARTIFACTS, run["id"])["nightly-summary"])
        return target_run

    on_hosts, on_one_host = night({"address": scheduler}), night({"workers": 2})
    store = Store(Path(deployed["OPBYOP_HOME"]) / "store")
    assert rows(store, on_hosts) == rows(store, on_one_host) and len(rows(store, on_hosts)) >= 8
    assert {r.worker.split("-")[1] for r in store.results(on_hosts)} == {"w1", "w2"}  # the hosts did the work
    assert not any(r.reused_from for r in store.results(on_one_host))  # analysed again, not copied
