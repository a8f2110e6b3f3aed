"""The small zoo's device simulation time per op, this checkout against another one, in one run.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_device_ab.py --baseline-path /tmp/base
        [--this-path CHECKOUT] [--models mlp cnn ...] [--rounds 2]

Each round runs the same models through each checkout's own code (a process with PYTHONPATH and the
working directory set to it: its own split, worker, compiler, simulator and golden), alternating the
order round by round so that the machine's load falls on both alike. Ops are paired by signature (both
splits name an op alike); the figures are the medians of each checkout's per-op device time (its best over the rounds)
and the median of the per-op ratios, with its spread over the rounds (each round's own ratio).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# The zoo's small models at the base commit of the real-size work (3478d79): both checkouts have them.
MODELS = ["mlp", "cnn", "resnet18", "resnet50", "bert-small", "bert-base", "gpt2", "llama", "vit", "jax-mlp"]


def inner(models: list[str], out: Path) -> None:
    """Run in the checkout under test: each unique op through compile, device and golden."""
    from opbyop.jaxenv import prepare_jax

    prepare_jax()
    from opbyop.compiler.system_desc import resolve
    from opbyop.config import AnalysisSettings, load_thresholds
    from opbyop.frontends.loader import load_model
    from opbyop.ir.dedupe import dedupe
    from opbyop.ir.split import split_module
    from opbyop.worker.process import OpWorker

    ops = []
    for name in models:
        ops.extend(split_module(load_model(name).module_text, name).ops)
    unique = dedupe(ops)
    desc = resolve("p150")
    settings = AnalysisSettings(thresholds=load_thresholds())
    seconds: dict[str, float] = {}
    statuses: dict[str, str] = {}
    labels = {op.signature: f"{op.op_name} ({', '.join(str(i) for i in op.inputs)})" for op in unique}
    with OpWorker(desc.path, Path(tempfile.mkdtemp(prefix="bench-device-ab-")), chip=desc.chip, name="ab") as worker:
        for op in unique:
            r = worker.analyze(op, settings, timeout=300)
            statuses[op.signature] = r.status.value
            if r.device is not None:
                seconds[op.signature] = r.device.seconds
    out.write_text(json.dumps({"seconds": seconds, "statuses": statuses, "unique": len(unique), "labels": labels}))


def run_checkout(path: str, models: list[str]) -> dict:
    """The inner run with `path`'s code: on PYTHONPATH, and as the working directory, since the processes
    it starts with `python -c` or `-m` (the export's forkserver) put the working directory first."""
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    env = {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--inner", str(out), "--models", *models], env=env,
                   cwd=path, check=True)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline-path", default="/tmp/base")
    parser.add_argument("--this-path", default=str(Path(__file__).resolve().parent.parent),
                        help="the checkout under test (default: this script's)")
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--save", default=None, help="write every round's per-op seconds to this JSON file")
    parser.add_argument("--inner", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        inner(args.models, Path(args.inner))
        return

    checkouts = {"this": args.this_path, "baseline": args.baseline_path}
    runs: dict[str, list[dict]] = {k: [] for k in checkouts}
    for r in range(args.rounds):
        order = ["baseline", "this"] if r % 2 == 0 else ["this", "baseline"]
        for k in order:
            runs[k].append(run_checkout(checkouts[k], args.models))

    if args.save:
        Path(args.save).write_text(json.dumps(runs))
    common = set.intersection(*(set(run["seconds"]) for rs in runs.values() for run in rs))
    best = {k: {s: min(run["seconds"][s] for run in rs) for s in common} for k, rs in runs.items()}
    ratios = [best["this"][s] / best["baseline"][s] for s in common if best["baseline"][s] > 0]
    per_round = [statistics.median(runs["this"][i]["seconds"][s] / runs["baseline"][i]["seconds"][s]
                                   for s in common if runs["baseline"][i]["seconds"][s] > 0)
                 for i in range(args.rounds)]
    from common import Figures

    table = Figures(f"device simulation per op: {args.this_path} against {args.baseline_path} "
                    f"({args.rounds} rounds, order alternating)", ["figure", "this", "baseline"])
    table.add("unique ops (split)", runs["this"][0]["unique"], runs["baseline"][0]["unique"])
    table.add("ops with a device run in both, every round", len(common), len(common))
    table.add("median device ms per op (best of the rounds)", f"{1000 * statistics.median(best['this'].values()):.3f}",
              f"{1000 * statistics.median(best['baseline'].values()):.3f}")
    table.add("total device s (best of the rounds)", f"{sum(best['this'].values()):.2f}",
              f"{sum(best['baseline'].values()):.2f}")
    table.add("median per-op ratio this/baseline (best of rounds)", f"{statistics.median(ratios):.3f}", "1")
    table.add("median per-op ratio, each round", " ".join(f"{x:.3f}" for x in per_round), "1")
    for k in checkouts:
        counts: dict[str, int] = {}
        for st in runs[k][0]["statuses"].values():
            counts[st] = counts.get(st, 0) + 1
        table.add(f"statuses ({k}, round 1)", " ".join(f"{s}={n}" for s, n in sorted(counts.items())), "")
    table.show()
    slowest = Figures("the ops whose device time grew most (best of the rounds)", ["op", "this ms", "baseline ms"])
    labels = runs["this"][0].get("labels", {})
    for s in sorted(common, key=lambda s: best["baseline"][s] - best["this"][s])[:10]:
        slowest.add(labels.get(s, s)[:100], f"{1000 * best['this'][s]:.1f}", f"{1000 * best['baseline'][s]:.1f}")
    slowest.show()


if __name__ == "__main__":
    main()
