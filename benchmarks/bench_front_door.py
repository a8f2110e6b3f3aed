"""The front door: what a newcomer waits for, each goal beside a baseline and this tree's figure.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_front_door.py [--make-run] [--skip-analyze] [--skip-t3k]
        [--baseline-ref main] [--repeat 2] [--cold-exports]

- first vs warm t3k: `opbyop system-desc t3k` with an empty descriptor cache, then again (goal: the
  first at most 30 s more than the warm one, its derivation said on screen);
- `opbyop analyze mlp` with its own server and cluster in an empty workspace and an empty Prefect
  home (the machine's caches warm: descriptors, the Prefect database template, and the export cache
  unless --cold-exports, which gives each run an empty one: a model's first run): its wall time against
  the ops' own span (the stored time line's `ops (beside)`; goal: at most 3x), and its time line,
  beside the same measured in the same session on --baseline-ref (a git worktree of it, this checkout's
  virtual environment), the two trees taking turns --repeat times (the median of each is shown);
- `--make-run` (heavy: minutes of CPU): `make run` from a fresh clone of this checkout's HEAD with an
  empty HOME (shared/ linked beside it as the checkout has it), set-up and run timed apart (goal:
  at most 3 minutes). Its run gives the analyze figures too (then --skip-analyze is implied).
The make-run and t3k baselines are recorded, not re-run: measured on this machine kind with pip's
set-up and descriptors made by the plugin's mock start, which a checkout cannot reproduce offline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common import Figures, console

from opbyop_flows.engine.phases import BESIDE, format_phases
from opbyop.environment import environment
from opbyop_storage.dataset import Store

ROOT = Path(__file__).resolve().parents[1]
BEFORE = {"make run": "258 s (set-up ~180 s, run 64.8 s)", "t3k": "first 271 s (4 min 31 s)"}


def _env(tree: Path = ROOT, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "OPBYOP_", "JAX_"))}
    return {**env, "PYTHONPATH": str(tree), "COLUMNS": "300", "NO_COLOR": "1", **extra}


def _timed(command: list[str], env: dict[str, str], cwd: Path, log: Path) -> tuple[float, str]:
    start = time.monotonic()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.monotonic() - start
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}); see {log}")
    return seconds, done.stdout


def t3k_first_and_warm(work: Path) -> tuple[float, float, list[str]]:
    env = _env(OPBYOP_CACHE_DIR=str(work / "cache"))
    command = [sys.executable, "-m", "opbyop.cli.main", "system-desc", "t3k"]
    first, said = _timed(command, env, work, work / "t3k-first.log")
    warm, _ = _timed(command, env, work, work / "t3k-warm.log")
    return first, warm, [line for line in said.splitlines() if "system descriptor" in line]


def cache_without_exports(work: Path) -> Path:
    """A machine cache in `work` holding the machine's own but for the export cache (graphs/)."""
    machine, cache = environment().cache_dir, work / "cache"
    cache.mkdir()
    for entry in machine.iterdir() if machine.is_dir() else ():
        if entry.name != "graphs":
            (cache / entry.name).symlink_to(entry.resolve())
    return cache


def analyze_mlp(work: Path, tree: Path = ROOT, cold_exports: bool = False) -> tuple[float, dict[str, float]]:
    """`opbyop analyze mlp` of `tree` in an empty workspace and Prefect home (and with `cold_exports`, an
    empty export cache): its wall time (from before the interpreter starts) and its stored time line."""
    env = _env(tree, OPBYOP_HOME=str(work / "home"), PREFECT_HOME=str(work / "prefect"))
    if cold_exports:
        env["OPBYOP_CACHE_DIR"] = str(cache_without_exports(work))
    wall, _ = _timed([sys.executable, "-m", "opbyop.cli.main", "analyze", "mlp", "--run-id", "front-door"],
                     env, work, work / "analyze.log")
    return wall, Store(work / "home" / "store").run("front-door").phases


def _span(phases: dict[str, float]) -> float:
    return phases.get("ops" + BESIDE, float("nan"))


