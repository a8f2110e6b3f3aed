"""What judging a wrong number costs: device time per op with the three-way judgment on and off,
side by side, in one run.

Every unique op of the given StableHLO files and zoo models is compiled (tt-mlir, p150 descriptor),
run on the simulated device and compared with XLA:CPU. `off` is what an op costs without the
judgment (device run + golden comparison); `on` adds the judgment where the device and XLA disagree
(the reference reading and the simulator with its chip numerics off). The goal: on / off <= 1.3 over
the set (the judgment only runs on failures). The default set holds failures of every kind: a value
lost to narrowing (miscompiled), a LoFi matmul judged at tight tolerances (the chip's numerics),
and passing scatter/gather/fori_loop programs and the mlp model's ops.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_verdicts.py [files or models...]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
DEFAULT = [str(DATA / n) for n in ("wide_constant_and_nan_max.mlir", "dot_f32_lofi.mlir", "scatter_add_middle_dim.mlir",
                                   "gather_middle_dim.mlir", "jax_fori_loop.mlir")] + ["mlp"]
# Tolerances under which the LoFi matmul's error is a failure (f32 exact readings still pass).
TIGHT = {"dot_f32_lofi": dict(pcc=0.99, atol=1e-4, rtol=1e-4, require_allclose=True)}
REPEAT = 3


def main(targets: list[str]) -> None:
    from opbyop.compiler.system_desc import resolve
    from opbyop.jaxenv import prepare_jax

    prepare_jax(resolve("p150").path)
    from common import Figures, console

    from opbyop.artifacts import ArtifactStore
    from opbyop.analysis.attribution import judge
    from opbyop.compiler.plugin import TTCompiler
    from opbyop.config import AnalysisSettings, CompilerOptions, load_thresholds
    from opbyop.device.simulator import DeviceSimulator
    from opbyop.golden import upstream
    from opbyop.golden.compare import DtypeThreshold, Thresholds, compare, verdict
    from opbyop.golden.inputs import make_inputs
    from opbyop.golden.xla_cpu import XlaCpu
    from opbyop.pipeline import prepare

    scratch = Path(tempfile.mkdtemp(prefix="bench-verdicts-"))
    artifacts = ArtifactStore(scratch / "artifacts")
    compiler, golden, simulator = TTCompiler(), XlaCpu(), DeviceSimulator()
    thresholds = load_thresholds()
    figures = Figures("device time per op, judgment off / on (median of 3 runs, ms)",
                      ["source", "op", "status", "off ms", "on ms", "on / off", "verdict"])
    total_off = total_on = 0.0
    for target in targets:
        name = Path(target).stem
        options = CompilerOptions(math_fidelity="lofi") if name in TIGHT else CompilerOptions()
        limits = Thresholds(default=DtypeThreshold(**TIGHT[name])) if name in TIGHT else thresholds
        run = prepare([target], artifacts=artifacts)
        for op in run.unique:
            outcome = compiler.compile(op.module_text, options, scratch / "compile", artifacts)
            if not outcome.ok:
                continue
            binary = simulator.load(artifacts.read_text(outcome.artifacts["ttnn_runtime"]))
            inputs = make_inputs(op.op_name, op.inputs, op.operands, op.attributes, op.signature, 0,
                                 known=upstream.load(op, artifacts))
            try:
                expected = golden.run(op.module_text, inputs, key=op.signature)
            except Exception:  # no reference for this op: nothing to judge
                continue
            dtypes = [o.dtype for o in op.outputs]
            offs, ons, status = [], [], "success"
            for _ in range(REPEAT):
                started = time.perf_counter()
                try:
                    outputs, _ = simulator.run_binary(binary, inputs)
                except Exception as e:
                    status = type(e).__name__
                    break
                comparison = compare(outputs, expected, dtypes, limits)
                off = time.perf_counter() - started
                if not comparison.passed:
                    judgment = judge(binary, inputs, expected, dtypes, limits, simulator, verdict(comparison))
                    status = f"{judgment.status.value}: {judgment.message}"
                offs.append(off)
                ons.append(time.perf_counter() - started)
            if not offs:
                continue
            off_ms, on_ms = 1000 * sorted(offs)[len(offs) // 2], 1000 * sorted(ons)[len(ons) // 2]
            total_off, total_on = total_off + off_ms, total_on + on_ms
            kind, _, message = status.partition(": ")
            figures.add(name, op.op_name, kind, off_ms, on_ms, on_ms / off_ms, message[:110])
    figures.add("all", "", "", total_off, total_on, total_on / total_off if total_off else float("nan"), "goal <= 1.3")
    figures.show()
    console.print(f"settings: {AnalysisSettings().device.placement_policy}, scratch {scratch}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main(sys.argv[1:] or DEFAULT)
