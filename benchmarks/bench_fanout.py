"""What the fan-out costs as the work grows: N unique ops through one run's one-Prefect-task-per-op fan-out.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_fanout.py --sizes 1000 5000 [20000]

Per N, in a fresh process with a fresh Prefect server (the CLI's own kind, with the product's
settings) and a LocalCluster in a child process (the CLI's too):
  work alone   the same unique ops through the same warm op workers with plain `client.map`: the
               ops' work without Prefect (the baseline, measured in the same run)
  the flow     the `corpus` flow (flows/corpus.py: AnalyzeRun's fan-out, one `analyze-op` task per
               unique op, results stored in batches)
and prints wall time, ops/s, the flow process's and the Prefect server's peak memory and CPU
seconds, the Prefect database's size once the server has recorded every task run (and how long
that took after the flow returned), and Prefect's per-task overhead: (fan-out wall - work-alone
wall) / N.

The ops: the single-op corpus (about 4.5k cases) and its element-wise cases again with other
shapes (opbyop.corpus.ops.CorpusSelection.shape_variants). The op work is made cheap by stopping
each op after its flatbuffer (compile-only: no device run, no golden); `--full` runs it all.
Goals: memory and CPU per op not growing with N (at most linear growth), overhead <= 15 ms at 20k.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from common import Figures, console

HERE = Path(__file__).resolve()


class Sampler:
    """Peak RSS and CPU seconds of processes (with their children, if asked) while it runs."""

    def __init__(self, procs: list[psutil.Process], children: bool, every: float = 0.5):
        self.procs, self.children, self.every = procs, children, every
        self.peak = 0
        self._stop = threading.Event()
        self._cpu0 = self.cpu()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _family(self) -> list[psutil.Process]:
        out = []
        for p in self.procs:
            try:
                out += [p, *(p.children(recursive=True) if self.children else [])]
            except psutil.NoSuchProcess:
                pass
        return out

    def rss(self) -> int:
        total = 0
        for p in self._family():
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    def cpu(self) -> float:
        total = 0.0
        for p in self._family():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, self.rss())

    def stop(self) -> tuple[int, float]:
        """(peak RSS bytes, CPU seconds since the start)."""
        self._stop.set()
        self._thread.join()
        return max(self.peak, self.rss()), self.cpu() - self._cpu0


def task_runs(api: str, flow_run_id: str) -> int:
    import httpx

    response = httpx.post(f"{api}/task_runs/count", json={"flow_runs": {"id": {"any_": [flow_run_id]}}}, timeout=30)
    response.raise_for_status()
    return int(response.json())


def table_rows(db: Path) -> dict[str, int]:
    """Rows per table of the server's SQLite database (where its size goes), the largest first."""
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        counts = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    return dict(sorted(((t, n) for t, n in counts.items() if n), key=lambda kv: -kv[1])[:8])


def one(n: int, workers: int, chip: str, full: bool, work: Path) -> dict:
    """One size in this process: baseline, then the flow; the figures as a dict."""
    os.environ.update({"OPBYOP_HOME": str(work / "home"), "PREFECT_HOME": str(work / "prefect"),
                       "DASK_LOGGING__DISTRIBUTED": "error"})
    from opbyop_flows.hosting.settings import apply_defaults

    apply_defaults()
    from opbyop_flows.hosting.cluster_process import ClusterProcess
    from opbyop_flows.hosting.server import PrefectApi

    api = PrefectApi(work / "logs", temporary=True)
    cluster = ClusterProcess(workers, chip, work / "logs")
    try:
        url, address = api.wait(), cluster.wait()
        os.environ["PREFECT_API_URL"] = url
        server = next(p for p in psutil.Process().children() if "uvicorn" in " ".join(p.cmdline()))
        return measure(n, chip, full, url, address, server, work)
    finally:
        cluster.close()
        api.close()


