"""What orchestration costs per op, for the chosen design and the obvious one.

    .venv/bin/python benchmarks/bench_orchestration.py [--models mlp cnn bert-small] [--dtr-ops 60]

One run, the same unique ops of the zoo, warm workers everywhere:
  plain loop        one OpWorker, ops one after another (the work itself)
  plain Dask        client.map over 1 and 2 Dask workers holding warm OpWorkers
  chosen design     the analyze flow: one Prefect task per op on a thread runner, each handing its
                    op to the Dask cluster (1 and 2 workers)
  DaskTaskRunner    one Prefect task per op executed on Dask workers by prefect-dask (on a sample)
and how long a local Prefect server takes to show every task run of a 1,000-task flow.
Goals: overhead <= 20% of the per-op work; 2-worker speedup >= 1.6x.

A local `prefect server start` on 127.0.0.1 is started for the run (the DaskTaskRunner needs a real
server: its workers cannot use a temporary one).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import Figures, console, zoo_ops


def start_server(home: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1",
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/api"
    for _ in range(120):
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            return proc, url
        except OSError:
            time.sleep(1)
    proc.kill()
    raise RuntimeError("prefect server did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=None, help="default: the whole zoo")
    parser.add_argument("--dtr-ops", type=int, default=60, help="ops for the DaskTaskRunner-per-op design")
    parser.add_argument("--tasks", type=int, default=1000, help="tasks of the server-lag flow")
    args = parser.parse_args()

    from opbyop_flows.hosting.settings import apply_defaults

    apply_defaults()  # the server below starts with the batching the product uses
    work = Path(tempfile.mkdtemp(prefix="bench-orchestration-"))
    server, url = start_server(work / "prefect")
    os.environ.update({"PREFECT_API_URL": url, "PREFECT_HOME": str(work / "prefect"), "OPBYOP_HOME": str(work / "home"),
                       "PREFECT_LOGGING_LEVEL": "WARNING", "DASK_LOGGING__DISTRIBUTED": "error"})
    try:
        run(args, work)
    finally:
        server.terminate()
        server.wait(timeout=30)


def run(args: argparse.Namespace, work: Path) -> None:
    from opbyop.jaxenv import prepare_jax

    prepare_jax()
    from opbyop.config import load_zoo

    args.models = args.models or [m.name for m in load_zoo().small()]
    from distributed import Client, LocalCluster

    from opbyop_flows.analyze import analyze, new_run_id
    from opbyop.compiler.system_desc import resolve
    from opbyop.config import AnalysisConfig, ClusterConfig
    from opbyop.worker import dask as on_dask
    from opbyop.worker.process import OpWorker
    from opbyop.config import AnalysisSettings
    from opbyop.workspace import Workspace
    from opbyop_storage.dataset import Store

    desc = resolve("p150")
    _, ops = zoo_ops(args.models)
    n = len(ops)
    settings = AnalysisSettings()
    workspace = Workspace.default()
    timings: dict[str, float] = {}

    console.print(f"{n} unique ops; plain loop ...")
    with OpWorker(desc.path, workspace.root, chip=desc.chip, name="loop") as worker:
        start = time.perf_counter()
        for op in ops:
            worker.analyze(op, settings, 300)
        timings["plain loop, 1 worker"] = time.perf_counter() - start

    for workers in (1, 2):
        console.print(f"plain Dask, {workers} workers ...")
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=None) as cluster, Client(cluster) as client:
            plugin = on_dask.OpWorkerPlugin(str(workspace.root), {desc.chip: desc.path.read_bytes()})
            client.register_plugin(plugin)
            client.run(on_dask.warm_up, plugin.name, desc.chip)
            start = time.perf_counter()
            client.gather(client.map(on_dask.analyze_op, [plugin.name] * len(ops), ops, chip=desc.chip,
                                     settings=settings, timeout=300, pure=False))
            timings[f"plain Dask, {workers} workers"] = time.perf_counter() - start

    store = Store(workspace.store)
    flow_wall: dict[int, float] = {}
    for workers in (1, 2):
        console.print(f"analyze flow, {workers} workers ...")
        run_id = new_run_id()
        config = AnalysisConfig(models=args.models, reuse_cached=False, whole_model=False,
                                cluster=ClusterConfig(workers=workers))
        start = time.perf_counter()
        analyze(config=config, run_id=run_id)
        flow_wall[workers] = time.perf_counter() - start
        results = store.results(run_id)
        timings[f"chosen design, {workers} workers"] = (max(r.ended_at for r in results)
                                                         - min(r.started_at for r in results)).total_seconds()

    sample = ops[: args.dtr_ops]
    console.print(f"DaskTaskRunner per op, {len(sample)} ops ...")
    timings[f"DaskTaskRunner per op, 2 workers ({len(sample)} ops)"] = dask_task_runner(sample, desc, workspace)
    console.print(f"server lag, {args.tasks} tasks ...")
    lag = server_lag(args.tasks)

    per_op = {name: seconds / (len(sample) if name.startswith("DaskTaskRunner") else n)
              for name, seconds in timings.items()}
    table = Figures(f"{n} unique ops of {', '.join(args.models)}: the fan-out", ["design", "wall s", "ms per op"])
    for name, seconds in timings.items():
        table.add(name, seconds, 1000 * per_op[name])
    table.show()

    work_ms = 1000 * per_op["plain loop, 1 worker"]
    overhead = Figures(f"orchestration overhead per op (per-op work: {work_ms:.1f} ms in the plain loop)",
                       ["design", "against", "overhead ms/op", "% of per-op time"])

    def compare(design: str, baseline: str) -> None:
        extra = 1000 * (per_op[design] - per_op[baseline])
        overhead.add(design, baseline, extra, 100 * extra / (1000 * per_op[baseline]))

    compare("chosen design, 1 workers", "plain loop, 1 worker")
    compare("chosen design, 1 workers", "plain Dask, 1 workers")
    compare("chosen design, 2 workers", "plain Dask, 2 workers")
    compare(f"DaskTaskRunner per op, 2 workers ({len(sample)} ops)", "plain Dask, 2 workers")
    overhead.show()
    speed = Figures("speedup from 1 to 2 workers", ["design", "1 worker s", "2 workers s", "speedup"])
    for design in ("plain Dask", "chosen design"):
        one, two = timings[f"{design}, 1 workers"], timings[f"{design}, 2 workers"]
        speed.add(design, one, two, one / two)
    speed.show()
    console.print(f"analyze flow end to end (server calls, split, cluster start, store): {flow_wall[1]:.1f} s "
                  f"with 1 worker, {flow_wall[2]:.1f} s with 2")
    console.print(f"server lag: a {args.tasks}-task flow returned after {lag[0]:.1f} s; the server showed all "
                  f"{args.tasks} task runs {lag[1]:.1f} s later")


def dask_task_runner(ops, desc, workspace) -> float:
    """The obvious design: prefect-dask runs each op's task on a Dask worker."""
    from prefect import flow, task
    from prefect.cache_policies import NONE
    from prefect.context import get_run_context
    from prefect_dask import DaskTaskRunner

    from opbyop.worker import dask as on_dask
    from opbyop.config import AnalysisSettings

    plugin = on_dask.OpWorkerPlugin(str(workspace.root), {desc.chip: desc.path.read_bytes()})

    @task(cache_policy=NONE, persist_result=False)
    def op_task(op, chip: str):
        return on_dask.analyze_op(plugin.name, op, chip, AnalysisSettings(), 300)

    @flow(task_runner=DaskTaskRunner(cluster_kwargs={"n_workers": 2, "threads_per_worker": 1, "processes": True,
                                                     "dashboard_address": None}))
    def fan_out() -> float:
        client = get_run_context().task_runner.client
        client.register_plugin(plugin)
        client.run(on_dask.warm_up, plugin.name, desc.chip)
        start = time.perf_counter()
        futures = [op_task.submit(op, desc.chip) for op in ops]
        for f in futures:
            f.result()
        return time.perf_counter() - start

    return fan_out()


def server_lag(tasks: int) -> tuple[float, float]:
    """(seconds the flow took, seconds more until the server showed every task run)."""
    import httpx
    from prefect import flow, task
    from prefect.cache_policies import NONE
    from prefect.context import get_run_context
    from prefect.task_runners import ThreadPoolTaskRunner

    @task(cache_policy=NONE, persist_result=False)
    def noop(i: int) -> int:
        return i

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=8))
    def many():
        for f in [noop.submit(i) for i in range(tasks)]:
            f.result()
        return get_run_context().flow_run.id

    start = time.perf_counter()
    flow_run_id = many()
    ran = time.perf_counter() - start
    start = time.perf_counter()
    query = {"flow_runs": {"id": {"any_": [str(flow_run_id)]}}}
    while True:
        count = httpx.post(f"{os.environ['PREFECT_API_URL']}/task_runs/count", json=query, timeout=30).json()
        if count >= tasks or time.perf_counter() - start > 600:
            return ran, time.perf_counter() - start
        time.sleep(0.5)


if __name__ == "__main__":
    main()
