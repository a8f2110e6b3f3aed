"""What one `opbyop analyze` costs end to end, now and before, in the same run, against its goals.

    .venv/bin/python benchmarks/bench_run.py [--scenarios mlp resnet50 bert-base zoo] [--baseline-ref REF]
                                             [--repeat N] [--no-baseline]

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
  <model>, opbyop serve      `opbyop serve` running in the workspace, after one untimed mlp run on
                             it; each model with --no-reuse. The command is looked up in the tree's
                             CLI (whichever module registers it), not by a file's path; a baseline
                             older than the command has no such rows (it prints why)
  zoo                        cold: every zoo model in one run, with a fresh OPBYOP_HOME, PREFECT_HOME
                             and OPBYOP_CACHE_DIR (descriptor, exports, executables, database: none)
Goals, the accuracy trace on (its default): with `opbyop serve` mlp <= 8 s, resnet50 <= 30 s, bert-base
<= 30 s; zoo cold <= 5 min. The other rows have none: on 2 cores a CLI run that starts its own server
and cluster cannot reach the mlp goal.
Every warm scenario runs --repeat times (default 3) in a row: the median is shown with the range,
and the range (slowest - fastest; 0 for a single run) is the noise a verdict allows: a goal is
missed when the current median exceeds it by more than that.
Beside each: the machine's busy CPU seconds during the run (psutil.cpu_times, all processes). On 2
cores a run cannot take less than half of them, whatever overlaps. The current implementation's phases
(RunInfo.phases) are those of the median run, and so are each implementation's whole-model seconds
with the accuracy trace's share of them (the models table's whole_s and whole_trace_s).
Exit status: 1 when a scenario asked for could not run (the table says why) or a goal was missed
beyond the noise; 0 otherwise.
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
from typing import Callable

import psutil
from common import Figures, console

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
BASELINE_REF = "4770261^"  # the commit before the orchestration's fixed-cost work
# Every row, in the table's order, with its goal in wall seconds (None: measured, no goal).
GOALS: dict[str, float | None] = {
    "mlp": None, "mlp, existing server": None, "mlp, resident": None, "mlp, opbyop serve": 8.0, "resnet50": None,
    "resnet50, opbyop serve": 30.0, "bert-base": None, "bert-base, opbyop serve": 30.0, "zoo": 300.0}
SERVED = ("mlp", "resnet50", "bert-base")
NO_TREE = "the baseline's tree"  # the row of a --baseline-ref that could not be checked out


@dataclass
class Measure:
    seconds: float | None = None
    phases: dict[str, float] = field(default_factory=dict)
    error: str = ""
    load: float = 0.0  # the machine's 1-minute load average at the end (others' work shows here)
    cpu: float = 0.0  # busy CPU seconds of the whole machine during the run
    spread: tuple[float, float] | None = None  # (fastest, slowest) of repeated runs
    whole_s: float | None = None  # the run's whole-model seconds (models.whole_s, summed over its models)
    trace_s: float | None = None  # of which the accuracy trace's (models.whole_trace_s)

    @property
    def noise(self) -> float:
        return self.spread[1] - self.spread[0] if self.spread else 0.0

    def whole_cell(self) -> str:
        if self.whole_s is None:
            return ""
        share = f" ({self.trace_s / self.whole_s:.0%})" if self.trace_s is not None and self.whole_s > 0 else ""
        return f"{self.whole_s:.1f}" + ("" if self.trace_s is None else f", trace {self.trace_s:.1f}{share}")

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
        from opbyop_storage.dataset import Store

        store = Store(home / "store")
        measure.phases = store.run(run_id).phases
        models = store.read_table("models", run_id)
        measure.whole_s = _total(models, "whole_s")
        measure.trace_s = _total(models, "whole_trace_s")
    except Exception:  # the baseline records none
        pass
    return measure


def _total(table, column: str) -> float | None:  # noqa: ANN001  (a pyarrow Table)
    """The column's sum over the models that have it; None when none does (or the table has no such column)."""
    if column not in table.column_names:
        return None
    values = [v for v in table.column(column).to_pylist() if v is not None]
    return sum(values) if values else None


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
    from opbyop_flows.hosting.settings import server_env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/api"
    env = {**server_env(ui_api_url=url), "PREFECT_HOME": str(prefect_home)}
    proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from opbyop_flows.hosting.server import healthy

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
    """A standing LocalCluster with opbyop's scheduler settings (opbyop_flows.hosting.cluster), its workers importing
    `tree`'s code (each implementation gets a cluster that runs its own functions)."""
    import json

    from opbyop_flows.hosting.cluster import SCHEDULER_SETTINGS

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


