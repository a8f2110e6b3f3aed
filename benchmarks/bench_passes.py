"""What naming the failing compiler pass costs: failed ops compiled again with IR printing on.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_passes.py [--models cnn ...] [--repeat 2]

The same ops (every unique op of tests/data/*.mlir, plus the models given) go through two fresh
workers side by side, compile only: one without the failed-pass search (the baseline), one with it.
Goal: the verbose re-compiles cost at most 2x the failing ops' first compile, in wall time of the
run: the failing ops' share of the baseline run (its wall time less that of a run of the passing ops
alone: a crash costs the run a new compile child) against the extra wall time of the run with the
search. What the search costs a run without failures (its verbose child started, unused) is shown too.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from common import Figures, console, zoo_ops

from opbyop.jaxenv import prepare_jax

prepare_jax()

from opbyop.compiler.system_desc import resolve  # noqa: E402
from opbyop.config import AnalysisSettings  # noqa: E402
from opbyop.frontends.loader import load_stablehlo_file  # noqa: E402
from opbyop.ir.dedupe import dedupe  # noqa: E402
from opbyop.ir.split import split_module  # noqa: E402
from opbyop.records import UniqueOp  # noqa: E402
from opbyop.worker.passes import wants_failed_pass  # noqa: E402
from opbyop.worker.process import OpWorker  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def data_ops() -> list[UniqueOp]:
    ops: list[UniqueOp] = []
    for path in sorted(DATA.glob("*.mlir")):
        try:
            graph = load_stablehlo_file(path)
        except Exception as e:  # a file the frontend refuses is not a compile to measure
            console.print(f"skipped {path.name}: {e}")
            continue
        ops += dedupe(split_module(graph.module_text, graph.name).ops)
    return ops


def run(ops: list[UniqueOp], desc, home: Path, search: bool, timeout: float) -> tuple[float, list[tuple[float, object]]]:
    """(wall time of the run, per op (its wall time, its result)); the worker is warm before timing."""
    settings = AnalysisSettings(run_device=False, run_golden=False, failed_pass=search)
    per_op = []
    with OpWorker(desc.path, home, chip=desc.chip, name=f"bench-passes-{int(search)}") as worker:
        start = time.perf_counter()
        for op in ops:
            t = time.perf_counter()
            result = worker.analyze(op, settings, timeout)
            per_op.append((time.perf_counter() - t, result))
        wall = time.perf_counter() - start
        worker.close_passes()
    return wall, per_op


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=[])
    parser.add_argument("--chip", default="p150")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()

    desc = resolve(args.chip)
    ops = data_ops() + (zoo_ops(args.models) if args.models else [])
    with tempfile.TemporaryDirectory() as tmp:
        base_wall, base = run(ops, desc, Path(tmp) / "base", False, args.timeout)
        pass_wall, found = run(ops, desc, Path(tmp) / "passes", True, args.timeout)
        failing = [i for i, (_, r) in enumerate(base) if wants_failed_pass(r)]
        passing = [op for i, op in enumerate(ops) if i not in failing]
        # the failing ops' share of the run's wall time includes what their crashes cost (a new child)
        clean_wall, _ = run(passing, desc, Path(tmp) / "clean", False, args.timeout)
        clean_search_wall, _ = run(passing, desc, Path(tmp) / "clean-search", True, args.timeout)

    table = Figures("failing ops: first compile (baseline run) beside the verbose re-compile",
                    ["op", "status", "first compile ms", "verbose re-compile ms", "ratio", "failed pass", "position",
                     "last succeeded"])
    first_total = verbose_total = 0.0
    named = 0
    for i in failing:
        first, result = base[i]
        verbose = found[i][1].failed_pass
        if verbose is None:
            table.add(result.op_name, result.status.value, 1000 * first, "-", "-", "(not searched)", "", "")
            continue
        first_total += first
        verbose_total += verbose.seconds
        named += verbose.argument is not None
        table.add(result.op_name, result.status.value, 1000 * first, 1000 * verbose.seconds,
                  verbose.seconds / first if first else float("nan"),
                  verbose.argument or f"none: {verbose.reason}", verbose.position or "", verbose.last_succeeded or "")
    table.show()

    summary = Figures("the run, side by side", ["figure", "value"])
    summary.add("ops (unique)", len(ops))
    summary.add("failing ops (compile_failed, crashed, timeout)", len(failing))
    summary.add("failing ops with a pass named", named)
    summary.add("run wall s, without the search", base_wall)
    summary.add("run wall s, with the search", pass_wall)
    summary.add("run wall s, passing ops only, without the search", clean_wall)
    summary.add("run wall s, passing ops only, with the search (its child started, unused)", clean_search_wall)
    failing_wall = base_wall - clean_wall
    summary.add("failing ops' first compile in the run's wall s (with their crashes' new children)", failing_wall)
    summary.add("failing ops' own compile calls s", first_total)
    summary.add("verbose re-compiles s (in the op's call)", verbose_total)
    summary.add("extra run wall s with the search", pass_wall - base_wall)
    summary.add("extra run wall / failing ops' wall (goal <= 2)",
                (pass_wall - base_wall) / failing_wall if failing_wall > 0 else float("nan"))
    summary.show()


if __name__ == "__main__":
    sys.exit(main())
