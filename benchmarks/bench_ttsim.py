"""The small zoo's ops on ttsim (tt-metal's kernels on Tenstorrent's simulator) beside opbyop's model,
and what a run on ttsim costs next to the same run with the model alone.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_ttsim.py [--models mlp cnn ...] [--chip p150]
        [--timeout 120] [--where] [--whole]

Every unique op of the models is compiled, run on the device and checked against XLA:CPU in one op
worker (the analysis path of `opbyop run MODEL --device ttsim`), three times, each pass in a worker
of its own:
1. on ttsim with an empty kernel cache (OPBYOP_TTSIM_KERNELS in a scratch folder): tt-metal builds
   its firmware and every kernel on first use. This pass also warms what every pass shares (the
   compiler's first loads, XLA:CPU's executables on disk), so it is reported apart;
2. with the device model alone (`--device model`);
3. on ttsim again, its kernels built (the figure a run on a machine that ran ttsim before gets).
The goal compares 3 with 2, wall against wall; 1 less 3 is the cold kernel builds. With `--where`,
the programs of pass 3 run once more on ttsim straight from this process, each phase of each run
timed (opbyop.device.ttsim.backend.TtsimResult.phases): where ttsim's part goes, per phase and per
TTNN op kind.

Printed: per model, how the ops fared on ttsim and their pcc against XLA; per TTNN op kind, the
programs both ran and how the model's outputs agree with ttsim's; the tt-metal rejections and ttsim
limits met; and the time, side by side, split into the worker's start, the compiles, the model's
device runs, the golden checks and ttsim's part (its time inside ttnn apart). Requires `make ttsim`.
Goal: the warm ttsim pass at most 1.5x the model's wall time.

With `--whole`, instead: each model whole (the analysis path of `opbyop run MODEL --device ttsim`'s
whole-model step), one worker, in the machine's kernel cache: once with the model alone, then twice on
ttsim (the first builds the kernels the cache lacks, the second is warm). Printed per model: the
model's pcc and ttsim's against the framework, the accuracy trace on ttsim's values (ops compared,
first below the threshold, worst op) beside the model's own, and the wall of each run.
"""

from __future__ import annotations

import argparse
import os
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
from opbyop.device.program import load_program  # noqa: E402
from opbyop.device.ttsim.agreement import principal_op  # noqa: E402
from opbyop.device.ttsim.backend import TtsimBackend  # noqa: E402
from opbyop.golden import upstream  # noqa: E402
from opbyop.golden.inputs import make_inputs  # noqa: E402
from opbyop.pipeline import prepare  # noqa: E402
from opbyop.analysis.accuracy_trace import in_brief  # noqa: E402
from opbyop.frontends.loader import load_model  # noqa: E402
from opbyop.records import OpResult, TtsimOutcome, UniqueOp, WholeModelResult  # noqa: E402
from opbyop.worker.process import OpWorker  # noqa: E402

SMALL_ZOO = ["mlp", "cnn", "resnet18", "bert-small", "gpt2", "llama", "vit", "jax-mlp"]
GOAL = 1.5  # a run on ttsim against the same run with the model, wall time


@dataclass
class Pass:
    name: str
    results: dict[str, OpResult] = field(default_factory=dict)
    start: float = 0.0  # the worker's start (compiler, XLA:CPU, device loaded)
    seconds: float = 0.0  # the ops, one after another

    @property
    def wall(self) -> float:
        return self.start + self.seconds

    def total(self, part: str) -> float:
        """Seconds over the pass's ops spent in `part` (compile, device, golden, ttsim, ttnn)."""
        return sum(_part(r, part) for r in self.results.values())


def _part(r: OpResult, part: str) -> float:
    if part == "compile":
        return r.compile.seconds if r.compile else 0.0
    if part == "device":
        return r.device.seconds if r.device else 0.0
    if part == "golden":
        return r.golden.seconds if r.golden else 0.0
    if part == "ttsim":
        return r.ttsim.seconds if r.ttsim else 0.0
    return r.ttsim.runner_seconds if r.ttsim else 0.0  # "ttnn": inside the runner


def run_pass(name: str, ops: list[UniqueOp], home: Path, chip: str, backend: str, timeout: float) -> Pass:
    settings = AnalysisSettings(thresholds=load_thresholds(),
                                device=DeviceOptions(backend=backend, ttsim_timeout_s=timeout))
    out = Pass(name)
    started = time.perf_counter()
    with OpWorker(resolve(chip).path, home, chip=chip, name=f"bench-{backend}") as worker:
        out.start = time.perf_counter() - started
        started = time.perf_counter()
        for op in ops:
            out.results[op.signature] = worker.analyze(op, settings, timeout=timeout * 3)
        out.seconds = time.perf_counter() - started
    return out


def principal(result: OpResult, artifacts: ArtifactStore) -> str | None:
    """The TTNN op kind the program's agreement is put down to (agreement.principal_op)."""
    if result.compile is None or "ttnn_runtime" not in result.compile.artifacts:
        return None
    return principal_op(emitted_ops(artifacts.read_text(result.compile.artifacts["ttnn_runtime"])))