_HAS_COMMAND = """
import sys
from opbyop.cli.main import build_app
names = {c.name or c.callback.__name__.replace("_", "-") for c in build_app().registered_commands}
sys.exit(0 if sys.argv[1] in names else 3)
"""


def missing_command(tree: Path, command: str) -> str | None:
    """Why `opbyop <command>` cannot run from `tree` (None: its CLI has it). Asked of the tree's own
    CLI, as `opbyop` builds it (its commands and its plugins'), so the command is found wherever it lives."""
    proc = subprocess.run([sys.executable, "-c", _HAS_COMMAND, command], cwd=tree, env=clean_env(PYTHONPATH=str(tree)),
                          capture_output=True, text=True, timeout=300)
    if proc.returncode == 0:
        return None
    if proc.returncode == 3:
        return f"`opbyop {command}` is not a command of {tree.name}'s CLI"
    return f"{tree.name}'s CLI could not be imported: {failure_line(proc.stdout + proc.stderr)}"


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


def attempt(out: dict[str, Measure], rows: list[str], body: Callable[[], None]) -> None:
    """`body` fills `rows` of `out`; a row it could not fill says why (a scenario that breaks stops
    only itself: the next one still runs, and main() fails the benchmark)."""
    try:
        body()
    except Exception as e:
        why = f"{type(e).__name__}: {e}"
        for row in rows:
            if row not in out:
                out[row] = Measure(error=why)
    for row in rows:
        out.setdefault(row, Measure(error="not measured: the scenario ended before it"))


