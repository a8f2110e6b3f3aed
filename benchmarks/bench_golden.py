"""Golden reference cost per op: XLA:CPU's compile against its execution, and what cuts the compile.

For each configuration, in a fresh process (XLA reads its flags once): every unique op of the
models is compiled and executed on its deterministic inputs; the script prints median and total
compile and execute times, and how far the outputs of every configuration are from the baseline's (a faster
compile that changed the reference would be no gain).

Configurations: `default` (XLA's own flags, the baseline), `fast` (opbyop.golden.xla_cpu.FAST_FLAGS:
no LLVM backend optimisation for one-op programs), `cached` (executables from the on-disk cache a
previous run of the same signatures wrote: what a warm run pays).

    .venv/bin/python benchmarks/bench_golden.py [models...]      (default: resnet50)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def measure(models: list[str], cache_dir: str | None, outputs_path: str) -> dict:
    """In this process: compile + execute every unique op; per-op seconds (outputs to an npz)."""
    from opbyop.jaxenv import prepare_jax

    prepare_jax()
    from common import zoo_ops
    from opbyop.golden.inputs import make_inputs
    from opbyop.golden.xla_cpu import XlaCpu

    _, unique = zoo_ops(models)
    golden = XlaCpu(cache_dir=Path(cache_dir) if cache_dir else None)
    compile_s, compile_cpu, execute_s, arrays = [], [], [], {}
    for op in unique:
        inputs = make_inputs(op.op_name, op.inputs, op.operands, op.attributes, op.signature, 0)
        start, cpu = time.perf_counter(), time.process_time()
        exe = golden.executable(op.module_text, op.signature)
        compiled = time.perf_counter()
        compile_cpu.append(time.process_time() - cpu)
        outputs = golden.execute(exe, inputs)
        compile_s.append(compiled - start)
        execute_s.append(time.perf_counter() - compiled)
        arrays.update({f"{op.signature}/{i}": np.asarray(o, dtype=np.float64) for i, o in enumerate(outputs)})
    np.savez(outputs_path, **arrays)
    return {"ops": len(unique), "compile": compile_s, "compile_cpu": compile_cpu, "execute": execute_s,
            "compiles": golden.compiles}


def differences(path: str, baseline: str) -> tuple[int, float]:
    """(outputs not bit-equal to the baseline's, the largest difference relative to the output's scale)."""
    with np.load(path) as got, np.load(baseline) as want:
        differing, worst = 0, 0.0
        for key in want.files:
            a, b = got[key], want[key]
            if not np.array_equal(a, b, equal_nan=True):
                differing += 1
                scale = float(np.nanmax(np.abs(b))) if b.size else 1.0
                worst = max(worst, float(np.nanmax(np.abs(a - b))) / (scale or 1.0))
        return differing, worst


def run_config(models: list[str], cache_dir: str | None, outputs: str, env: dict[str, str]) -> dict:
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); from bench_golden import measure; "
            f"print('RESULT' + json.dumps(measure({models!r}, {cache_dir!r}, {outputs!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env},
                         cwd=ROOT, check=True).stdout
    return json.loads(out[out.rindex("RESULT") + len("RESULT"):])


def main() -> None:
    from common import Figures, median_ms
    from opbyop.golden.xla_cpu import FAST_FLAGS, OPBYOP_XLA_FLAGS

    models = sys.argv[1:] or ["resnet50"]
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "cache")
        configs = [
            ("default (baseline)", None, {OPBYOP_XLA_FLAGS: ""}),
            ("fast flags", None, {OPBYOP_XLA_FLAGS: FAST_FLAGS}),
            ("fast flags, cache written", cache, {OPBYOP_XLA_FLAGS: FAST_FLAGS}),
            ("fast flags, cache read (warm run)", cache, {OPBYOP_XLA_FLAGS: FAST_FLAGS}),
        ]
        table = None
        baseline = str(Path(tmp) / "0.npz")
        for i, (name, cache_dir, env) in enumerate(configs):
            outputs = str(Path(tmp) / f"{i}.npz")
            r = run_config(models, cache_dir, outputs, env)
            if table is None:
                table = Figures(f"golden on XLA:CPU, {r['ops']} unique ops of {', '.join(models)}",
                                ["configuration", "compile median ms", "compile total s", "compile CPU s",
                                 "execute median ms",
                                 "execute total s", "XLA compiles", "outputs not bit-equal", "max rel. difference"])
            differing, worst = differences(outputs, baseline)
            table.add(name, median_ms(r["compile"]), sum(r["compile"]), sum(r["compile_cpu"]),
                      median_ms(r["execute"]), sum(r["execute"]),
                      r["compiles"], differing, worst)
    table.show()


if __name__ == "__main__":
    main()
