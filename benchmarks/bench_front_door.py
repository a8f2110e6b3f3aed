"""The front door: what a newcomer waits for, each goal beside a recorded baseline and this tree's figure.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_front_door.py [--make-run] [--skip-analyze]

- first vs warm t3k: `opbyop system-desc t3k` with an empty descriptor cache, then again (goal: the
  first at most 30 s more than the warm one, its derivation said on screen);
- `opbyop analyze mlp` with its own server and cluster in an empty workspace: its wall time against
  the ops' own span (the stored time line's `ops (beside)`; goal: at most 3x), and its time line;
- `--make-run` (heavy: minutes of CPU): `make run` from a fresh clone of this checkout's HEAD with an
  empty HOME (shared/ linked beside it as the checkout has it), set-up and run timed apart (goal:
  at most 3 minutes). Its run gives the analyze figures too (then --skip-analyze is implied).
The baseline ("before") is recorded, not re-run: measured on this machine kind with pip's set-up and
descriptors made by the plugin's mock start, which a checkout of this tree cannot reproduce offline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Figures, console

from flows.engine.phases import BESIDE, format_phases
from storage.dataset import Store

ROOT = Path(__file__).resolve().parents[1]
BEFORE = {"make run": "258 s (set-up ~180 s, run 64.8 s)", "t3k": "first 271 s (4 min 31 s)",
          "analyze": "3.5x the ops' span"}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "OPBYOP_", "JAX_"))}
    return {**env, "PYTHONPATH": str(ROOT), "COLUMNS": "300", "NO_COLOR": "1", **extra}


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


def analyze_mlp(work: Path) -> tuple[float, dict[str, float]]:
    env = _env(OPBYOP_HOME=str(work / "home"), PREFECT_HOME=str(work / "prefect"))
    wall, _ = _timed([sys.executable, "-m", "opbyop.cli.main", "analyze", "mlp", "--run-id", "front-door"],
                     env, work, work / "analyze.log")
    return wall, Store(work / "home" / "store").run("front-door").phases


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
    parser.add_argument("--skip-analyze", action="store_true", help="leave out the analyze mlp run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-front-door-"))
    figures = Figures("the front door", ["goal", "before", "today", "met"])
    (work / "t3k").mkdir()
    first, warm, said = t3k_first_and_warm(work / "t3k")
    figures.add("first t3k <= warm + 30 s, derivation shown", BEFORE["t3k"],
                f"first {first:.1f} s, warm {warm:.1f} s (+{first - warm:.1f} s); {len(said)} lines said",
                first - warm <= 30 and bool(said))
    phases: dict[str, float] = {}
    if args.make_run:
        (work / "make").mkdir()
        setup, run, phases = make_run(work / "make")
        figures.add("make run from nothing <= 180 s", BEFORE["make run"],
                    f"{setup + run:.0f} s (set-up {setup:.0f} s, run {run:.0f} s)", setup + run <= 180)
        wall = phases["total"]
    elif not args.skip_analyze:
        (work / "analyze").mkdir()
        wall, phases = analyze_mlp(work / "analyze")
    if phases:
        span = phases.get("ops" + BESIDE, float("nan"))
        figures.add("analyze mlp wall <= 3x the ops' span", BEFORE["analyze"],
                    f"{wall:.1f} s / {span:.1f} s = {wall / span:.2f}x", wall / span <= 3)
    figures.show()
    for line in said:
        console.print(line)
    if phases:
        console.print(f"time line: {format_phases(phases)}")
        console.print(json.dumps(phases))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
