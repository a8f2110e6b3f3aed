"""What Dask workers on other hosts cost: the analyze flow's fan-out with nothing shared but the network.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_remote_hosts.py [--models mlp cnn] [--repeat 2]

The same config (the models' unique ops, no whole model, no reuse), warm op workers, one run each of:
  one host        a LocalCluster of 2 workers on the flow's host (the baseline)
  hosts, shared   a scheduler and 2 worker hosts (network namespaces on a bridge, as in
                  tests/test_remote_hosts.py) that see the flow's home: nothing travels but the ops
  hosts, own home the same hosts, each with its own home and the flow's hidden: each result brings its
                  artifacts back (opbyop.worker.wire)
and per op: the fan-out's time, the bytes of artifacts that came back, the bytes of inputs sent (an
op's input values go only to a worker without the flow's home, once it asks: the ops that asked are
counted from the scheduler's task stream). Needs root (ip netns).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from common import Figures

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the namespace hosts of the tests
from netns_hosts import HostNetwork, unavailable  # noqa: E402

DASK = str(Path(sys.executable).with_name("dask"))


def host_env(home: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPBYOP_", "PREFECT_", "DASK_"))}
    if home is not None:
        env["OPBYOP_HOME"] = str(home)
    return env


def on_hosts(config, work: Path, flow_dir: Path, own_home: bool, label: str):  # noqa: ANN001, ANN201
    """(the run's summary, how many op tasks asked for their inputs) on a scheduler host and 2 worker hosts."""
    from distributed import Client

    from opbyop.config import ClusterConfig

    network = HostNetwork()
    try:
        sched = network.add("sched")
        network.start(sched, [DASK, "scheduler", "--host", sched.address, "--port", "8786",
                              "--dashboard-address", f"{sched.address}:0"], host_env(None), work / f"{label}-sched.log")
        address = f"tcp://{sched.address}:8786"
        for name in ("w1", "w2"):
            host = network.add(name)
            home = work / label / name / "home" if own_home else flow_dir / "home"
            network.start(host, [DASK, "worker", address, "--host", host.address, "--name", name, "--nthreads", "1",
                                 "--no-nanny", "--dashboard-address", f"{host.address}:0"],
                          host_env(home), work / f"{label}-{name}.log", hidden=(flow_dir,) if own_home else ())
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=180)
            client.get_task_stream()  # the scheduler records finished tasks from now on
            summary = run(config.model_copy(update={"cluster": ClusterConfig(address=address)}))
            asked = sum(1 for e in client.get_task_stream()
                        if str(e["key"]).startswith("op-") and e.get("status") == "error")
        return summary, asked
    finally:
        network.close()


def run(config):  # noqa: ANN001, ANN201
    from opbyop_flows.analyze import RunFailed, analyze, new_run_id

    state = analyze(config=config, run_id=new_run_id(), return_state=True)
    data = state.result(raise_on_failure=False)
    summary = data.summary if isinstance(data, RunFailed) else data
    if not state.is_completed():
        raise RuntimeError(f"the run failed: {state.message}")
    return summary


def traffic(home: Path, run_id: str) -> tuple[int, int]:
    """(bytes of artifacts the run's results name, bytes of inputs its ops carry)."""
    from opbyop.artifacts import ArtifactStore
    from opbyop.worker.wire import named_digests, pack
    from opbyop.workspace import OpIndex
    from opbyop_storage.dataset import Store

    artifacts, ops = ArtifactStore(home / "artifacts"), OpIndex(home / "ops")
    results = Store(home / "store").results(run_id)
    back = sum(len(data) for r in results for _, data in pack(artifacts, named_digests(r)).values())
    sent = sum(len(data) for r in results
               for _, data in pack(artifacts, ops.get(r.signature).input_values.values()).values())
    return back, sent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=["mlp", "cnn"])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        sys.exit(f"cannot build hosts here: {reason}")
    from bench_orchestration import start_server
    from opbyop_flows.hosting.settings import apply_defaults

    apply_defaults()
    work = Path(tempfile.mkdtemp(prefix="bench-remote-hosts-"))
    flow_dir = work / "flow"
    server, url = start_server(work / "prefect")
    os.environ.update({"PREFECT_API_URL": url, "PREFECT_HOME": str(work / "prefect"),
                       "OPBYOP_HOME": str(flow_dir / "home"), "PREFECT_LOGGING_LEVEL": "WARNING",
                       "DASK_LOGGING__DISTRIBUTED": "error"})
    try:
        measure(args, work, flow_dir)
    finally:
        server.terminate()
        server.wait(timeout=30)


def measure(args: argparse.Namespace, work: Path, flow_dir: Path) -> None:
    from opbyop.config import AnalysisConfig, ClusterConfig
    from opbyop.jaxenv import prepare_jax
    from opbyop.worker.wire import home_id

    prepare_jax()
    home_id(flow_dir / "home")
    config = AnalysisConfig(models=args.models, whole_model=False, reuse_cached=False)
    one_host = config.model_copy(update={"cluster": ClusterConfig(workers=2)})
    setups = {"one host (LocalCluster, 2 workers)": lambda: (run(one_host), "-"),
              "2 worker hosts, the flow's home shared": lambda: on_hosts(config, work, flow_dir, False, "shared"),
              "2 worker hosts, each its own home": lambda: on_hosts(config, work, flow_dir, True, "own")}
    figures = Figures(f"the analyze fan-out on other hosts ({' '.join(args.models)}; 2 op streams each)",
                      ["setup", "run", "unique ops", "fan-out s", "ms per op", "artifacts back, KB per op",
                       "inputs sent, KB per op", "ops that asked for inputs", "statuses"])
    for repeat in range(args.repeat):
        for name, setup in setups.items():
            started = time.perf_counter()
            summary, asked = setup()
            back, sent = traffic(flow_dir / "home", summary.run_id) if "own home" in name else (0, 0)
            fan_out = summary.phases.get("fan-out", float("nan"))
            figures.add(name, repeat + 1, summary.ops_unique, fan_out, 1000 * fan_out / summary.ops_unique,
                        back / 1024 / summary.ops_unique, sent / 1024 / summary.ops_unique, asked,
                        " ".join(f"{k} {v}" for k, v in sorted(summary.statuses.items())))
            print(f"{name}: {time.perf_counter() - started:.1f} s in all", flush=True)
    figures.show()


if __name__ == "__main__":
    main()
