"""What one `opbyop analyze` costs end to end: this checkout against a baseline revision, in the same run.

    .venv/bin/python benchmarks/bench_run.py [--scenarios mlp resnet50 bert-base zoo] [--baseline-ref REF]
                                             [--repeat N]

Two implementations of the orchestration side by side, on the same machine, one after the other:
  baseline  the whole product as of --baseline-ref (default: BASELINE_REF, a revision without the orchestration's
            fixed-cost savings; its op analysis differs too)
  current   this checkout
Scenarios (wall time of the whole command, from the shell's point of view):
  mlp, resnet50, bert-base   warm: an untimed run of the three first fills every cache (page cache,
                             descriptor, exports, XLA executables, Prefect's database); then each
                             model alone with --no-reuse, so every op is analysed again
  mlp, existing server       the same, with a Prefect server already running (PREFECT_API_URL)
  mlp, resident              a Prefect server and a Dask cluster already running (PREFECT_API_URL,
                             OPBYOP_DASK_ADDRESS: a deployment's shape), after one untimed run on them
  <model>, opbyop serve      the current tree only (the baseline has no such command): `opbyop serve`
                             running in the workspace, after one untimed mlp run on it; each model
                             with --no-reuse
  zoo                        cold: every zoo model in one run, with a fresh OPBYOP_HOME, PREFECT_HOME
                             and OPBYOP_CACHE_DIR (descriptor, exports, executables, database: none)
Goals: warm mlp <= 8 s, resnet50 <= 30 s, bert-base <= 30 s, zoo cold <= 5 min.
Every warm scenario runs --repeat times (default 3) in a row: the median is shown with the range.
Beside each: the machine's busy CPU seconds during the run (psutil.cpu_times, all processes). On 2
cores a run cannot take less than half of them, whatever overlaps: that is why a CLI run that starts
its own server and cluster cannot reach the mlp goal here. The current implementation's phases
(RunInfo.phases, of the median run) are printed beside its times.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from common import Figures, console

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
BASELINE_REF = "4770261^"  # the orchestration without its fixed-cost savings
GOALS = {"mlp": 8.0, "mlp, existing server": 8.0, "mlp, resident": 8.0, "mlp, opbyop serve": 8.0, "resnet50": 30.0,
         "resnet50, opbyop serve": 30.0, "bert-base": 30.0, "bert-base, opbyop serve": 30.0, "zoo": 300.0}


@dataclass
class Measure:
    seconds: float | None = None
    phases: dict[str, float] = field(default_factory=dict)
    error: str = ""
    load: float = 0.0  # the machine's 1-minute load average at the end (others' work shows here)
    cpu: float = 0.0  # busy CPU seconds of the whole machine during the run
    spread: tuple[float, float] | None = None  # (fastest, slowest) of repeated runs

    def cell(self) -> str:
        if self.seconds is None:
            return f"error: {self.error}"
        spread = f" [{self.spread[0]:.1f}-{self.spread[1]:.1f}]" if self.spread else ""
        return f"{self.seconds:.1f}{spread} (cpu {self.cpu:.0f} s, load {self.load:.1f})"


def busy_cpu_seconds() -> float:
    """CPU seconds the machine has spent busy since boot (user, nice, system, irq, softirq)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq


def repeated(times: int, measure) -> Measure:  # noqa: ANN001
    """`measure(i)` `times` times in a row: the median run, with the range of the wall times."""
    runs = [measure(i) for i in range(times)]
    done = sorted((m for m in runs if m.seconds is not None), key=lambda m: m.seconds)
    if len(done) < len(runs):
        return next(m for m in runs if m.seconds is None)
    median = done[(len(done) - 1) // 2]
    median.seconds = statistics.median(m.seconds for m in done)
    if len(done) > 1:
        median.spread = (done[0].seconds, done[-1].seconds)
    return median


def baseline_tree(ref: str, work: Path) -> Path:
    """The product as of `ref` (git archive), beside this checkout's virtual environment."""
    tree = work / "baseline"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "OPBYOP_", "JAX_"))}
    env.update({"PATH": f"{BIN}:{os.environ['PATH']}", "COLUMNS": "200", **extra})
    return env


