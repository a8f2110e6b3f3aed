"""What the whole-model accuracy trace costs: the stitched whole-model run with and without it.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_accuracy_trace.py [--model bert-base] [--repeat 1]

One warm worker runs the model whole (compile, stitched device run, comparison) with the trace off
(the whole-model run as it is by default), then on, side by side. Goal: the trace costs <= 1.5x the
whole-model run without it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import Figures

from opbyop.jaxenv import prepare_jax

prepare_jax()

from opbyop.compiler.system_desc import resolve  # noqa: E402
from opbyop.config import AnalysisSettings, load_thresholds  # noqa: E402
from opbyop.frontends.loader import load_model  # noqa: E402
from opbyop.worker.process import OpWorker  # noqa: E402

# The worker child starts in a temporary directory: a relative PYTHONPATH (".") would let it import
# whichever opbyop the environment installed instead of this checkout's.
ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="bert-base")
    parser.add_argument("--chip", default="p150")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    graph = load_model(args.model)
    desc = resolve(args.chip)
    walls: dict[str, list[float]] = {"off": [], "on": []}
    last = {}
    with tempfile.TemporaryDirectory() as tmp, OpWorker(desc.path, Path(tmp), chip=desc.chip, name="bench-trace",
                                                       env={"PYTHONPATH": str(ROOT)}) as w:
        for _ in range(args.repeat):
            for mode in ("off", "on"):
                settings = AnalysisSettings(thresholds=load_thresholds(), accuracy_trace=mode)
                start = time.perf_counter()
                last[mode] = w.analyze_whole(graph, settings, timeout=1800)
                walls[mode].append(time.perf_counter() - start)
    off, on = statistics.median(walls["off"]), statistics.median(walls["on"])
    trace = last["on"].accuracy_trace
    figures = Figures(f"whole-model run of {args.model}, trace off beside on (median of {args.repeat})", ["figure", "value"])
    figures.add("status off / on", f"{last['off'].status.value} / {last['on'].status.value}")
    figures.add("whole-model run s, trace off (today)", off)
    figures.add("whole-model run s, trace on", on)
    figures.add("ratio (goal <= 1.5)", on / off)
    if trace is not None:
        figures.add("ops compared / traced by XLA:CPU", f"{len(trace.points)} / {trace.traced_ops}")
        figures.add("trace's own s (XLA:CPU with every intermediate, beside the device run, + comparisons)", trace.seconds)
        figures.add("first op below the threshold", f"{trace.first_below} {trace.first_below_op or ''}")
        figures.add("whole-model pcc", last["on"].pcc)
        if trace.message:
            figures.add("no trace because", trace.message)
    figures.show()


if __name__ == "__main__":
    sys.exit(main())
