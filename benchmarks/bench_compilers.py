"""The compiler under test: the zoo under several releases in one command, and what a build costs.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_compilers.py [--releases 0.1.0 0.1.1 0.1.2 0.1.3]
        [--models mlp cnn ...] [--workers 2] [--prepare jax-tt-plugin==0.1.2] [--skip-one]

- preparing a build: `--prepare`'s release with an empty compiler cache (downloaded from the registry,
  unpacked, started once to describe a p150), then again (goals: at most 60 s, then at most 2 s);
- the zoo (`opbyop analyze MODELS --no-whole --no-reuse`) under the newest release alone, then under
  every release of `--releases` in one command, each in an empty workspace (the machine's caches warm:
  exports, descriptors, prepared builds): the wall times side by side (goal: the several-build run at
  most 4.5x the one-build run for four builds), the peak memory of every process, the op worker
  processes left warm (goal: one per Dask worker per build);
- the several-build run's store: unique ops by status per release, each release against the one
  before (regressions, progressions, changed messages), and three ops that changed with their
  messages under both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
from common import Figures, PeakMemory, console, measured

from opbyop.worker.passes import TIMING_ENV, VERBOSE_ENV

ROOT = Path(__file__).resolve().parents[1]
ZOO = ["mlp", "cnn", "resnet18", "bert-small", "gpt2", "llama", "vit", "jax-mlp"]
RELEASES = ["0.1.0", "0.1.1", "0.1.2", "0.1.3"]
SIDE_ENV = {*VERBOSE_ENV, *TIMING_ENV}  # how a failed compile's side child differs from a warm op worker


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "OPBYOP_", "JAX_"))}
    return {**env, "PYTHONPATH": str(ROOT), "COLUMNS": "300", "NO_COLOR": "1", **extra}


def warm_op_worker(process: psutil.Process) -> bool:
    """A warm op worker; not a failed compile's side child (verbose or timing)."""
    return "opbyop.worker.child" in " ".join(process.cmdline()) and not SIDE_ENV & set(process.environ())


def analyze(models: list[str], specs: list[str], workers: int, home: Path, run_id: str) -> tuple[float, PeakMemory, str]:
    """`opbyop analyze` in workspace `home`: (wall seconds, its memory, its output)."""
    command = [sys.executable, "-m", "opbyop.cli.main", "analyze", *models, "--no-whole", "--no-reuse",
               "--workers", str(workers), "--run-id", run_id, *[w for s in specs for w in ("--compiler", s)]]
    run = measured(command, _env(OPBYOP_HOME=str(home)), counted=warm_op_worker)
    if run.exit_code not in (0, 1):  # 1: a model failed to split or an op failed: the figures stand
        sys.exit(f"{' '.join(command)} failed ({run.exit_code}):\n{run.output[-3000:]}")
    return run.seconds, run.memory, run.output


def prepare_twice(spec: str) -> tuple[float, float, str]:
    """Seconds of a first preparation of `spec` with an empty compiler cache, then of a second."""
    code = ("import time, sys\nfrom opbyop.compiler.builds import prepare\nfrom opbyop.compiler.assets import Notices\n"
            "t = time.monotonic(); c = prepare(sys.argv[1], Notices(say=lambda line: print(line, file=sys.stderr)))\n"
            "print(time.monotonic() - t, c.label)")
    with tempfile.TemporaryDirectory(prefix="bench-compilers-cache-") as cache:
        times, label = [], ""
        for _ in range(2):
            done = subprocess.run([sys.executable, "-c", code, spec], env=_env(OPBYOP_CACHE_DIR=cache), cwd=ROOT,
                                  capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"preparing {spec} failed:\n{done.stderr[-3000:]}")
            seconds, label = done.stdout.split(" ", 1)
            times.append(float(seconds))
    return times[0], times[1], label.strip()