def run(tree: Path, name: str, scenarios: list[str], work: Path, times: int, out: dict[str, Measure],
        need_serve: bool) -> None:
    """Fills `out` scenario by scenario. A tree without `opbyop serve` fails its serve rows when
    `need_serve`, else (a baseline older than the command) it has none, and says so."""
    home, prefect_home = work / f"{name}-home", work / f"{name}-prefect"
    warm = [m for m in SERVED if m in scenarios]

    def warm_runs() -> None:
        console.print(f"{name}: filling the caches (untimed run of {' '.join(warm)}) ...")
        analyze(tree, warm, home, prefect_home, "bench-warm")
        for model in warm:
            console.print(f"{name}: {model} (warm) ...")
            out[model] = repeated(times, lambda i: analyze(tree, [model], home, prefect_home, f"bench-{model}-{i}",
                                                           "--no-reuse"))

    def existing_server() -> None:
        console.print(f"{name}: mlp with an existing Prefect server ...")
        server, url = start_server(prefect_home)
        try:
            out["mlp, existing server"] = repeated(times, lambda i: analyze(
                tree, ["mlp"], home, prefect_home, f"bench-mlp-server-{i}", "--no-reuse", PREFECT_API_URL=url))
        finally:
            server.terminate()
            server.wait(timeout=60)

    def resident() -> None:
        console.print(f"{name}: mlp with a Prefect server and a Dask cluster already running ...")
        server, url = start_server(prefect_home)
        try:
            cluster, address = start_cluster(tree, work)
        except Exception:
            server.terminate()
            raise
        try:
            env = {"PREFECT_API_URL": url, "OPBYOP_DASK_ADDRESS": address}
            analyze(tree, ["mlp"], home, prefect_home, "bench-mlp-resident-warm", "--no-reuse", **env)
            out["mlp, resident"] = repeated(times, lambda i: analyze(
                tree, ["mlp"], home, prefect_home, f"bench-mlp-resident-{i}", "--no-reuse", **env))
        finally:
            for proc in (cluster, server):
                proc.terminate()
                proc.wait(timeout=60)

    def served_runs() -> None:
        if missing is not None:
            raise RuntimeError(missing)
        console.print(f"{name}: {' '.join(warm)} with `opbyop serve` running ...")
        service = start_service(tree, home, prefect_home, work)
        try:
            analyze(tree, ["mlp"], home, prefect_home, "bench-serve-warm", "--no-reuse")
            for model in warm:
                out[f"{model}, opbyop serve"] = repeated(times, lambda i: analyze(
                    tree, [model], home, prefect_home, f"bench-{model}-serve-{i}", "--no-reuse"))
        finally:  # SIGTERM, as systemd stops it (SIGINT is ignored when this script runs in the background)
            service.terminate()
            service.wait(timeout=120)

    def zoo() -> None:
        from opbyop.config import load_zoo

        console.print(f"{name}: the whole zoo, cold ...")
        out["zoo"] = analyze(tree, [m.name for m in load_zoo().small()], work / f"{name}-zoo",
                             work / f"{name}-zoo-prefect", "bench-zoo", OPBYOP_CACHE_DIR=str(work / f"{name}-zoo-cache"))

    if warm:
        attempt(out, warm, warm_runs)
    if "mlp" in scenarios:
        attempt(out, ["mlp, existing server"], existing_server)
        attempt(out, ["mlp, resident"], resident)
    if warm:
        missing = missing_command(tree, "serve")
        if missing is None or need_serve:
            attempt(out, [f"{m}, opbyop serve" for m in warm], served_runs)
        else:
            console.print(f"{name}: no `opbyop serve` rows: {missing}")
    if "zoo" in scenarios:
        attempt(out, ["zoo"], zoo)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenarios", nargs="*", default=["mlp", "resnet50", "bert-base", "zoo"],
                        choices=[*SERVED, "zoo"])
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each warm scenario (the median is shown)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-run-"))
    results: dict[str, dict[str, Measure]] = {"baseline": {}, "current": {}}
    try:
        if not args.no_baseline:
            try:
                tree = baseline_tree(args.baseline_ref, work)
            except subprocess.CalledProcessError as e:
                why = e.stderr.decode().strip()[:200] if e.stderr else str(e)
                results["baseline"][NO_TREE] = Measure(error=f"no tree at {args.baseline_ref}: {why}")
            else:
                run(tree, "baseline", args.scenarios, work, args.repeat, results["baseline"], need_serve=False)
        run(ROOT, "current", args.scenarios, work, args.repeat, results["current"], need_serve=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        show(results)  # what was measured, also when the benchmark itself broke (its traceback follows)
    failures = verdicts(results)
    for line in failures:
        console.print(f"FAILED: {line}")
    return 1 if failures else 0


def verdict(goal: float | None, m: Measure | None) -> tuple[str, bool]:
    """(what the row says of its goal, whether the benchmark fails for it)."""
    if m is None:
        return "-", False
    if m.seconds is None:
        return "could not run", True
    if goal is None:
        return "", False
    over = m.seconds - goal
    if over <= 0:
        return f"met ({-over:.1f} s to spare)", False
    if over <= m.noise:
        return f"missed by {over:.1f} s, within the noise ({m.noise:.1f} s)", False
    return f"MISSED by {over:.1f} s (noise {m.noise:.1f} s)", True


def verdicts(results: dict[str, dict[str, Measure]]) -> list[str]:
    """Why the benchmark fails: each scenario that could not run, each goal missed beyond the noise."""
    failures = []
    for impl, rows in results.items():
        for scenario, m in rows.items():
            says, fails = verdict(GOALS.get(scenario) if impl == "current" else None, m)
            if fails:
                failures.append(f"{scenario} ({impl}): " + (m.error if m.seconds is None else f"{says}, goal "
                                                            f"{GOALS[scenario]:.0f} s, median {m.seconds:.1f} s"))
    return failures


def show(results: dict[str, dict[str, Measure]]) -> None:
    from opbyop_flows.engine.phases import format_phases

    figures = Figures("opbyop analyze, wall seconds: median [fastest-slowest] of the repeats (2-core machine; same run)",
                      ["scenario", "goal", "baseline", "current", "verdict (current)",
                       "whole model s, trace's share: baseline / current", "current's phases"])
    for scenario, goal in GOALS.items():
        baseline, current = results.get("baseline", {}).get(scenario), results.get("current", {}).get(scenario)
        if baseline is None and current is None:
            continue
        figures.add(scenario, "-" if goal is None else f"<= {goal:.0f}",
                    *("-" if m is None else m.cell() for m in (baseline, current)), verdict(goal, current)[0],
                    " / ".join((m.whole_cell() if m else "") or "-" for m in (baseline, current)),
                    format_phases(current.phases) if current else "")
    if NO_TREE in results.get("baseline", {}):
        figures.add(NO_TREE, "-", results["baseline"][NO_TREE].cell(), "", "could not run", "", "")
    figures.show()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
