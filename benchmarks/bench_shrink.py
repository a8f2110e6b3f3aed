"""What a shrink costs per op, beside analysing the op once (same worker, same run).

    .venv/bin/python benchmarks/bench_shrink.py [--seconds 60] [--models cnn]

Ops: two real failures (stablehlo.cholesky, refused by tt-mlir; a ui8 dot_general whose device output
differs from XLA:CPU) and, for a passing op's cost (searched upwards), each kind of op of --models.
Printed per op: variants analysed and rejected, the search's wall time, ms per variant, and the
baseline: the op's own analysis time in the same worker.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import Figures, console, zoo_ops

from opbyop.jaxenv import prepare_jax

prepare_jax()

from opbyop.compiler.system_desc import resolve  # noqa: E402
from opbyop.config import load_thresholds  # noqa: E402
from opbyop.frontends.loader import load_stablehlo_file  # noqa: E402
from opbyop.ir.dedupe import dedupe  # noqa: E402
from opbyop.ir.split import split_module  # noqa: E402
from opbyop.shrink.search import Shrinker  # noqa: E402
from opbyop.worker.process import OpWorker  # noqa: E402
from opbyop.config import AnalysisSettings  # noqa: E402
from opbyop.workspace import Workspace  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
DOT_UI8 = """module {
  func.func @main(%a: tensor<32x4096xui8>, %b: tensor<4096x32xui8>) -> tensor<32x32xui8> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<32x4096xui8>, tensor<4096x32xui8>) -> tensor<32x32xui8>
    return %0 : tensor<32x32xui8>
  }
}
"""


def failing_ops(tmp: Path):
    dot = tmp / "dot_ui8.mlir"
    dot.write_text(DOT_UI8)
    ops = []
    for path in (DATA / "cholesky.mlir", dot):
        graph = load_stablehlo_file(path)
        ops += [op for op in dedupe(split_module(graph.module_text, graph.name).ops) if op.op_name != "stablehlo.constant"]
    return ops


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=["cnn"])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--chip", default="p150")
    args = parser.parse_args()

    desc = resolve(args.chip)
    settings = AnalysisSettings(thresholds=load_thresholds())
    with tempfile.TemporaryDirectory() as tmp:
        ops = failing_ops(Path(tmp))
        _, unique = zoo_ops(args.models)
        kinds: dict[str, object] = {}
        for op in unique:
            if op.op_name != "stablehlo.constant":
                kinds.setdefault(op.op_name, op)
        ops += list(kinds.values())
        workspace = Workspace(Path(tmp) / "home")
        figures = Figures(f"shrink per op (budget {args.seconds:g} s, one warm worker, {desc.chip})",
                          ["op", "as found", "variants", "rejected", "shrink s", "ms / variant", "op alone ms",
                           "complete", "first boundary"])
        totals = []
        with OpWorker(desc.path, workspace.root, chip=desc.chip, name="bench-shrink") as worker:
            for op in ops:
                started = time.perf_counter()
                baseline = worker.analyze(op, settings, 120)
                alone = time.perf_counter() - started
                shrinker = Shrinker(lambda v: worker.analyze(v, settings, 120), workspace.artifacts, workspace.ops.put,
                                    budget_s=args.seconds)
                result = shrinker.shrink(op, baseline)
                per_variant = result.seconds / result.analysed if result.analysed else float("nan")
                totals.append((result.seconds, result.analysed))
                first = next((f"{b.dtype}: {b.sentence()}" for b in result.boundaries
                              if b.largest_passing is not None and b.smallest_failing is not None), "")
                figures.add(f"{op.op_name} {' '.join(map(str, op.inputs))}", baseline.status.value, result.analysed,
                            result.rejected, result.seconds, 1000 * per_variant, 1000 * alone, result.complete, first)
        figures.show()
        seconds, variants = sum(s for s, _ in totals), sum(n for _, n in totals)
        console.print(f"{len(totals)} ops: {variants} variants in {seconds:.1f} s "
                      f"({1000 * seconds / max(1, variants):.0f} ms per variant, {seconds / max(1, len(totals)):.1f} s per op)")


if __name__ == "__main__":
    main()
