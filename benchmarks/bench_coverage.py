"""The simulator's coverage on the single-op corpus: this checkout's run against a baseline run.

    .venv/bin/python benchmarks/bench_coverage.py --chip n150 [--before-run RUN | --before-compiler SPEC]
        [--dtype f32 ...] [--op add ...] [--device ttsim]

The corpus (every StableHLO op of opbyop/corpus/catalog.py x dtypes x shapes x forms) goes through
`opbyop corpus run` (tt-mlir, the simulated device, XLA:CPU), one dtype at a time, each chunk in a
fresh process, stored as run `bench-coverage-<chip>` (a second invocation resumes it). The baseline
is measured in the same invocation with another compiler build (--before-compiler: a release such as
0.1.2, a wheel, a library; stored as `bench-coverage-<chip>-before`), or is a corpus run stored
earlier (--before-run). A full corpus takes about 15-20 minutes per chip and build on 2 shared cores.

Printed: TTNN ops emitted and how many each run simulated, per-op pass rates before/after, per-dtype
golden pass rates before/after, and compiled ops left without a verdict by opbyop itself
(not simulated, or an analyzer error: a simulator exception, or no golden reference).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from common import Figures, console

from opbyop.cli.coverage_cmds import coverage_rows
from opbyop.corpus.catalog import ALL_DTYPES
from opbyop.corpus.coverage import Coverage, coverage
from opbyop.records import Status
from opbyop_storage.aggregate import run_query
from opbyop_storage.dataset import Store
from opbyop_storage.files import default_root
from opbyop_storage.readonly import StoreConnection


def run_corpus(run_id: str, chip: str, dtypes: list[str], ops: list[str], compiler: str, device: str) -> float:
    """Each dtype chunk through `opbyop corpus run` into run `run_id`; seconds."""
    started = time.perf_counter()
    for dtype in dtypes:
        command = [sys.executable, "-m", "opbyop.cli.main", "corpus", "run", "--chip", chip, "--dtype", dtype,
                   "--run-id", run_id, "--compiler", compiler, "--device", device]
        command += [a for op in ops for a in ("--op", op)]
        done = subprocess.run(command, capture_output=True, text=True)
        last = (done.stdout.strip().splitlines() or [""])[-1]
        console.print(f"  {chip} {dtype} ({compiler}): {last or done.stderr[-300:]}", highlight=False)
    return time.perf_counter() - started


def load(run_id: str) -> Coverage:
    """The coverage of a stored run (none when the store does not have it)."""
    root = default_root()
    if not Store(root).has_run(run_id):
        console.print(f"no run {run_id} in the store {root}")
        return coverage([])
    with StoreConnection(root) as con:
        return coverage(coverage_rows(run_query(con, "ttnn_programs", run_id=run_id).records()))


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
    parser.add_argument("--before-run", help="a stored corpus run to compare with (one chip)")
    parser.add_argument("--before-compiler", help="measure the baseline with this compiler build (as --compiler)")
    parser.add_argument("--compiler", default="installed", help="the build measured (default: installed)")
    parser.add_argument("--device", default="model", help="model | ttsim")
    parser.add_argument("--dtype", nargs="*", default=[], help="chunks to run (default: all)")
    parser.add_argument("--op", nargs="*", default=[], help="catalog builders (default: all)")
    args = parser.parse_args()

    chunks = [d.replace("complex<f32>", "complex64") for d in ALL_DTYPES
              if not args.dtype or d in args.dtype or d.replace("complex<f32>", "complex64") in args.dtype]
    for chip in args.chip:
        after = f"bench-coverage-{chip}"
        seconds = run_corpus(after, chip, chunks, args.op, args.compiler, args.device)
        console.print(f"{chip}: {args.compiler} {seconds:.0f} s")
        before = args.before_run
        if args.before_compiler:
            before = f"{after}-before"
            seconds = run_corpus(before, chip, chunks, args.op, args.before_compiler, args.device)
            console.print(f"{chip}: baseline {args.before_compiler} {seconds:.0f} s")
        show(load(before) if before else coverage([]), load(after), chip)


if __name__ == "__main__":
    main()