def analyze(tree: Path, models: list[str], home: Path, prefect_home: Path, run_id: str, *flags: str,
            **extra: str) -> Measure:
    env = clean_env(OPBYOP_HOME=str(home), PREFECT_HOME=str(prefect_home), PYTHONPATH=str(tree), **extra)
    start, cpu = time.perf_counter(), busy_cpu_seconds()
    proc = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "analyze", *models, "--run-id", run_id, *flags],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
    seconds, cpu = time.perf_counter() - start, busy_cpu_seconds() - cpu
    if proc.returncode != 0:
        log = LOGS / f"{tree.name}-{run_id}.log"  # kept: the work directory is removed at the end
        LOGS.mkdir(exist_ok=True)
        log.write_text(proc.stdout + proc.stderr)
        return Measure(error=f"exit {proc.returncode}: {failure_line(proc.stdout + proc.stderr)} (log: {log})")
    measure = Measure(seconds, load=os.getloadavg()[0], cpu=cpu)
    try:
        from storage.dataset import Store

        measure.phases = Store(home / "store").run(run_id).phases
    except Exception:  # the baseline records none
        pass
    return measure


LOGS = Path(tempfile.gettempdir()) / "bench-run-logs"
_NOISE = re.compile(r"^[IWE]\d{4} |^\d\d:\d\d:\d\d\.\d+ \| (INFO|DEBUG)")  # glog and Prefect INFO lines


def failure_line(output: str) -> str:
    """The line that says why a run failed: opbyop's own error if printed, else the last line
    that is not a library's log chatter."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith(("error:", "Error:")) or "Error" in line.split(":")[0]:
            return line[:200]
    quiet = [line for line in lines if not _NOISE.match(line)]
    return (quiet or lines or ["no output"])[-1][:200]


def start_server(prefect_home: Path) -> tuple[subprocess.Popen, str]:
    from flows.hosting.settings import server_env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/api"
    env = {**server_env(ui_api_url=url), "PREFECT_HOME": str(prefect_home)}
    proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from flows.hosting.server import healthy

    deadline = time.monotonic() + 180
    while not healthy(url):
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("prefect server did not start")
        time.sleep(0.5)
    return proc, url


_CLUSTER = """
import json, sys, threading, dask
from distributed import LocalCluster
if __name__ == "__main__":
    dask.config.set(json.loads(sys.argv[1]))
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None)
    print(json.dumps({"address": cluster.scheduler_address}), flush=True)
    threading.Event().wait()
"""


def start_cluster(tree: Path, work: Path) -> tuple[subprocess.Popen, str]:
    """A standing LocalCluster with opbyop's scheduler settings (flows.hosting.cluster), its workers importing
    `tree`'s code (each implementation gets a cluster that runs its own functions)."""
    import json

    from flows.hosting.cluster import SCHEDULER_SETTINGS

    script, log = work / f"{tree.name}-cluster.py", work / f"{tree.name}-cluster.log"
    script.write_text(_CLUSTER)
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, str(script), json.dumps(SCHEDULER_SETTINGS)], cwd=tree,
                                env=clean_env(PYTHONPATH=str(tree)), stdout=subprocess.PIPE, stderr=err)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # its address, once the scheduler is up
    if not line:
        proc.kill()
        raise RuntimeError(f"the Dask cluster did not start: see {log}")
    return proc, json.loads(line)["address"]


def start_service(tree: Path, home: Path, prefect_home: Path, work: Path) -> subprocess.Popen:
    """`opbyop serve` of `tree` for the workspace `home`, once it serves."""
    log = work / f"{tree.name}-serve.log"
    env = clean_env(OPBYOP_HOME=str(home), PREFECT_HOME=str(prefect_home), PYTHONPATH=str(tree))
    proc = subprocess.Popen([sys.executable, "-m", "opbyop.cli.main", "serve"], cwd=tree, env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while "now runs here" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"opbyop serve did not start: see {log}")
        time.sleep(0.5)
    return proc


