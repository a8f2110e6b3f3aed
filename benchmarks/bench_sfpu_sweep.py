"""The per-function sweep of the vector unit (SFPU): each function this compiler emits, over every bf16
value and over a dense f32 sample, on ttsim and on opbyop's model, this checkout's model beside a
baseline checkout's.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_sfpu_sweep.py --baseline-path CHECKOUT [--dtypes bf16 f32]

Each function's single-op module (opbyop.device.ttsim.sweep.CASES) is compiled once and run once on
ttsim (one ttnn call over 64 tiles); the same program then runs on each checkout's model, in a
process with PYTHONPATH set to that checkout. Printed per function and data type: the outputs
bit-equal to ttsim's (of 65,536) and the largest distance in units in the last place of the output's
format, for this checkout and the baseline, and the model's time for the sweep. Requires `make ttsim`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def inner(folder: Path) -> None:
    """Run in the checkout under test: each saved program on the model, its outputs saved beside it.
    Only the simulator is imported: a baseline checkout has nothing else of this benchmark."""
    from opbyop.device.simulator import DeviceSimulator

    simulator = DeviceSimulator()
    seconds = {}
    for program in sorted(folder.glob("*.ttnn.mlir")):
        key = program.name.removesuffix(".ttnn.mlir")
        with np.load(folder / f"{key}.inputs.npz") as data:
            operands = [data[f"in{i}"] for i in range(len(data.files))]
        started = time.perf_counter()
        try:
            outputs, _ = simulator.run_binary(simulator.load(program.read_text()), operands)
            out = np.asarray(outputs[0])
            out = out.astype(np.float32) if out.dtype.kind not in "iub" and out.dtype != np.float32 else out
            np.save(folder / f"{key}.model.npy", out)
        except Exception as e:  # a model that does not run the op: its words in the table
            (folder / f"{key}.model.error").write_text(f"{type(e).__name__}: {e}")
        seconds[key] = time.perf_counter() - started
    (folder / "seconds.json").write_text(json.dumps(seconds))


def model_outputs(checkout: str, folder: Path) -> None:
    env = {**os.environ, "PYTHONPATH": checkout}
    subprocess.run([sys.executable, __file__, "--inner", str(folder)], env=env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline-path", default=None)
    parser.add_argument("--dtypes", nargs="*", default=["bf16", "f32"])
    parser.add_argument("--inner", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        inner(Path(args.inner))
        return

    from common import Figures

    from opbyop.jaxenv import prepare_jax

    prepare_jax()
    from opbyop.compiler.system_desc import resolve
    from opbyop.config import AnalysisSettings, load_thresholds
    from opbyop.device.ttsim.backend import TtsimBackend
    from opbyop.device.ttsim.sweep import CASES, agreement, inputs
    from opbyop.pipeline import prepare
    from opbyop.records import TtsimOutcome
    from opbyop.workspace import Workspace
    from opbyop.worker.process import OpWorker
    from opbyop.device.program import load_program

    home = Path(tempfile.mkdtemp(prefix="bench-sfpu-sweep-"))
    workspace = Workspace(home)
    settings = AnalysisSettings(thresholds=load_thresholds())
    compile_only = settings.model_copy(update={"run_device": False, "run_golden": False})
    desc = resolve("p150")
    here = str(Path(__file__).resolve().parent.parent)
    checkouts = {"this": here, **({"baseline": args.baseline_path} if args.baseline_path else {})}
    folders = {k: Path(tempfile.mkdtemp(prefix=f"sweep-{k}-")) for k in checkouts}
    ttsim_out: dict[str, np.ndarray] = {}
    failures: dict[str, str] = {}
    backend = TtsimBackend(home, Path(tempfile.mkdtemp()))
    ttsim_s = 0.0
    with OpWorker(desc.path, home, chip=desc.chip, name="sweep") as worker:
        for case in CASES:
            for dtype in args.dtypes:
                key = f"{case.name} [{dtype}]".replace(" ", "_").replace("/", "_")
                path = home / f"{key}.mlir"
                path.write_text(case.module(dtype))
                run = prepare([str(path)], artifacts=workspace.artifacts)
                (op,) = [u for u in run.unique if u.op_name != "stablehlo.constant"]
                compiled = worker.analyze(op, compile_only, timeout=600).compile
                if "ttnn_runtime" not in compiled.artifacts:
                    failures[key] = f"no TTNN program: {compiled.message}"
                    continue
                text = workspace.artifacts.read_text(compiled.artifacts["ttnn_runtime"])
                operands = inputs(case, dtype)
                started = time.perf_counter()
                result = backend.run(load_program(text), operands, timeout=600)
                ttsim_s += time.perf_counter() - started
                if result.run.outcome is not TtsimOutcome.RAN:
                    failures[key] = f"ttsim: {result.run.outcome.value}: {result.run.message}"
                    continue
                ttsim_out[key] = result.outputs[0]
                for folder in folders.values():
                    (folder / f"{key}.ttnn.mlir").write_text(text)
                    np.savez(folder / f"{key}.inputs.npz",
                             **{f"in{i}": np.asarray(x, np.float32) if dtype == "bf16" else x
                                for i, x in enumerate(operands)})
    backend.close()
    for k, checkout in checkouts.items():
        model_outputs(checkout, folders[k])

    table = Figures(f"SFPU sweep against ttsim: outputs bit-equal of 65,536 and the largest distance in ulps "
                    f"of the output's format, this checkout{' and ' + args.baseline_path if args.baseline_path else ''}",
                    ["function", "dtype", "bit-equal (this)", "max ulps (this)",
                     *(["bit-equal (baseline)", "max ulps (baseline)"] if args.baseline_path else [])])
    totals = {k: 0 for k in checkouts}
    for case in CASES:
        for dtype in args.dtypes:
            key = f"{case.name} [{dtype}]".replace(" ", "_").replace("/", "_")
            if key in failures:
                table.add(case.name, dtype, failures[key], "")
                continue
            cells = []
            for k, folder in folders.items():
                if (folder / f"{key}.model.error").exists():
                    cells += ["model failed: " + (folder / f"{key}.model.error").read_text()[:60], ""]
                    continue
                model = np.load(folder / f"{key}.model.npy")
                model = model.astype(np.float32) if dtype == "bf16" and model.dtype.kind == "f" else model
                equal, ulps = agreement(model, ttsim_out[key], bf16=dtype == "bf16")
                totals[k] += equal == model.size
                cells += [f"{equal:,}", str(ulps)]
            table.add(case.name, dtype, *cells)
    table.show()
    seconds = {k: json.loads((folder / "seconds.json").read_text()) for k, folder in folders.items()}
    summary = Figures("sweep totals", ["figure", *checkouts])
    summary.add("functions x dtypes bit-equal on every input", *(f"{totals[k]} of {len(ttsim_out)}" for k in checkouts))
    summary.add("model seconds for the sweep", *(f"{sum(seconds[k].values()):.2f}" for k in checkouts))
    summary.add("ttsim seconds for the sweep", f"{ttsim_s:.1f}", *([""] if args.baseline_path else []))
    summary.show()


if __name__ == "__main__":
    main()
