"""The second night: the same `opbyop analyze` of a user's own models, run again with nothing changed,
then with one model's source file edited; this checkout beside another one (the baseline), in one run.

    PYTHONPATH=benchmarks .venv/bin/python benchmarks/bench_second_night.py [--count 19 | --all]
        [--baseline-ref REF] [--no-baseline] [--workers 2] [--build jax-tt-plugin==0.1.2]
        [--no-whole] [--export-memory GB] [--capacity] [--again SCRATCH --nights build ...]

The models are user factories, one file each (`night_<type>.py`, written in a scratch folder: each
builds a tiny transformers architecture from benchmarks/breadth_models.py), the first --count of the
architectures that run eagerly; --all: every one of them (the breadth benchmark's set, whose nights
are run with --no-whole as bench_breadth.py runs it). --capacity: after the first night, its capacity
plan (`opbyop capacity`: 2, 8, 32 and 128 workers, checked against its own wall).
Each checkout gets a fresh OPBYOP_HOME and machine cache, and runs three nights in it: `first`
(cold), `second` (nothing changed), `edited` (one model's file edited), and with --build a fourth, `build`: the same models under another compiler build (`--compiler`).
The baseline is `git worktree` of --baseline-ref (default: the commit before the export cache) run
from its own tree (PYTHONPATH). Printed per night: wall, unique ops analysed and reused, models
exported (not taken from the cache), whole models reused, the run's time line, and the CPU seconds and
peak memory (RSS, polled every 0.5 s) of the command's own process (where the flow runs) beside those
of every process of the run (its server, cluster, workers and their children).
--again: the nights named by --nights in the scratch folder an earlier run printed (its models, home and
machine cache, as it left them), with this checkout: two trees' build nights from one workspace, copied
back between them, are a side-by-side figure without the hours of the nights before.
Goals (2 cores): second <= 15 s; edited <= that model's export time + 15 s, with only it exported;
build: no export, split or upstream value made again, only the build's own compiles and device runs.
With --all: second <= 3 min, build <= 15 min, first no slower than bench_breadth.py's run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import psutil

import breadth_models
from common import ROOT

POLL_S = 0.5

FACTORY = '''"""A user's model: a tiny {kind}."""
from breadth_models import build


def model():
    return build("{kind}")