def run(tree: Path, name: str, scenarios: list[str], work: Path, times: int, out: dict[str, Measure]) -> None:
    """Fills `out` scenario by scenario (what was measured survives a scenario that breaks)."""
    home, prefect_home = work / f"{name}-home", work / f"{name}-prefect"
    warm = [m for m in ("mlp", "resnet50", "bert-base") if m in scenarios]
    if warm:
        console.print(f"{name}: filling the caches (untimed run of {' '.join(warm)}) ...")
        analyze(tree, warm, home, prefect_home, "bench-warm")
    for model in warm:
        console.print(f"{name}: {model} (warm) ...")
        out[model] = repeated(times, lambda i: analyze(tree, [model], home, prefect_home, f"bench-{model}-{i}",
                                                       "--no-reuse"))
    if "mlp" in scenarios:
        console.print(f"{name}: mlp with an existing Prefect server ...")
        server, url = start_server(prefect_home)
        try:
            out["mlp, existing server"] = repeated(times, lambda i: analyze(
                tree, ["mlp"], home, prefect_home, f"bench-mlp-server-{i}", "--no-reuse", PREFECT_API_URL=url))
        finally:
            server.terminate()
            server.wait(timeout=60)
    if "mlp" in scenarios:
        console.print(f"{name}: mlp with a Prefect server and a Dask cluster already running ...")
        server, url = start_server(prefect_home)
        cluster, address = start_cluster(tree, work)
        try:
            resident = {"PREFECT_API_URL": url, "OPBYOP_DASK_ADDRESS": address}
            analyze(tree, ["mlp"], home, prefect_home, "bench-mlp-resident-warm", "--no-reuse", **resident)
            out["mlp, resident"] = repeated(times, lambda i: analyze(
                tree, ["mlp"], home, prefect_home, f"bench-mlp-resident-{i}", "--no-reuse", **resident))
        finally:
            for proc in (cluster, server):
                proc.terminate()
                proc.wait(timeout=60)
    served = [m for m in ("mlp", "resnet50", "bert-base") if m in scenarios]
    if served and (tree / "flows" / "serve.py").exists():
        console.print(f"{name}: {' '.join(served)} with `opbyop serve` running ...")
        service = start_service(tree, home, prefect_home, work)
        try:
            analyze(tree, ["mlp"], home, prefect_home, "bench-serve-warm", "--no-reuse")
            for model in served:
                out[f"{model}, opbyop serve"] = repeated(times, lambda i: analyze(
                    tree, [model], home, prefect_home, f"bench-{model}-serve-{i}", "--no-reuse"))
        finally:  # SIGTERM, as systemd stops it (SIGINT is ignored when this script runs in the background)
            service.terminate()
            service.wait(timeout=120)
    if "zoo" in scenarios:
        from opbyop.config import load_zoo

        console.print(f"{name}: the whole zoo, cold ...")
        out["zoo"] = analyze(tree, [m.name for m in load_zoo().small()], work / f"{name}-zoo",
                             work / f"{name}-zoo-prefect", "bench-zoo", OPBYOP_CACHE_DIR=str(work / f"{name}-zoo-cache"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenarios", nargs="*", default=["mlp", "resnet50", "bert-base", "zoo"])
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each warm scenario (the median is shown)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-run-"))
    results: dict[str, dict[str, Measure]] = {"baseline": {}, "current": {}}
    try:
        if not args.no_baseline:
            run(baseline_tree(args.baseline_ref, work), "baseline", args.scenarios, work, args.repeat,
                results["baseline"])
        run(ROOT, "current", args.scenarios, work, args.repeat, results["current"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
        show(results)  # what was measured, also when a scenario broke (its traceback follows)


def show(results: dict[str, dict[str, Measure]]) -> None:
    from flows.engine.phases import format_phases

    figures = Figures("opbyop analyze, wall seconds: median [fastest-slowest] of the repeats (2-core machine; same run)",
                      ["scenario", "goal", "baseline", "current", "current's phases"])
    for scenario in GOALS:
        cells = []
        for impl in ("baseline", "current"):
            m = results.get(impl, {}).get(scenario)
            cells.append("-" if m is None else m.cell())
        current = results.get("current", {}).get(scenario)
        if current is None and all(c == "-" for c in cells):
            continue
        figures.add(scenario, f"<= {GOALS[scenario]:.0f}", *cells, format_phases(current.phases) if current else "")
    figures.show()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