def show_models(prepared, last: dict[str, OpResult], chip: str) -> None:
    table = Figures(f"the small zoo on ttsim ({chip}), per model",
                    ["model", "unique ops", "ttsim outcomes", "statuses", "min pcc vs XLA (ran on ttsim)"])
    for name, split in prepared.splits.items():
        signatures = {r.signature for r in split.ops if r.signature}
        rs = [last[s] for s in signatures if s in last]
        outcomes = Counter(r.ttsim.outcome.value if r.ttsim else "none" for r in rs)
        statuses = Counter(r.status.value for r in rs)
        pccs = [r.golden.pcc for r in rs if r.device_backend == "ttsim" and r.golden and r.golden.pcc is not None]
        table.add(name, len(rs), _counts(outcomes), _counts(statuses), f"{min(pccs):.5f}" if pccs else "-")
    table.show()


def show_agreement(last: dict[str, OpResult], artifacts: ArtifactStore) -> None:
    kinds: dict[str, Counter] = defaultdict(Counter)
    for r in last.values():
        kind = principal(r, artifacts)
        if r.ttsim is None or kind is None:
            continue
        kinds[kind][r.ttsim.outcome.value] += 1
        if r.ttsim.agreement:
            kinds[kind][r.ttsim.agreement] += 1
    table = Figures("the model against ttsim, per TTNN op kind (each program once, under its principal op: "
                    "the matrix engine, then reductions, math, data movement, creation, layout)",
                    ["TTNN op", "ran on ttsim", "bit-equal", "within ulps", "differ", "model failed",
                     "rejected", "ttsim limit", "unmapped", "timeout", "other"])
    for kind, c in sorted(kinds.items(), key=lambda kv: -kv[1]["ran"]):
        table.add(kind, c["ran"], c["bit_equal"], c["within_ulps"], c["differ"], c["model_failed"], c["rejected"],
                  c["limit"], c["unmapped"] + c["mapping"], c["timeout"], c["crashed"] + c["unavailable"])
    table.show()


def show_stops(last: dict[str, OpResult]) -> None:
    table = Figures("tt-metal rejections and ttsim limits met", ["outcome", "TTNN op", "ops", "message"])
    messages = Counter((r.ttsim.outcome.value, r.ttsim.op or "", (r.ttsim.message or "").splitlines()[0][:160])
                       for r in last.values() if r.ttsim and r.ttsim.outcome is not TtsimOutcome.RAN)
    for (outcome, op, message), n in messages.most_common():
        table.add(outcome, op, n, message)
    table.show()


def show_time(cold: Pass, model: Pass, warm: Pass) -> None:
    table = Figures("time, side by side (seconds; the same ops, one worker each)",
                    ["pass", "ops", "wall", "worker start", "ops' time", "compile", "model device", "golden",
                     "ttsim", "of it inside ttnn", "per op (median)", "against the model"])
    for p in (model, warm, cold):
        ratio = f"{p.wall / model.wall:.2f}x" if p is not cold else "-"
        table.add(p.name, len(p.results), p.wall, p.start, p.seconds, p.total("compile"), p.total("device"),
                  p.total("golden"), p.total("ttsim"), p.total("ttnn"),
                  _median([r.seconds for r in p.results.values()]), ratio)
    table.show()
    print(f"cold kernel builds (the cold pass's time on ttsim less the warm pass's): "
          f"{cold.total('ttsim') - warm.total('ttsim'):.1f} s")
    ratio = warm.wall / model.wall
    print(f"goal: a run on ttsim at most {GOAL}x the run with the model: {ratio:.2f}x, "
          f"{'met' if ratio <= GOAL else 'MISSED'}")


def show_where(ops: list[UniqueOp], warm: Pass, home: Path, artifacts: ArtifactStore, timeout: float) -> None:
    """The warm pass's programs on ttsim again, from here: each phase's seconds, summed over the ops."""
    phases: Counter = Counter()
    backend = TtsimBackend(home, home / "scratch-where")
    (home / "scratch-where").mkdir(exist_ok=True)
    try:
        for op in ops:
            compiled = warm.results[op.signature].compile
            if compiled is None or "ttnn_runtime" not in compiled.artifacts:
                continue
            inputs = make_inputs(op.op_name, op.inputs, op.operands, op.attributes, op.signature, 0,
                                 known=upstream.load(op, artifacts))
            phases.update(backend.run(load_program(artifacts.read_text(compiled.artifacts["ttnn_runtime"])), inputs,
                                      timeout).phases)
    finally:
        backend.close()
    table = Figures("where ttsim's part goes (seconds over the ops; 'op KIND' are parts of 'ops')", ["phase", "seconds"])
    for phase, seconds in phases.most_common(25):
        table.add(phase, seconds)
    table.show()


@dataclass
class WholeRuns:
    """One model whole: with the model alone, then on ttsim twice (kernels built on the first)."""

    model: WholeModelResult
    first: WholeModelResult
    warm: WholeModelResult
    model_wall: float
    first_wall: float
    warm_wall: float


