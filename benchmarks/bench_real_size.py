"""Issue 18's figures: op by op at real LLM sizes, memory and time per model size in one run.

    PYTHONPATH=. /work/bin/heavy .venv/bin/python benchmarks/bench_real_size.py [--models llama-3.1-8b ...]
        [--layers N] [--baseline llama-3.2-1b] [--chip p150]

Each model is a llama-style decoder at its published dimensions (benchmarks/real_size_models.py),
lowered from JAX with jax.ShapeDtypeStruct arguments: no weight exists anywhere. Its module is split
and deduplicated here, and every unique op goes through compile, the simulated device and XLA:CPU in
one op worker (the analysis path; a .mlir file through the CLI still draws values for @main's
arguments). Peak RSS is of this process and all its children (the op worker), sampled with psutil.
`--baseline` runs the same ops with another checkout's code in the worker (PYTHONPATH), e.g. main's.
Goals: llama-3.1-8B <= 5 min and <= 6 GB; llama-3.1-70B <= 8 min and <= 10 GB.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from common import Figures

from real_size_models import CONFIGS, stablehlo

from opbyop.jaxenv import prepare_jax

prepare_jax()

from opbyop.compiler.system_desc import resolve  # noqa: E402
from opbyop.config import AnalysisSettings, load_thresholds  # noqa: E402
from opbyop.ir.dedupe import dedupe  # noqa: E402
from opbyop.ir.split import split_module  # noqa: E402
from opbyop.worker.process import OpWorker  # noqa: E402


class PeakRss:
    """The largest summed RSS of this process and its descendants, sampled every 50 ms."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        me = psutil.Process()
        total = 0
        for p in [me, *me.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self._sample())

    def reset(self) -> None:
        self.peak = self._sample()

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class OpFigure:
    op: str
    status: str
    seconds: float
    peak_rss: int


@dataclass
class ModelFigures:
    name: str
    parameters: int = 0
    ops: int = 0
    unique: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    split_s: float = 0.0
    wall_s: float = 0.0
    peak_rss: int = 0
    per_op: list[OpFigure] = field(default_factory=list)
    error: str = ""


def run_model(name: str, layers: int | None, chip, rss: PeakRss, workspace: Path, env: dict[str, str] | None,
              label: str) -> ModelFigures:
    config = CONFIGS[name]
    layers = config.layers if layers is None else layers
    figures = ModelFigures(f"{name} ({layers} layers){label}", parameters=config.parameters())
    rss.reset()
    started = time.perf_counter()
    try:
        split = split_module(stablehlo(config, layers), name)
        unique = dedupe(split.ops)
        figures.ops, figures.unique = len(split.ops), len(unique)
        figures.split_s = time.perf_counter() - started
        settings = AnalysisSettings(thresholds=load_thresholds())
        with OpWorker(chip.path, workspace, chip=chip.chip, name=f"bench-{name}", env=env) as worker:
            for op in unique:
                before = rss.peak
                rss.peak = rss._sample()
                t = time.perf_counter()
                result = worker.analyze(op, settings, timeout=600)
                shapes = ", ".join(str(i) for i in op.inputs)
                figures.per_op.append(OpFigure(f"{op.op_name} ({shapes})", result.status.value,
                                               time.perf_counter() - t, rss.peak))
                rss.peak = max(before, rss.peak)
                figures.statuses[result.status.value] = figures.statuses.get(result.status.value, 0) + 1
    except Exception as e:  # a model that breaks still leaves the others' figures
        figures.error = f"{type(e).__name__}: {e}"[:200]
    figures.wall_s = time.perf_counter() - started
    figures.peak_rss = rss.peak
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=["llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b"])
    parser.add_argument("--layers", type=int, default=None, help="decoder layers per model (default: the model's own)")
    parser.add_argument("--baseline", nargs="*", default=[], help="models to run again with --baseline-path's code")
    parser.add_argument("--baseline-path", default="/work/main")
    parser.add_argument("--chip", default="p150")
    args = parser.parse_args()

    chip = resolve(args.chip)
    workspace = Path(tempfile.mkdtemp(prefix="bench-real-size-"))
    runs: list[ModelFigures] = []
    with PeakRss() as rss:
        for name in args.models:
            runs.append(run_model(name, args.layers, chip, rss, workspace, None, ""))
        for name in args.baseline:
            env = {"PYTHONPATH": args.baseline_path}
            runs.append(run_model(name, args.layers, chip, rss, workspace, env, f" [code of {args.baseline_path}]"))

    table = Figures("real-size models op by op (compile + device + golden, one op worker)",
                    ["model", "parameters", "weights bf16 GB", "ops", "unique", "statuses", "split s", "wall s",
                     "peak RSS GB (all processes)", "error"])
    for r in runs:
        table.add(r.name, f"{r.parameters / 1e9:.2f}B", f"{2 * r.parameters / 1e9:.1f}", r.ops, r.unique,
                  " ".join(f"{k}={v}" for k, v in sorted(r.statuses.items())), f"{r.split_s:.1f}", f"{r.wall_s:.1f}",
                  f"{r.peak_rss / 1e9:.2f}", r.error)
    table.show()
    for r in runs:
        slow = Figures(f"five slowest ops of {r.name}", ["op", "status", "seconds", "peak RSS GB during the op"])
        for f in sorted(r.per_op, key=lambda f: -f.seconds)[:5]:
            slow.add(f.op[:110], f.status, f"{f.seconds:.1f}", f"{f.peak_rss / 1e9:.2f}")
        slow.show()


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