def sql(home: Path, query: str) -> list[dict]:
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "sql", query, "-f", "json"],
                          env=_env(OPBYOP_HOME=str(home)), cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"opbyop sql failed: {done.stderr}")
    return json.loads(done.stdout)


def compare_group(home: Path, group: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "compare", "--group", group, "-f", "json"],
                          env=_env(OPBYOP_HOME=str(home)), cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"opbyop compare failed: {done.stderr}")
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--releases", nargs="+", default=RELEASES)
    parser.add_argument("--models", nargs="+", default=ZOO)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--prepare", default="jax-tt-plugin==0.1.2", help="the release prepared from an empty cache")
    parser.add_argument("--skip-one", action="store_true", help="skip the one-build run")
    args = parser.parse_args()
    specs = [f"jax-tt-plugin=={v}" for v in args.releases]

    first, again, label = prepare_twice(args.prepare)
    prep = Figures("preparing a build (empty compiler cache, then again)", ["build", "first s", "goal", "again s", "goal"])
    prep.add(label, first, "<= 60", again, "<= 2")
    prep.show()

    with tempfile.TemporaryDirectory(prefix="bench-compilers-") as work:
        work = Path(work)
        cost = Figures("the zoo op by op (--no-whole --no-reuse), one build and several, each in an empty workspace",
                       ["builds", "wall s", "ratio", "goal", "peak memory GB (all processes)", "op worker processes"])
        one = None
        if not args.skip_one:
            one, memory, _ = analyze(args.models, specs[-1:], args.workers, work / "one", "one")
            cost.add(specs[-1], one, 1.0, "", memory.peak / 1e9, memory.count)
        several, memory, out = analyze(args.models, specs, args.workers, work / "several", "several")
        ratio = several / one if one else float("nan")
        cost.add(f"{len(specs)} builds", several, ratio, f"<= {len(specs) * 1.125:g}", memory.peak / 1e9,
                 f"{memory.count} (goal <= {args.workers * len(specs)})")
        cost.show()

        home = work / "several"
        counts = sql(home, "SELECT r.compiler_version AS version, s.status, count(*) AS ops FROM results s "
                           "JOIN runs r USING (run_id) WHERE r.group_id = 'several' GROUP BY ALL ORDER BY ALL")
        statuses = sorted({c["status"] for c in counts})
        by_release = Figures("unique ops by status per release", ["release", *statuses])
        for version in args.releases:
            got = {c["status"]: c["ops"] for c in counts if c["version"] == version}
            by_release.add(version, *[got.get(s, 0) for s in statuses])
        by_release.show()

        group = compare_group(home, "several")
        steps = Figures("each release against the one before it", ["step", "regressions", "progressions",
                                                                    "changed messages", "same", "no verdict"])
        examples = []
        for step in group["steps"]:
            steps.add(f"{step['previous_compiler']} -> {step['compiler']}", step["regression"], step["progression"],
                      step["message"], step["same"], step["no_verdict"])
            changed = [op for op in step["ops"] if op["change"] in ("regression", "progression", "message")]
            examples += [(step, op) for op in changed[:1]]
        steps.show()
        for step, op in examples[:3]:
            console.print(f"{op['change']}: {op['op_name']} {op['signature'][:12]} ({op['occurrences']} occurrences)\n"
                          f"  {step['previous_compiler']}: {op['previous_status']} at {op['previous_depth']}: "
                          f"{(op['previous_message'] or '')[:200]}\n"
                          f"  {step['compiler']}: {op['status']} at {op['depth']}: {(op['message'] or '')[:200]}",
                          soft_wrap=True)
        changes = [h for h in group["history"] if h["starts_failing_under"] or h["stops_failing_under"]]
        console.print(f"{len(changes)} of {len(group['history'])} unique ops change across the releases "
                      f"(opbyop compare --group several in the workspace shows each)")
        console.print(out.strip().splitlines()[-1] if out.strip() else "", soft_wrap=True)


if __name__ == "__main__":
    main()
