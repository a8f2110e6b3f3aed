"""Where compile time goes on the zoo: MLIR pass timing of every unique op, compile only.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_pass_timing.py [--models mlp cnn ...] [--max-ops 300]

Figures: the share of the ops' pass time (and of their compile wall time) spent in the top 5
passes, the slowest passes, and what timing costs: each op's timed compile beside its own compile.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import Figures, zoo_ops

from opbyop.jaxenv import prepare_jax

prepare_jax()

from opbyop.compiler.system_desc import resolve  # noqa: E402
from opbyop.config import AnalysisSettings  # noqa: E402
from opbyop.worker.process import OpWorker  # noqa: E402

DEFAULT_MODELS = ["mlp", "cnn", "resnet18", "bert-small", "gpt2", "llama", "vit", "jax-mlp"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--max-ops", type=int, default=400, help="time at most this many unique ops")
    parser.add_argument("--chip", default="p150")
    args = parser.parse_args()

    desc = resolve(args.chip)
    _, ops = zoo_ops(args.models)
    ops = ops[: args.max_ops]
    settings = AnalysisSettings(run_device=False, run_golden=False, failed_pass=False, pass_timing=1.0)
    passes: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = {}
    pass_total = compile_wall = timed_wall = managers = 0.0
    timed = 0
    with tempfile.TemporaryDirectory() as tmp, OpWorker(desc.path, Path(tmp), chip=desc.chip, name="bench-timing") as w:
        start = time.perf_counter()
        for op in ops:
            result = w.analyze(op, settings, 60.0)
            t = result.pass_timing
            if t is None or result.compile is None:
                continue
            timed += 1
            passes.update(t.passes)
            by_kind.setdefault(op.op_name, Counter()).update(t.passes)
            pass_total += sum(t.passes.values())
            managers += t.total_seconds
            compile_wall += result.compile.seconds
            timed_wall += t.compile_seconds
        wall = time.perf_counter() - start
        w.close_passes()

    top5 = passes.most_common(5)
    summary = Figures(f"pass timing on the zoo ({', '.join(args.models)})", ["figure", "value"])
    summary.add("unique ops / timed", f"{len(ops)} / {timed}")
    summary.add("pass time s (leaf passes, summed)", pass_total)
    summary.add("pass managers' total time s (their reports' totals: passes and the rest)", managers)
    summary.add("compile wall s (the ops' own compiles)", compile_wall)
    summary.add("share of pass time in the top 5 passes", sum(s for _, s in top5) / pass_total if pass_total else 0.0)
    summary.add("share of compile wall in the top 5 passes", sum(s for _, s in top5) / compile_wall if compile_wall else 0.0)
    summary.add("timed re-compiles wall s (the cost of timing)", timed_wall)
    summary.add("run wall s (compile + timed re-compile)", wall)
    summary.show()

    slowest = Figures("slowest passes", ["rank", "pass", "seconds", "share of pass time"])
    for i, (name, seconds) in enumerate(passes.most_common(10), 1):
        slowest.add(i, name, seconds, seconds / pass_total if pass_total else 0.0)
    slowest.show()

    kinds = Figures("slowest pass per op kind (kinds with the most pass time)", ["op kind", "pass", "seconds", "share"])
    for kind, counter in sorted(by_kind.items(), key=lambda kv: -sum(kv[1].values()))[:10]:
        name, seconds = counter.most_common(1)[0]
        kinds.add(kind, name, seconds, seconds / sum(counter.values()))
    kinds.show()


if __name__ == "__main__":
    sys.exit(main())
