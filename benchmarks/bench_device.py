"""Simulating an op against compiling it, and stitched whole-model runs.

    .venv/bin/python benchmarks/bench_device.py [--models mlp cnn ...]

Goal: simulating an op costs no more than compiling it (medians over the same ops, same run).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from common import Figures, console, median_ms, zoo_ops

from opbyop.jaxenv import prepare_jax

prepare_jax()

from opbyop.compiler.system_desc import resolve  # noqa: E402
from opbyop.config import load_thresholds, load_zoo  # noqa: E402
from opbyop.frontends.loader import load_model  # noqa: E402
from opbyop.records import Status  # noqa: E402
from opbyop.worker.process import OpWorker  # noqa: E402
from opbyop.config import AnalysisSettings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=[m.name for m in load_zoo().small()])
    parser.add_argument("--chip", default="p150")
    args = parser.parse_args()

    desc = resolve(args.chip)
    _, unique = zoo_ops(args.models)
    settings = AnalysisSettings(thresholds=load_thresholds())
    compile_s, simulate_s, golden_s = [], [], []
    statuses: dict[str, int] = {}
    kinds: dict[str, int] = {}
    workspace = Path(tempfile.mkdtemp(prefix="bench-device-"))
    stitched = Figures("stitched whole-model runs (weights pushed once, 2 iterations)",
                       ["model", "status", "pcc vs framework", "wall s", "TTNN ops", "cycles (steady)",
                        "peak DRAM B", "peak L1 B/core", "slowest op (cycles)"])
    with OpWorker(desc.path, workspace, chip=desc.chip, name="bench") as worker:
        for op in unique:
            r = worker.analyze(op, settings, timeout=300)
            statuses[r.status.value] = statuses.get(r.status.value, 0) + 1
            if r.compile:
                compile_s.append(r.compile.seconds)
            if r.device and r.status is not Status.RUN_FAILED:
                simulate_s.append(r.device.seconds)
                for p in r.device.placements:
                    kinds[p.ttnn_op] = kinds.get(p.ttnn_op, 0) + 1
            if r.golden:
                golden_s.append(r.golden.seconds)
        for name in args.models:
            w = worker.analyze_whole(load_model(name), settings)
            slowest = max(w.device.placements, key=lambda p: p.cycles) if w.device and w.device.placements else None
            stitched.add(name, w.status.value, w.pcc if w.pcc is not None else "-", w.seconds,
                         w.device.ttnn_ops if w.device else "-", w.device.cycles if w.device else "-",
                         w.device.peak_dram_bytes if w.device else "-", w.device.peak_l1_bytes if w.device else "-",
                         f"{slowest.ttnn_op} {slowest.cycles}" if slowest else "-")

    figures = Figures(f"per op, {len(unique)} unique ops ({args.chip})", ["figure", "value"])
    figures.add("median compile (ms)", median_ms(compile_s))
    figures.add("median device simulation (ms)", median_ms(simulate_s))
    figures.add("simulation / compile (medians)", statistics.median(simulate_s) / statistics.median(compile_s))
    figures.add("median golden on XLA:CPU (ms)", median_ms(golden_s))
    figures.add("statuses", ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())))
    figures.add("TTNN compute op kinds placed", len(kinds))
    figures.show()
    stitched.show()
    console.print("placed TTNN ops: " + ", ".join(f"{k.removeprefix('ttnn.')} {n}" for k, n in
                                                  sorted(kinds.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
