"""Compile time per op in a warm worker against a fresh process per op.

    .venv/bin/python benchmarks/bench_compile.py [--models mlp cnn ...] [--fresh-sample 8]

The peers compiled each op in a new process; opbyop keeps compile workers alive. Both run here,
on the same ops, in the same run: goal >= 20x faster per op.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Figures, console, median_ms, timed, zoo_ops

from opbyop.jaxenv import prepare_jax

prepare_jax()

from opbyop.compiler.system_desc import resolve  # noqa: E402
from opbyop.config import load_zoo  # noqa: E402
from opbyop.records import Status  # noqa: E402
from opbyop.worker.process import OpWorker  # noqa: E402
from opbyop.config import AnalysisSettings  # noqa: E402

FRESH = """
import sys, time
from pathlib import Path
from opbyop.jaxenv import prepare_jax
prepare_jax(Path(sys.argv[1]))
from opbyop.compiler.plugin import TTCompiler
from opbyop.config import CompilerOptions
TTCompiler().compile(Path(sys.argv[2]).read_text(), CompilerOptions(), Path(sys.argv[3]))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=[m.name for m in load_zoo().small()])
    parser.add_argument("--fresh-sample", type=int, default=8, help="ops compiled the peers' way")
    parser.add_argument("--chip", default="p150")
    args = parser.parse_args()

    desc = resolve(args.chip)
    splits, unique = zoo_ops(args.models)
    settings = AnalysisSettings(run_device=False, run_golden=False)
    workspace = Path(tempfile.mkdtemp(prefix="bench-compile-"))
    per_op: list[float] = []
    failed = 0
    with OpWorker(desc.path, workspace, chip=desc.chip, name="bench") as worker:
        with timed() as whole_zoo:
            for op in unique:
                result = worker.analyze(op, settings, timeout=300)
                per_op.append(result.compile.seconds if result.compile else result.seconds)
                failed += result.status not in (Status.SKIPPED, Status.SUCCESS)
        whole_models = Figures("whole models compiled at once", ["model", "ops", "compile s", "reached"])
        from opbyop.frontends.loader import load_model

        for name in args.models:
            graph = load_model(name)
            with timed() as t:
                result = worker.analyze_whole(graph, settings)
            whole_models.add(name, len(splits[name].ops), t.wall, result.depth.value)

    fresh: list[float] = []
    sample = unique[:: max(1, len(unique) // args.fresh_sample)][: args.fresh_sample]
    env = {**os.environ}
    env.pop("JAX_PLATFORMS", None)
    for op in sample:
        module = workspace / "op.mlir"
        module.write_text(op.module_text)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", FRESH, str(desc.path), str(module), str(workspace / "fresh")],
                       env=env, capture_output=True, check=True)
        fresh.append(time.perf_counter() - start)

    figures = Figures(f"compile, {len(unique)} unique ops of {', '.join(args.models)} ({args.chip})",
                      ["figure", "value"])
    figures.add("median compile per op, warm worker (ms)", median_ms(per_op))
    figures.add("ops/s per worker (zoo, incl. protocol)", len(unique) / whole_zoo.wall)
    figures.add("whole zoo, op by op (s)", whole_zoo.wall)
    figures.add("ops not reaching the flatbuffer", failed)
    figures.add(f"baseline: fresh process per op, median of {len(fresh)} (ms)", median_ms(fresh))
    figures.add("speedup per op (warm vs fresh process)", statistics.median(fresh) / statistics.median(per_op))
    figures.add("speedup per op incl. protocol (zoo wall / ops vs fresh)",
                statistics.median(fresh) / (whole_zoo.wall / len(unique)))
    figures.show()
    whole_models.show()
    console.print(f"scratch: {workspace}")


if __name__ == "__main__":
    main()
