"""The small zoo's ops on ttsim (tt-metal's kernels on Tenstorrent's simulator) beside opbyop's model.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_ttsim.py [--models mlp cnn ...] [--chip p150]
        [--timeout 120] [--passes 2]

Every unique op of the models is compiled, run on opbyop's device model and on ttsim, and checked
against XLA:CPU, in one op worker (the analysis path of `opbyop run MODEL --device ttsim`). The
first pass starts from an empty workspace, so tt-metal JIT-compiles each kernel on first use; the
second pass runs the same ops in a new worker with the kernel cache kept: the difference is the
cold run's kernel-compile time. A third figure is the model backend alone on the same ops
(`--device model`), measured in the same run.

Printed: per model, how the ops fared on ttsim and their pcc against XLA; per TTNN op kind, the
programs both ran and how the model's outputs agree with ttsim's (bit-equal, within ulps,
differing); the tt-metal rejections and ttsim limits met, with their messages; and the speed.
Requires `make ttsim`. Goal: warm per-op median on ttsim <= 0.5 s.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from common import Figures

from opbyop.jaxenv import prepare_jax

prepare_jax()

from opbyop.artifacts import ArtifactStore  # noqa: E402
from opbyop.compiler.system_desc import resolve  # noqa: E402
from opbyop.config import AnalysisSettings, DeviceOptions, load_thresholds  # noqa: E402
from opbyop.device.program import emitted_ops  # noqa: E402
from opbyop.device.ttsim.agreement import principal_op  # noqa: E402
from opbyop.pipeline import prepare  # noqa: E402
from opbyop.records import OpResult, TtsimOutcome  # noqa: E402
from opbyop.worker.process import OpWorker  # noqa: E402

SMALL_ZOO = ["mlp", "cnn", "resnet18", "bert-small", "gpt2", "llama", "vit", "jax-mlp"]


@dataclass
class Pass:
    results: dict[str, OpResult] = field(default_factory=dict)
    seconds: float = 0.0


def run_pass(ops: list, home: Path, chip: str, backend: str, timeout: float) -> Pass:
    settings = AnalysisSettings(thresholds=load_thresholds(),
                                device=DeviceOptions(backend=backend, ttsim_timeout_s=timeout))
    out = Pass()
    started = time.perf_counter()
    with OpWorker(resolve(chip).path, home, chip=chip, name=f"bench-{backend}") as worker:
        for op in ops:
            out.results[op.signature] = worker.analyze(op, settings, timeout=timeout * 3)
    out.seconds = time.perf_counter() - started
    return out


def principal(result: OpResult, artifacts: ArtifactStore) -> str | None:
    """The TTNN op kind the program's agreement is put down to (agreement.principal_op)."""
    if result.compile is None or "ttnn_runtime" not in result.compile.artifacts:
        return None
    return principal_op(emitted_ops(artifacts.read_text(result.compile.artifacts["ttnn_runtime"])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=SMALL_ZOO)
    parser.add_argument("--chip", default="p150")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per op on ttsim")
    parser.add_argument("--passes", type=int, default=2, help="ttsim passes (the first is cold)")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="bench-ttsim-"))
    artifacts = ArtifactStore(home / "artifacts")
    prepared = prepare(args.models, artifacts=artifacts)
    for name, error in prepared.errors.items():
        print(f"{name}: not analysed: {error}")
    ops = prepared.unique
    print(f"{len(ops)} unique ops from {len(prepared.graphs)} models, workspace {home}")
    passes = [run_pass(ops, home, args.chip, "ttsim", args.timeout) for _ in range(args.passes)]
    model = run_pass(ops, home, args.chip, "model", args.timeout)
    last = passes[-1].results

    per_model = Figures(f"the small zoo on ttsim ({args.chip}), per model",
                        ["model", "unique ops", "ttsim outcomes", "statuses", "min pcc vs XLA (ran on ttsim)"])
    for name, split in prepared.splits.items():
        signatures = {r.signature for r in split.ops if r.signature}
        rs = [last[s] for s in signatures if s in last]
        outcomes = Counter(r.ttsim.outcome.value if r.ttsim else "none" for r in rs)
        statuses = Counter(r.status.value for r in rs)
        pccs = [r.golden.pcc for r in rs if r.device_backend == "ttsim" and r.golden and r.golden.pcc is not None]
        per_model.add(name, len(rs), _counts(outcomes), _counts(statuses), f"{min(pccs):.5f}" if pccs else "-")
    per_model.show()

    kinds: dict[str, Counter] = defaultdict(Counter)
    for r in last.values():
        kind = principal(r, artifacts)
        if r.ttsim is None or kind is None:
            continue
        kinds[kind][r.ttsim.outcome.value] += 1
        if r.ttsim.agreement:
            kinds[kind][r.ttsim.agreement] += 1
    agreement = Figures("the model against ttsim, per TTNN op kind (each program once, under its principal op: "
                        "the matrix engine, then reductions, math, data movement, creation, layout)",
                        ["TTNN op", "ran on ttsim", "bit-equal", "within ulps", "differ", "model failed",
                         "rejected", "ttsim limit", "unmapped", "timeout", "other"])
    for kind, c in sorted(kinds.items(), key=lambda kv: -kv[1]["ran"]):
        agreement.add(kind, c["ran"], c["bit_equal"], c["within_ulps"], c["differ"], c["model_failed"], c["rejected"],
                      c["limit"], c["unmapped"] + c["mapping"], c["timeout"], c["crashed"] + c["unavailable"])
    agreement.show()

    met = Figures("tt-metal rejections and ttsim limits met", ["outcome", "TTNN op", "ops", "message"])
    messages = Counter((r.ttsim.outcome.value, r.ttsim.op or "", (r.ttsim.message or "").splitlines()[0][:160])
                       for r in last.values() if r.ttsim and r.ttsim.outcome not in (TtsimOutcome.RAN,))
    for (outcome, op, message), n in messages.most_common():
        met.add(outcome, op, n, message)
    met.show()

    speed = Figures("speed per op (median, seconds)", ["run", "ops", "op total", "on ttsim", "inside ttnn", "wall"])
    for i, p in enumerate(passes):
        runs = [r.ttsim for r in p.results.values() if r.ttsim and r.ttsim.outcome is TtsimOutcome.RAN]
        speed.add("ttsim, cold kernel cache" if i == 0 else "ttsim, warm", len(p.results),
                  _median([r.seconds for r in p.results.values()]), _median([t.seconds for t in runs]),
                  _median([t.runner_seconds for t in runs]), p.seconds)
    speed.add("device model only", len(model.results), _median([r.seconds for r in model.results.values()]), "-", "-",
              model.seconds)
    speed.show()
    if len(passes) > 1:
        cold = sum(r.ttsim.runner_seconds for r in passes[0].results.values() if r.ttsim)
        warm = sum(r.ttsim.runner_seconds for r in passes[-1].results.values() if r.ttsim)
        print(f"kernel compile (cold run's time inside ttnn less the warm run's): {cold - warm:.1f} s")
        warm_median = _median([r.ttsim.seconds for r in last.values() if r.ttsim and r.ttsim.outcome is TtsimOutcome.RAN])
        print(f"goal: warm per-op median on ttsim <= 0.5 s: {warm_median:.3f} s, "
              f"{'met' if warm_median <= 0.5 else 'MISSED'}")


def _counts(c: Counter) -> str:
    return ", ".join(f"{n} {k}" for k, n in c.most_common())


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


if __name__ == "__main__":
    main()
