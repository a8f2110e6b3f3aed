"""Export, split, dedupe and golden per zoo model.

    .venv/bin/python benchmarks/bench_foundation.py [--models mlp cnn ...]

Goals on a 2-core machine: split >= 2,000 ops/s; golden <= 60 ms CPU per unique op (median);
resnet50 export + split + dedupe < 20 s. Baselines in the same run: parsing alone (the floor a
splitter cannot beat), and golden without the signature cache (an XLA compile per occurrence).
Split times are the best of three runs (the machine's other load is not the splitter's cost).
"""

from __future__ import annotations

import argparse
import time

from common import Figures, console, median_ms, timed

from opbyop.jaxenv import prepare_jax

prepare_jax()

from opbyop.config import load_zoo  # noqa: E402
from opbyop.frontends.loader import load_model  # noqa: E402
from opbyop.golden.inputs import make_inputs  # noqa: E402
from opbyop.golden.xla_cpu import XlaCpu  # noqa: E402
from opbyop.ir.context import make_context  # noqa: E402
from opbyop.ir.dedupe import dedupe  # noqa: E402
from opbyop.ir.parse import parse_module  # noqa: E402
from opbyop.ir.split import split_module  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=[m.name for m in load_zoo().small()])
    parser.add_argument("--uncached-sample", type=int, default=40, help="occurrences compiled without the cache")
    args = parser.parse_args()

    ctx = make_context()
    split_module(load_model("mlp").module_text, "warm-up", ctx)  # imports and first-use costs
    figures = Figures("per model (wall seconds unless noted)",
                      ["model", "export s", "parse s", "split s", "ops", "unique", "unique/total",
                       "split ops/s", "dedupe ms", "golden ms CPU/unique (median)", "export+split+dedupe s"])
    all_golden: list[float] = []
    records = []
    for name in args.models:
        with timed() as export:
            graph = load_model(name)
        with timed() as parse:
            with ctx:
                parse_module(graph.module_text, ctx, name)
        best = None
        for _ in range(3):  # best of three: the machine's other load is not the splitter's cost
            with timed() as split_t:
                split = split_module(graph.module_text, name, ctx)
            best = split_t if best is None or split_t.wall < best.wall else best
        split_t = best
        with timed() as dedupe_t:
            unique = dedupe(split.ops)
        golden = XlaCpu()
        cpu_per_op = []
        for op in unique:
            inputs = make_inputs(op.op_name, op.inputs, op.operands, op.attributes, op.signature, 0)
            start = time.process_time()
            golden.run(op.module_text, inputs, key=op.signature)
            cpu_per_op.append(time.process_time() - start)
        all_golden += cpu_per_op
        records += split.ops
        figures.add(name, export.wall, parse.wall, split_t.wall, len(split.ops), len(unique),
                    len(unique) / len(split.ops), len(split.ops) / split_t.wall, 1000 * dedupe_t.wall,
                    median_ms(cpu_per_op), export.wall + split_t.wall + dedupe_t.wall)
    figures.show()

    # Baseline: golden without the signature cache, on a sample of occurrences.
    sample = [r for r in records if r.ok][: args.uncached_sample]
    uncached = []
    for r in sample:
        fresh = XlaCpu()  # a new cache each time: every occurrence compiles
        inputs = make_inputs(r.op_name, r.inputs, r.operands, r.attributes, r.signature, 0)
        start = time.process_time()
        fresh.run(r.module_text, inputs)
        uncached.append(time.process_time() - start)
    all_unique = dedupe(records)
    console.print(f"zoo: {len(records)} ops, {len(all_unique)} unique across models "
                  f"({len(records) / max(1, len(all_unique)):.1f} occurrences per unique op)")
    console.print(f"golden: median {median_ms(all_golden):.1f} ms CPU per unique op (cached by signature; "
                  f"compiled once per unique op); baseline without the cache: median "
                  f"{median_ms(uncached):.1f} ms CPU per occurrence on {len(sample)} occurrences, i.e. "
                  f"{len(records) * median_ms(uncached) / 1000:.0f} s for the zoo instead of "
                  f"{len(all_unique) * median_ms(all_golden) / 1000:.0f} s")


if __name__ == "__main__":
    main()