def measure(n: int, chip: str, full: bool, url: str, address: str, server: psutil.Process, work: Path) -> dict:
    from distributed import Client, as_completed

    from opbyop_flows.corpus import corpus
    from opbyop_flows.engine.analyze_run import warm_up
    from opbyop.compiler.system_desc import resolve
    from opbyop.config import AnalysisSettings, ClusterConfig, load_thresholds
    from opbyop.corpus.ops import CorpusSelection, corpus_records
    from opbyop.ir.dedupe import dedupe
    from opbyop.worker import dask as on_dask

    # the catalog's cases first, then variant after variant (each adds ~740) until n: the first n
    # are the same whatever the variant count
    selection = CorpusSelection(shape_variants=n // 500, limit=n)
    started = time.monotonic()
    unique = dedupe(corpus_records(selection)[0])
    split_s = time.monotonic() - started
    desc = resolve(chip)
    settings = AnalysisSettings(thresholds=load_thresholds(), run_device=full, run_golden=full, failed_pass=full)
    with Client(address) as client:  # the work alone: the same op workers (the flow's own plugin)
        plugin = on_dask.OpWorkerPlugin.for_home(Path(os.environ["OPBYOP_HOME"]), {desc.chip: desc.path.read_bytes()})
        error = warm_up(client, plugin, desc)
        assert error is None, error
        started = time.monotonic()
        futures = client.map(on_dask.analyze_op, [plugin.name] * len(unique), unique, [desc.chip] * len(unique),
                             [settings] * len(unique), [120.0] * len(unique), pure=False)
        for future in as_completed(futures):
            future.result()
        alone_s = time.monotonic() - started
        del futures

    flow_proc = psutil.Process()
    flow_sampler, server_sampler = Sampler([flow_proc], children=False), Sampler([server], children=True)
    rss_before = flow_proc.memory_info().rss
    started = time.monotonic()
    state = corpus(selection=selection, chip=chip, cluster=ClusterConfig(address=address), reuse_cached=False,
                   compile_only=not full, return_state=True)
    flow_s = time.monotonic() - started
    flow_peak, flow_cpu = flow_sampler.stop()
    summary = state.result(raise_on_failure=False)
    flow_run_id = str(state.state_details.flow_run_id)
    started = time.monotonic()
    recorded = 0
    while time.monotonic() - started < 600:  # the server records task runs from events, after the fact
        recorded = task_runs(url, flow_run_id)
        if recorded >= len(unique):
            break
        time.sleep(2)
    lag_s = time.monotonic() - started
    server_peak, server_cpu = server_sampler.stop()
    db = sum(p.stat().st_size for p in (work / "prefect").glob("prefect.db*"))
    rows = table_rows(work / "prefect" / "prefect.db")
    fan_out = summary.phases.get("fan-out", float("nan"))
    return {"n": len(unique), "state": state.name, "split_s": split_s, "alone_s": alone_s, "flow_s": flow_s,
            "fan_out_s": fan_out, "phases": summary.phases, "statuses": summary.statuses,
            "flow_peak_mb": flow_peak / 2**20, "flow_growth_mb": (flow_peak - rss_before) / 2**20,
            "flow_cpu_s": flow_cpu, "server_peak_mb": server_peak / 2**20, "server_cpu_s": server_cpu,
            "recorded": recorded, "lag_s": lag_s, "db_mb": db / 2**20, "db_rows": rows,
            "overhead_ms": 1000 * (fan_out - alone_s) / max(1, len(unique))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="+", type=int, default=[1000, 5000, 20000])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chip", default="p150")
    parser.add_argument("--full", action="store_true", help="the whole op analysis (device run, golden), not "
                                                            "compile-only")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one size
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory(prefix=f"bench-fanout-{args.one}-") as work:
            figures = one(args.one, args.workers, args.chip, args.full, Path(work))
        args.out.write_text(json.dumps(figures))
        return
    rows = []
    for n in args.sizes:
        out = Path(tempfile.mkstemp(suffix=".json")[1])
        cmd = [sys.executable, str(HERE), "--one", str(n), "--workers", str(args.workers), "--chip", args.chip,
               "--out", str(out)] + (["--full"] if args.full else [])
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not out.read_text():
            console.print(f"N={n} failed ({done.returncode}):", done.stderr[-3000:], markup=False)
            continue
        rows.append(json.loads(out.read_text()))
        out.unlink()
        print(json.dumps(rows[-1]), flush=True)
    report(rows, args.full, args.workers)


def report(rows: list[dict], full: bool, workers: int) -> None:
    work = "the whole analysis" if full else "compile-only (each op stops after its flatbuffer: no device run, no golden)"
    table = Figures(f"fan-out cost per N unique ops, {workers} Dask workers; op work: {work}",
                    ["N", "state", "work alone s", "fan-out s", "flow s", "ops/s", "overhead ms/op",
                     "flow peak MB", "flow growth MB", "flow CPU s", "server peak MB", "server CPU s",
                     "server lag s", "db MB", "db KB/op"])
    for r in rows:
        table.add(r["n"], r["state"], r["alone_s"], r["fan_out_s"], r["flow_s"], r["n"] / r["flow_s"],
                  r["overhead_ms"], r["flow_peak_mb"], r["flow_growth_mb"], r["flow_cpu_s"], r["server_peak_mb"],
                  r["server_cpu_s"], r["lag_s"], r["db_mb"], 1024 * r["db_mb"] / r["n"])
    table.show()
    if len(rows) >= 2:
        small, large = rows[0], rows[-1]
        ratio = large["n"] / small["n"]
        for key in ("flow_growth_mb", "flow_cpu_s", "server_cpu_s", "db_mb"):
            grew = large[key] / small[key] if small[key] else float("nan")
            print(f"{key}: x{grew:.2f} for x{ratio:.1f} ops ({'at most linear' if grew <= ratio * 1.1 else 'FASTER than linear'})")
    if rows:
        last = rows[-1]
        print(f"per-task overhead at N={last['n']}: {last['overhead_ms']:.1f} ms "
              f"({'meets' if last['overhead_ms'] <= 15 else 'misses'} the 15 ms goal)")


if __name__ == "__main__":
    main()