def run_wholes(models: list[str], home: Path, chip: str, timeout: float) -> dict[str, WholeRuns]:
    thresholds = load_thresholds()
    alone = AnalysisSettings(thresholds=thresholds, device=DeviceOptions(backend="model", ttsim_timeout_s=timeout))
    on_ttsim = alone.model_copy(update={"device": alone.device.model_copy(update={"backend": "ttsim"})})
    runs: dict[str, WholeRuns] = {}
    with OpWorker(resolve(chip).path, home, chip=chip, name="bench-whole") as worker:
        for name in models:
            graph = load_model(name)
            limit = timeout * 10 + 600  # ttsim's own limit for a whole program, and the model's run beside it
            timed = [_timed_whole(worker, graph, settings, limit) for settings in (alone, on_ttsim, on_ttsim)]
            runs[name] = WholeRuns(*(r for r, _ in timed), *(w for _, w in timed))
            print(f"{name}: {_whole_line(runs[name])}", flush=True)
    return runs


def _timed_whole(worker: OpWorker, graph, settings: AnalysisSettings, limit: float) -> tuple[WholeModelResult, float]:
    started = time.perf_counter()
    result = worker.analyze_whole(graph, settings, timeout=limit)
    return result, time.perf_counter() - started


def _whole_line(r: WholeRuns) -> str:
    ttsim = r.warm.ttsim
    outcome = ttsim.outcome.value if ttsim else r.warm.status.value
    pcc = f"{ttsim.pcc:.5f}" if ttsim and ttsim.pcc is not None else "-"
    return f"model {r.model.status.value} pcc {r.model.pcc}, ttsim {outcome} pcc {pcc} " \
           f"({r.model_wall:.1f} / {r.first_wall:.1f} / {r.warm_wall:.1f} s)"


def show_wholes(runs: dict[str, WholeRuns], chip: str) -> None:
    table = Figures(f"whole models on ttsim ({chip}): pcc against the framework, and the accuracy trace",
                    ["model", "model: status, pcc", "ttsim: outcome", "ttsim pcc", "trace on ttsim's values",
                     "the model's own trace", "ttsim message"])
    for name, r in runs.items():
        ttsim = r.warm.ttsim
        table.add(name, f"{r.model.status.value}, {r.model.pcc:.5f}" if r.model.pcc is not None else r.model.status.value,
                  ttsim.outcome.value if ttsim else f"none: {r.warm.status.value}",
                  f"{ttsim.pcc:.5f}" if ttsim and ttsim.pcc is not None else "-",
                  in_brief(ttsim.accuracy_trace) if ttsim and ttsim.accuracy_trace else "-",
                  in_brief(r.model.accuracy_trace) if r.model.accuracy_trace else "-",
                  ((ttsim.message or "") if ttsim else (r.warm.message or ""))[:200])
    table.show()
    time_table = Figures("whole models, time (seconds of wall per run, one worker)",
                         ["model", "with the model", "on ttsim, first", "on ttsim, kernels built",
                          "of it ttsim's run", "against the model", "cold kernel builds (first less warm)"])
    for name, r in runs.items():
        ttsim_s = r.warm.ttsim.seconds if r.warm.ttsim else float("nan")
        time_table.add(name, r.model_wall, r.first_wall, r.warm_wall, ttsim_s, f"{r.warm_wall / r.model_wall:.2f}x",
                       r.first_wall - r.warm_wall)
    time_table.show()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=SMALL_ZOO)
    parser.add_argument("--chip", default="p150")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per op on ttsim")
    parser.add_argument("--where", action="store_true", help="also time each phase of ttsim's part")
    parser.add_argument("--whole", action="store_true", help="instead: each model whole, with the model and on ttsim")
    args = parser.parse_args()

    if args.whole:
        home = Path(tempfile.mkdtemp(prefix="bench-ttsim-whole-"))
        show_wholes(run_wholes(args.models, home, args.chip, args.timeout), args.chip)
        return

    home = Path(tempfile.mkdtemp(prefix="bench-ttsim-"))
    os.environ["OPBYOP_TTSIM_KERNELS"] = str(home / "kernels")  # empty: the first pass builds every kernel
    artifacts = ArtifactStore(home / "artifacts")
    prepared = prepare(args.models, artifacts=artifacts)
    for name, error in prepared.errors.items():
        print(f"{name}: not analysed: {error}")
    ops = prepared.unique
    print(f"{len(ops)} unique ops from {len(prepared.graphs)} models, workspace {home}")
    cold = run_pass("ttsim, cold kernel cache", ops, home, args.chip, "ttsim", args.timeout)
    model = run_pass("device model", ops, home, args.chip, "model", args.timeout)
    warm = run_pass("ttsim, kernels built", ops, home, args.chip, "ttsim", args.timeout)

    show_models(prepared, warm.results, args.chip)
    show_agreement(warm.results, artifacts)
    show_stops(warm.results)
    show_time(cold, model, warm)
    if args.where:
        show_where(ops, warm, home, artifacts, args.timeout)


def _counts(c: Counter) -> str:
    return ", ".join(f"{n} {k}" for k, n in c.most_common())


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


if __name__ == "__main__":
    main()
