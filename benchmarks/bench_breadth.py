"""Breadth: the installed transformers' architectures, each tiny, analysed op by op in one run.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_breadth.py [--limit N] [--families bart llama ...]
        [--seed 0] [--workers 2] [--export-memory GB] [--timeout S]

Every model type with a base model class (benchmarks/breadth_models.py: its configuration shrunk to
a tiny size, random weights) is built and run eagerly here, in the order --seed shuffles them (only
those whose type contains one of --families); the first --limit that run are handed to one
`opbyop analyze --no-whole` in a fresh OPBYOP_HOME, each model exported in its own budgeted child.
Prints the architectures that did not run eagerly (not the analyser's concern), the models lost and
why, the unique ops by status, the wall time of the run and the peak memory of it and its children.
Goal: every architecture that runs eagerly yields its ops; the run completes on 2 cores and 24 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import breadth_models
from common import ROOT, measured, sql


def eager_sample(families: list[str], limit: int | None, seed: int) -> tuple[list[str], dict[str, str]]:
    """(architectures that run eagerly, up to `limit`; those that did not, with why)."""
    types = [t for t in breadth_models.architectures() if not families or any(f in t for f in families)]
    random.Random(seed).shuffle(types)
    running, failed = [], {}
    for model_type in types:
        if limit is not None and len(running) >= limit:
            break
        why = breadth_models.runs_eagerly(model_type)
        if why is None:
            running.append(model_type)
        else:
            failed[model_type] = why
    return running, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="at most this many architectures that run eagerly")
    parser.add_argument("--families", nargs="*", default=[], help="only model types containing one of these")
    parser.add_argument("--seed", type=int, default=0, help="the order architectures are tried in")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--export-memory", type=float, default=None, help="GB per model's export (default: half the machine)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per op")
    args = parser.parse_args()

    start = time.monotonic()
    running, failed = eager_sample(args.families, args.limit, args.seed)
    eager_s = time.monotonic() - start
    print(f"{len(running)} architectures run eagerly ({len(failed)} tried did not) in {eager_s:.0f} s")
    for model_type, why in sorted(failed.items()):
        print(f"  not eager: {model_type}: {why}")
    if not running:
        return
    home = Path(tempfile.mkdtemp(prefix="opbyop-breadth-"))
    env = {**os.environ, "OPBYOP_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")])}
    manifest = home / "manifest.json"
    command = [sys.executable, "-m", "opbyop.cli.main", "analyze", *[f"breadth_models:{t}" for t in running],
               "--no-whole", "--workers", str(args.workers), "--timeout", str(args.timeout), "--manifest", str(manifest)]
    if args.export_memory is not None:
        command += ["--export-memory", str(args.export_memory)]
    run = measured(command, env, timeline=home / "memory.tsv")
    (home / "analyze.log").write_text(run.output)
    print(f"opbyop analyze of {len(running)} models: exit {run.exit_code}, {run.seconds:.0f} s, "
          f"peak {run.memory.peak / 1e9:.1f} GB RSS for the command and its children ({run.memory.peak_pss / 1e9:.1f} GB "
          f"PSS: pages a forked child shares with its parent counted once), the command alone "
          f"{run.memory.own / 1e9:.2f} GB; log: {home / 'analyze.log'}, memory each half second (seconds, the "
          f"command's MB, all MB of RSS, of PSS, the largest children): {home / 'memory.tsv'}")
    if not manifest.exists():
        print(run.output[-3000:])
        return
    models = json.loads(manifest.read_text())["models"]
    lost = [m for m in models if m.get("error")]
    print(f"\nmodels: {len(models)}, lost: {len(lost)}")
    for m in lost:
        print(f"  lost {m['name']}: {m['error'].splitlines()[0][:300]}")
    rows = sql("SELECT status, count(*) AS unique_ops FROM results GROUP BY 1 ORDER BY 2 DESC", env)
    print("\nunique ops by status:")
    for row in rows:
        print(f"  {row['status']:<16} {row['unique_ops']}")
    frontend = sql("SELECT op_name, left(message, 160) AS message FROM results "
                         "WHERE status = 'frontend_failed' ORDER BY 1", env)
    print(f"\nfrontend_failed ops ({len(frontend)}):")
    for row in frontend:
        print(f"  {row['op_name']}: {row['message']}")
    print(f"\ntime: eager checks {eager_s:.0f} s, analyze {run.seconds:.0f} s")


if __name__ == "__main__":
    main()