@dataclass
class Analyzed:
    """One tree's analyze-mlp runs: the median of their ratios and walls, and a time line to show (the
    run of the lower middle wall)."""

    runs: list[tuple[float, dict[str, float]]]

    def ratio(self) -> float:
        return statistics.median(wall / _span(phases) for wall, phases in self.runs)

    @property
    def shown(self) -> dict[str, float]:
        return sorted(self.runs, key=lambda run: run[0])[(len(self.runs) - 1) // 2][1]

    def cell(self) -> str:
        ratios = ", ".join(f"{w / _span(p):.2f}x" for w, p in self.runs)
        return (f"{self.ratio():.2f}x (runs: {ratios}; median wall {statistics.median(w for w, _ in self.runs):.1f} s, "
                f"median span {statistics.median(_span(p) for _, p in self.runs):.1f} s)")


def analyze_both(work: Path, baseline: Path | None, repeat: int,
                 cold_exports: bool = False) -> tuple[Analyzed, Analyzed | None]:
    """This tree's and the baseline's analyze mlp, taking turns (the baseline first in each round)."""
    mine, theirs = Analyzed([]), Analyzed([]) if baseline else None
    for i in range(repeat):
        for tree, into in ((baseline, theirs), (ROOT, mine)):
            if tree is None:
                continue
            folder = work / f"{'baseline' if tree != ROOT else 'tree'}-{i}"
            folder.mkdir()
            into.runs.append(analyze_mlp(folder, tree, cold_exports))
    return mine, theirs


def baseline_worktree(ref: str, work: Path) -> Path:
    """A git worktree of `ref` (detached), removed by `remove_worktree`."""
    tree = work / "baseline-tree"
    subprocess.run(["git", "worktree", "add", "--quiet", "--detach", str(tree), ref], cwd=ROOT, check=True)
    return tree


def remove_worktree(tree: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)


def make_run(work: Path) -> tuple[float, float, dict[str, float]]:
    """`make setup` then `make run` in a fresh clone with an empty HOME: their seconds and the run's phases."""
    clone, home = work / "clone", work / "home"
    home.mkdir()
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    shared = ROOT.parent / "shared"
    if shared.exists():
        (work / "shared").symlink_to(shared.resolve(), target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "OPBYOP_", "JAX_", "PYTHON"))}
    env.update(HOME=str(home), COLUMNS="300", NO_COLOR="1")
    setup, _ = _timed(["make", "setup"], env, clone, work / "setup.log")
    run, _ = _timed(["make", "run"], env, clone, work / "run.log")
    (stored,) = Store(clone / ".opbyop" / "store").runs()
    return setup, run, stored.phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--make-run", action="store_true", help="also `make run` from a fresh clone (heavy)")
    parser.add_argument("--skip-analyze", action="store_true", help="leave out the analyze mlp runs")
    parser.add_argument("--skip-t3k", action="store_true", help="leave out the t3k descriptor's first and warm runs")
    parser.add_argument("--baseline-ref", default="main", help="the tree before (a git ref; '' for none)")
    parser.add_argument("--repeat", type=int, default=2, help="analyze mlp runs per tree, taking turns")
    parser.add_argument("--cold-exports", action="store_true", help="each analyze mlp run with an empty export cache")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-front-door-"))
    figures = Figures("the front door", ["goal", "before", "today", "met"])
    said: list[str] = []
    if not args.skip_t3k:
        (work / "t3k").mkdir()
        first, warm, said = t3k_first_and_warm(work / "t3k")
        figures.add("first t3k <= warm + 30 s, derivation shown", BEFORE["t3k"],
                    f"first {first:.1f} s, warm {warm:.1f} s (+{first - warm:.1f} s); {len(said)} lines said",
                    first - warm <= 30 and bool(said))
    lines: dict[str, dict[str, float]] = {}
    if args.make_run:
        (work / "make").mkdir()
        setup, run, phases = make_run(work / "make")
        figures.add("make run from nothing <= 180 s", BEFORE["make run"],
                    f"{setup + run:.0f} s (set-up {setup:.0f} s, run {run:.0f} s)", setup + run <= 180)
        figures.add("analyze mlp wall <= 3x the ops' span (make run)", "-",
                    f"{phases['total']:.1f} s / {_span(phases):.1f} s", phases["total"] / _span(phases) <= 3)
        lines["make run"] = phases
    elif not args.skip_analyze:
        baseline = baseline_worktree(args.baseline_ref, work) if args.baseline_ref else None
        try:
            mine, theirs = analyze_both(work, baseline, args.repeat, args.cold_exports)
        finally:
            if baseline is not None:
                remove_worktree(baseline)
        exports = "exported" if args.cold_exports else "export cached"
        figures.add(f"analyze mlp wall <= 3x the ops' span (median of wall / span; {exports})",
                    f"{args.baseline_ref}: {theirs.cell()}" if theirs else "-", mine.cell(), mine.ratio() <= 3)
        lines["this tree"] = mine.shown
        if theirs:
            lines[args.baseline_ref] = theirs.shown
    figures.show()
    for line in said:
        console.print(line)
    for name, phases in lines.items():
        console.print(f"time line, {name}: {format_phases(phases)}")
        console.print(json.dumps(phases))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