'''
NIGHTS = ("first", "second", "edited")


def user_models(folder: Path, count: int | None) -> list[str]:
    """`count` user factories (None: all), one file each, of architectures that run eagerly."""
    specs = []
    for kind in breadth_models.architectures():
        if len(specs) == count:
            break
        if breadth_models.runs_eagerly(kind) is not None:
            continue
        name = module_name(kind)
        (folder / f"{name}.py").write_text(FACTORY.format(kind=kind))
        specs.append(f"{name}:model")
    return specs


def module_name(kind: str) -> str:
    """The user factory's module of an architecture: kosmos-2.5 -> night_kosmos_2_5."""
    return "night_" + re.sub(r"\W", "_", kind)


def earlier_models(folder: Path) -> list[str]:
    """The user factories an earlier run wrote in `folder`, in the order user_models gave them."""
    names = (module_name(kind) for kind in breadth_models.architectures())
    return [f"{name}:model" for name in names if (folder / f"{name}.py").exists()]


def baseline_tree(ref: str, folder: Path) -> Path:
    """A worktree of `ref`, its packages importable under their installed names."""
    tree = folder / "baseline"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref], cwd=ROOT, check=True, capture_output=True)
    for name, source in (("opbyop_flows", "flows"), ("opbyop_tasks", "tasks"), ("opbyop_storage", "storage")):
        (tree / name).symlink_to(tree / source)
    return tree


def environment(code: Path, models: Path, home: Path, cache: Path) -> dict[str, str]:
    """A night's environment: `code`'s opbyop, the user's models, its own home and machine cache."""
    return {**os.environ, "OPBYOP_HOME": str(home), "OPBYOP_CACHE_DIR": str(cache), "COLUMNS": "300",
            "PYTHONPATH": os.pathsep.join([str(code), str(models), str(ROOT / "benchmarks")])}


def night(code: Path, specs: list[str], models: Path, home: Path, cache: Path, workers: int,
          compiler: str | None = None, extra: tuple[str, ...] = ()) -> dict:
    """One `opbyop analyze` of `specs` with `code`'s opbyop; its figures from its own store."""
    env = environment(code, models, home, cache)
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "opbyop.cli.main", "analyze", *specs, "--workers", str(workers),
                                 *(["--compiler", compiler] if compiler else []), *extra],
                                env=env, cwd=home, stdout=out, stderr=err, text=True)
        usage = watch(proc)
        wall = time.monotonic() - start
        out.seek(0), err.seek(0)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("time: ")), "time: ?")
    if done.returncode not in (0, 1):
        print(done.stdout[-3000:], done.stderr[-3000:])
    query = ("SELECT any_value(run_id) AS run_id, count(*) AS models, "
             "count(*) FILTER (WHERE coalesce(export_reused, false)) AS exports_kept, "
             "count(*) FILTER (WHERE whole_reused_from IS NOT NULL) AS wholes_kept FROM models "
             "WHERE run_id = (SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1)")
    stored = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "sql", query, "--format", "json"], env=env,
                            cwd=home, capture_output=True, text=True)
    try:
        row = json.loads(stored.stdout)[0]
    except (ValueError, IndexError):  # the baseline's schema has no such columns
        row = {}
    ops = next((ln for ln in done.stdout.splitlines() if "unique ops of" in ln), "")
    return {"wall": wall, "exit": done.returncode, "ops": ops, "time": line, **usage, **row}


def watch(proc: subprocess.Popen) -> dict[str, float]:
    """Until `proc` ends: the CPU seconds of its own process and of its whole tree (each process's
    last reading), and the peak RSS of its own process and of the tree's sum."""
    cpu: dict[int, float] = {}
    peak_own = peak_all = 0
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        rss_all = 0
        for p in tree:
            try:
                times, rss = p.cpu_times(), p.memory_info().rss
            except psutil.NoSuchProcess:
                continue
            cpu[p.pid] = times.user + times.system
            rss_all += rss
            if p.pid == proc.pid:
                peak_own = max(peak_own, rss)
        peak_all = max(peak_all, rss_all)
        time.sleep(POLL_S)
    return {"cpu_own": cpu.get(proc.pid, 0.0), "cpu_all": sum(cpu.values()), "rss_own": peak_own / 1e9,
            "rss_all": peak_all / 1e9}


def capacity_plan(code: Path, models: Path, home: Path, cache: Path, run_id: str) -> str:
    """`opbyop capacity` of a stored run, as printed."""
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "capacity", "--run", run_id],
                          env=environment(code, models, home, cache), cwd=home, capture_output=True, text=True)
    return done.stdout + done.stderr


def nights(label: str, code: Path, specs: list[str], models: Path, scratch: Path, workers: int,
           build: str | None, extra: tuple[str, ...] = (), capacity: bool = False,
           only: Sequence[str] | None = None) -> dict[str, dict]:
    home, cache = scratch / f"{label}-home", scratch / f"{label}-cache"
    home.mkdir(exist_ok=True)
    compilers = Path.home() / ".cache" / "opbyop" / "compilers"  # a build already fetched is not fetched again
    if compilers.is_dir() and not (cache / "compilers").exists():
        cache.mkdir(exist_ok=True)
        (cache / "compilers").symlink_to(compilers)
    out = {}
    for name in NIGHTS + (("build",) if build else ()):
        if only is not None and name not in only:
            continue
        if name == "edited":  # one model's own source file edited
            edited = models / f"{specs[0].partition(':')[0]}.py"
            edited.write_text(edited.read_text() + "\n# edited: one more line\n")
        out[name] = night(code, specs, models, home, cache, workers, build if name == "build" else None, extra)
        print(f"{label:9} {name:7} {out[name]['wall']:7.1f} s  exit {out[name]['exit']}  "
              f"exports kept {out[name].get('exports_kept', '?')}/{out[name].get('models', '?')}  "
              f"wholes kept {out[name].get('wholes_kept', '?')}  {out[name]['ops']}\n"
              f"          CPU: command {out[name]['cpu_own']:.1f} s of {out[name]['cpu_all']:.1f} s "
              f"({100 * out[name]['cpu_own'] / max(out[name]['cpu_all'], 1e-9):.0f}%); peak RSS: command "
              f"{out[name]['rss_own']:.2f} GB, all {out[name]['rss_all']:.2f} GB\n"
              f"          {out[name]['time']}", flush=True)
        if name == "first" and capacity and out[name].get("run_id"):
            print(capacity_plan(code, models, home, cache, out[name]["run_id"]), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=19)
    parser.add_argument("--all", action="store_true", help="every architecture that runs eagerly (not --count)")
    parser.add_argument("--no-whole", action="store_true", help="ops only, no whole-model compile and run")
    parser.add_argument("--export-memory", type=float, default=None, help="GB per model's export")
    parser.add_argument("--capacity", action="store_true", help="the first night's capacity plan")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--baseline-ref", default="bb75754")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--build", default=None, help="a fourth night under this compiler build (--compiler)")
    parser.add_argument("--again", type=Path, default=None, help="an earlier run's scratch folder: its nights again")
    parser.add_argument("--nights", nargs="+", choices=(*NIGHTS, "build"), default=None, help="with --again")
    args = parser.parse_args()
    extra = (*(["--no-whole"] if args.no_whole else []),
             *(["--export-memory", str(args.export_memory)] if args.export_memory is not None else []))
    if args.again is not None:
        models = args.again / "this-models"
        specs = earlier_models(models)
        print(f"this: {len(specs)} models, in {args.again}", flush=True)
        nights("this", ROOT, specs, models, args.again, args.workers, args.build, extra, only=args.nights)
        return
    scratch = Path(tempfile.mkdtemp(prefix="bench-second-night-"))
    trees = {"this": ROOT}
    try:
        if not args.no_baseline:
            trees["baseline"] = baseline_tree(args.baseline_ref, scratch)
        for label, code in trees.items():
            models = scratch / f"{label}-models"
            models.mkdir()
            specs = user_models(models, None if args.all else args.count)
            print(f"{label}: {len(specs)} models", flush=True)
            nights(label, code, specs, models, scratch, args.workers, args.build, extra, args.capacity)
    finally:
        if "baseline" in trees:
            subprocess.run(["git", "worktree", "remove", "--force", str(trees["baseline"])], cwd=ROOT,
                           capture_output=True)


if __name__ == "__main__":
    main()
