"""The nightly deployment as an operator grows it: Prefect's server on PostgreSQL (deployments/README.md's
set-up, literally), the flow in its process worker, the ops on Dask worker hosts that share nothing
with it but the network (network namespaces, each host with its own home), the store on S3-compatible
object storage; the stored rows are those of the same nightly on one host with a local store."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from distributed import Client

from opbyop_storage.dataset import Store
from test_deployment_e2e import ARTIFACTS, _target_run_ids, api, deployed, postgres, wait_final  # noqa: F401
from test_remote_hosts import network, rows, start_scheduler, start_worker  # noqa: F401  (fixtures too)

pytestmark = pytest.mark.slow

# a flow run's job variables replace the deployment's `env` as a whole: the deployment's own are kept
RUN_WITH_ENV = """
from prefect.deployments import run_deployment
async def main(c, name, parameters, env):
    deployment = await c.read_deployment_by_name(name)
    job_variables = {"env": {**deployment.job_variables.get("env", {}), **json.loads(env)}}
    run = await run_deployment(name, parameters=json.loads(parameters), job_variables=job_variables, timeout=0)
    return str(run.id)
"""


def hosts_logs(folder: Path, lines: int = 40) -> str:
    """The last lines of the worker hosts' Dask and op worker logs under `folder` (why a run failed there)."""
    logs = sorted(folder.glob("w*.log")) + sorted(folder.glob("w*/home/logs/*.log"))
    return "\n".join(f"--- {log}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) for log in logs)


def test_the_nightly_deployment_on_postgresql_worker_hosts_and_s3_stores_the_rows_of_one_host(
        deployed, postgres, network, s3_server, tmp_path):  # noqa: F811  (fixtures imported above)
    config = tmp_path / "nightly.yaml"
    config.write_text("models: [jax-mlp]\ntargets: [{chip: p150}]\nwhole_model: false\nreuse_cached: false\n")
    _, scheduler = start_scheduler(network, tmp_path)
    for name in ("w1", "w2"):  # the deployment's home (Prefect's and opbyop's) is not on these hosts
        start_worker(network, name, scheduler, tmp_path, slow=False, flow_dir=Path(deployed["home"]))
    with Client(scheduler, timeout=60) as watcher:
        watcher.wait_for_workers(2, timeout=120)

    s3_store = s3_server.url("nightly")

    def night(cluster: dict, env: dict) -> str:
        parameters = {"config_file": str(config), "cluster": cluster}
        run = wait_final(deployed, api(deployed, RUN_WITH_ENV, "nightly/nightly", json.dumps(parameters),
                                       json.dumps(env)))
        assert run["state"] == "COMPLETED", f"{run['state']}: {run['message']}\n{hosts_logs(tmp_path)}"
        tables = postgres["server"].psql("SELECT count(*) FROM flow_run WHERE id = '%s';" % run["id"])
        assert re.search(r"^\s*1\s*$", tables, re.M), tables  # kept in PostgreSQL
        (target_run,) = _target_run_ids(api(deployed, ARTIFACTS, run["id"])["nightly-summary"])
        return target_run

    on_hosts = night({"address": scheduler}, {"OPBYOP_STORE": s3_store, **s3_server.env})
    on_one_host = night({"workers": 2}, {})
    local = Store(Path(deployed["OPBYOP_HOME"]) / "store")
    with pytest.MonkeyPatch.context() as env:  # this process reads the object store as the flow wrote it
        for name, value in s3_server.env.items():
            env.setenv(name, value)
        remote = Store(s3_store)
        assert rows(remote, on_hosts) == rows(local, on_one_host) and len(rows(remote, on_hosts)) >= 8
        assert {r.worker.split("-")[1] for r in remote.results(on_hosts)} == {"w1", "w2"}  # the hosts worked
        assert not local.has_run(on_hosts)  # the store on S3 was the nightly's only store
    assert not any(r.reused_from for r in local.results(on_one_host))  # analysed again, not copied
