"""One mixture-of-experts layer at real size, its experts exported in each form, their ops analysed.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_experts.py [--models qwen3-30b-a3b ...]
        [--forms grouped-dense every-expert capacity] [--analyse FORM ...] [--layers 1] [--timeout 120]

Each model is the zoo's real-size configuration (meta-device weights, bf16, sequence 128) with
`--layers` layers. Per form: the export and split time, the expert ops (those whose framework module
is the layer's experts), their occurrences and unique count, and each unique expert op through
compile, the simulated device and XLA:CPU in one op worker, with its status and seconds (only the
forms given to --analyse, all by default; the others are exported and split only); the expert ops'
multiply-adds per layer (every occurrence's dot_general); peak RSS of this process and all its
children. The dense-routed form (grouped-dense) multiplies every routed row (tokens*top_k) by every
expert; every-expert runs every expert over each token once, in chunks; capacity runs each expert
over its slots only (capacity-FACTOR names another factor than the default).

Qwen3-30B-A3B, one layer, p150, two shared cores: grouped-dense 93 unique expert ops in 819 s, its two
matmuls (128x1024x2048 by 128x2048x1536; 128x1024x768 by 128x768x2048) without a result in 120 s;
every-expert 40 unique expert ops, all success, in 29 s (largest: 24576x2048 by 2048x128, 4.6 s).
In a later run (--analyse every-expert capacity, 77 s in all), per layer: grouped-dense 618.5 G
multiply-adds; every-expert 77.3 G, 40 unique expert ops all success in 21.8 s, peak 1.97 GB; capacity
6.7 G, 70 unique expert ops all success in 21.2 s (largest: 16x1536x2048 by 16x2048x10, 2.6 s),
peak 2.56 GB.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench_real_size import peak_rss
from common import Figures, PeakMemory

from opbyop.compiler.system_desc import resolve
from opbyop.config import AnalysisSettings, Zoo, ZooEntry, load_thresholds, load_zoo
from opbyop.frontends.experts import CAPACITY, EVERY_EXPERT, GROUPED
from opbyop.pipeline import prepare
from opbyop.records import OpRecord
from opbyop.worker.process import OpWorker


@dataclass
class FormFigures:
    name: str
    export_s: float = 0.0
    ops: int = 0
    expert_ops: int = 0
    expert_unique: int = 0
    multiply_adds: int = 0  # the expert ops' dot_generals, every occurrence, per layer
    statuses: dict[str, int] = field(default_factory=dict)
    analyse_s: float = 0.0
    slowest: list[tuple[str, str, float]] = field(default_factory=list)
    peak_rss: int = 0
    error: str = ""


def entry(name: str, form: str, layers: int) -> ZooEntry:
    base = load_zoo().get(name)
    kwargs = {**base.kwargs, "layers": layers, "experts": form}
    return base.model_copy(update={"name": f"{name}-{form}", "kwargs": kwargs})


def multiply_adds(record: OpRecord) -> int:
    """A dot_general's multiply-adds: each result element sums over the contracting dimensions."""
    if record.op_name != "stablehlo.dot_general" or not record.outputs or not record.operands:
        return 0
    contracting = record.attributes.get("dot_dimension_numbers", {}).get("lhs_contracting_dimensions", [])
    lhs = record.operands[0].tensor.shape
    return math.prod(record.outputs[0].shape) * math.prod(lhs[d] for d in contracting)


def measure(name: str, form: str, layers: int, chip, workspace: Path, timeout: float, rss: PeakMemory,
            analyse: bool = True) -> FormFigures:
    figures = FormFigures(f"{name} ({layers} layer{'s' * (layers > 1)}) {form}")
    rss.reset()
    started = time.perf_counter()
    zoo_entry = entry(name, form, layers)
    run = prepare([zoo_entry.name], zoo=Zoo(models=[zoo_entry]))
    figures.export_s = time.perf_counter() - started
    if run.errors:
        figures.error = "; ".join(run.errors.values())[:300]
        return figures
    experts = {r.signature for r in run.records if ".experts" in (r.provenance.module_path or "")}
    figures.ops = len(run.records)
    figures.expert_ops = sum(r.signature in experts for r in run.records)
    figures.multiply_adds = sum(multiply_adds(r) for r in run.records if r.signature in experts) // layers
    unique = [op for op in run.unique if op.signature in experts]
    figures.expert_unique = len(unique)
    if not analyse:
        figures.peak_rss = rss.peak
        return figures
    settings = AnalysisSettings(thresholds=load_thresholds())
    analysed = time.perf_counter()
    with OpWorker(chip.path, workspace, chip=chip.chip, name=f"bench-experts-{form}") as worker:
        for op in unique:
            t = time.perf_counter()
            result = worker.analyze(op, settings, timeout=timeout)
            seconds = time.perf_counter() - t
            status = result.status.value
            figures.statuses[status] = figures.statuses.get(status, 0) + 1
            shapes = " x ".join("x".join(map(str, i.shape)) for i in op.inputs)
            figures.slowest.append((f"{op.op_name} {shapes}", status if status == "success" else
                                    f"{status}: {(result.message or '')[:80]}", seconds))
    figures.analyse_s = time.perf_counter() - analysed
    figures.peak_rss = rss.peak
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=["qwen3-30b-a3b"])
    parser.add_argument("--forms", nargs="*", default=[GROUPED, EVERY_EXPERT, CAPACITY])
    parser.add_argument("--analyse", nargs="*", default=None,
                        help="the forms whose expert ops are analysed (default: every form); the others are split only")
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per op (the CLI's default)")
    parser.add_argument("--chip", default="p150")
    args = parser.parse_args()
    chip = resolve(args.chip)
    workspace = Path(tempfile.mkdtemp(prefix="bench-experts-"))
    runs: list[FormFigures] = []
    with peak_rss() as rss:
        for name in args.models:
            for form in args.forms:
                analyse = args.analyse is None or form in args.analyse
                runs.append(measure(name, form, args.layers, chip, workspace, args.timeout, rss, analyse))
    table = Figures("mixture-of-experts layers at real size: the experts' ops in each form",
                    ["model, form", "export+split s", "ops", "expert ops", "expert unique",
                     "expert multiply-adds per layer (G)", "statuses", "expert ops analysed s",
                     "peak RSS GB (all processes)", "error"])
    for r in runs:
        table.add(r.name, f"{r.export_s:.1f}", r.ops, r.expert_ops, r.expert_unique, f"{r.multiply_adds / 1e9:.2f}",
                  " ".join(f"{k}={v}" for k, v in sorted(r.statuses.items())) or "not analysed", f"{r.analyse_s:.1f}",
                  f"{r.peak_rss / 1e9:.2f}", r.error)
    table.show()
    for r in runs:
        slow = Figures(f"five slowest expert ops of {r.name}", ["op", "status", "seconds"])
        for op, status, seconds in sorted(r.slowest, key=lambda f: -f[2])[:5]:
            slow.add(op[:110], status, f"{seconds:.1f}")
        slow.show()


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
