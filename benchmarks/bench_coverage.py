"""The simulator's coverage on the single-op corpus: this checkout against a baseline revision's simulator.

    .venv/bin/python benchmarks/bench_coverage.py --chip n150 --after DIR [--before DIR | --baseline-ref REF]
        [--dtype f32 ...] [--op add ...] [--corpus DIR]

The corpus (every StableHLO op of opbyop/corpus/catalog.py x dtypes x shapes x forms) is written
into --corpus (default $OPBYOP_HOME/corpus) and run through the real pipeline (tt-mlir, the
simulated device, XLA:CPU) one dtype at a time, each chunk in a fresh worker; --after holds the
current simulator's results (resumed if present). The baseline is measured in the same run from
--baseline-ref (any git revision that has `opbyop corpus run`,
e.g. one whose simulator lacks kernels this one has), its results kept in --before; or --before names results measured earlier.
A full corpus takes about 15-20 minutes per chip and simulator on 2 shared cores.

Printed: TTNN ops emitted and how many each simulator ran, per-op pass rates before/after, per-dtype
golden pass rates before/after, and compiled ops left without a verdict by opbyop itself
(not simulated, or an analyzer error: a simulator exception, or no golden reference).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

from common import Figures, console

from opbyop.corpus.catalog import ALL_DTYPES
from opbyop.corpus.coverage import Coverage, CoverageRow, coverage
from opbyop.corpus.generate import generate
from opbyop.corpus.run import read_results, results_path
from opbyop.records import Status
from opbyop.workspace import Workspace

REPO = Path(__file__).resolve().parents[1]


def snapshot(ref: str, into: Path) -> Path:
    """The tree of `ref` (git archive), importable with PYTHONPATH."""
    data = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_corpus(corpus: Path, out: Path, chip: str, dtypes: list[str], ops: list[str], code: Path | None) -> float:
    """Each dtype chunk through `opbyop corpus run` (the checkout's code, or `code`'s); seconds."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    started = time.perf_counter()
    for dtype in dtypes:
        command = [sys.executable, "-m", "opbyop.cli.main", "corpus", "run", str(corpus), "--out", str(out),
                   "--chip", chip, "--dtype", dtype] + [a for op in ops for a in ("--op", op)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=str(code or REPO))
        last = (done.stdout.strip().splitlines() or [""])[-1]
        console.print(f"  {chip} {dtype} ({'baseline' if code else 'current'}): {last or done.stderr[-300:]}",
                      highlight=False)
    return time.perf_counter() - started


def load(out: Path, chip: str) -> Coverage:
    return coverage(CoverageRow.from_corpus(r) for r in read_results(out) if r.chip == chip)


def show(before: Coverage, after: Coverage, chip: str) -> None:
    def emitted(c: Coverage) -> set[str]:
        return {o.ttnn_op for o in c.ops if o.programs}

    summary = Figures(f"{chip}: the corpus through tt-mlir and the simulator",
                      ["", "corpus ops", "compiled", "TTNN ops emitted", "not simulated (named by runs)",
                       "compiled, no verdict (opbyop: not simulated, analyzer error)", "device verdicts", "golden pass rate"])
    for label, c in (("before", before), ("after", after)):
        verdicts = sum(d.verdicts for d in c.dtypes)
        passes = sum(d.statuses[Status.SUCCESS] for d in c.dtypes)
        summary.add(label, len(c.rows), c.compiled, len(emitted(c)), len(c.missing_in_runs),
                    f"{c.unreached} ({100 * c.unreached / max(1, c.compiled):.1f}%)", verdicts,
                    f"{100 * passes / max(1, verdicts):.1f}%")
    summary.show()

    ops = Figures(f"{chip}: TTNN ops (programs using each; pass = golden passes / device verdicts)",
                  ["TTNN op", "programs", "simulated before", "simulated after", "pass before", "pass after"])
    old = {o.ttnn_op: o for o in before.ops}
    new = {o.ttnn_op: o for o in after.ops}
    for name in sorted(set(old) | set(new), key=lambda n: (-(new.get(n) or old[n]).programs, n)):
        b, a = old.get(name), new.get(name)
        ops.add(name, (a or b).programs,
                "-" if b is None else ("no" if b.not_simulated_runs else "yes"),
                "-" if a is None else ("no" if a.not_simulated_runs else "yes"),
                _rate(b), _rate(a))
    ops.show()

    dtypes = Figures(f"{chip}: golden pass rate per dtype (passes / device verdicts)",
                     ["dtype", "ops", "compiled", "verdicts before", "pass before", "verdicts after", "pass after",
                      "no verdict before (opbyop)", "no verdict after (opbyop)"])
    old_d = {d.dtype: d for d in before.dtypes}
    for d in after.dtypes:
        b = old_d.get(d.dtype)
        dtypes.add(d.dtype, sum(d.statuses.values()), d.compiled, b.verdicts if b else "-",
                   f"{100 * b.pass_rate:.1f}%" if b and b.pass_rate is not None else "-", d.verdicts,
                   f"{100 * d.pass_rate:.1f}%" if d.pass_rate is not None else "-", b.unreached if b else "-",
                   d.unreached)
    dtypes.show()


def _rate(o) -> str:
    if o is None or not sum(o.verdicts.values()):
        return "-"
    return f"{sum(o.passes.values())}/{sum(o.verdicts.values())}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chip", nargs="*", default=["n150"])
    parser.add_argument("--after", type=Path, required=True, help="results of the current simulator (resumed)")
    parser.add_argument("--before", type=Path, help="results of the baseline (resumed when --baseline-ref is given)")
    parser.add_argument("--baseline-ref", help="git revision to measure the baseline with (has `opbyop corpus run`)")
    parser.add_argument("--corpus", type=Path, default=Workspace.default().root / "corpus")
    parser.add_argument("--dtype", nargs="*", default=[], help="chunks to run (default: all)")
    parser.add_argument("--op", nargs="*", default=[], help="catalog builders (default: all)")
    args = parser.parse_args()

    dtypes = [d for d in ALL_DTYPES if not args.dtype or d in args.dtype or
              d.replace("complex<f32>", "complex64") in args.dtype]
    manifest = generate(args.corpus, args.op or None, dtypes)
    console.print(f"corpus: {len(manifest.entries)} modules in {args.corpus}")
    with tempfile.TemporaryDirectory(prefix="bench-coverage-") as tmp:
        code = snapshot(args.baseline_ref, Path(tmp)) if args.baseline_ref else None
        for chip in args.chip:
            chunks = [d.replace("complex<f32>", "complex64") for d in dtypes]
            after = args.after / chip
            seconds = run_corpus(args.corpus, after, chip, chunks, args.op, None)
            console.print(f"{chip}: current simulator {seconds:.0f} s")
            before = (args.before / chip) if args.before else None
            if code is not None and before is not None:
                seconds = run_corpus(args.corpus, before, chip, chunks, args.op, code)
                console.print(f"{chip}: baseline {args.baseline_ref} {seconds:.0f} s")
            if before is None or not results_path(before).exists():
                console.print(f"{chip}: no baseline results (give --before, or --before with --baseline-ref)")
                before_cov = coverage([])
            else:
                before_cov = load(before, chip)
            show(before_cov, load(after, chip), chip)


if __name__ == "__main__":
    main()
