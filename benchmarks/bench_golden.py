"""Golden reference cost per op: XLA:CPU's compile against its execution, and what cuts the compile.

For each configuration, in a fresh process (XLA reads its flags once): every unique op of the
models is compiled and executed on its deterministic inputs; the script prints median and total
compile and execute times, and checks that the outputs of every configuration equal the baseline's
(a faster compile that changes the reference would be no gain).

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


def measure(models: list[str], cache_dir: str | None) -> dict:
    """In this process: compile + execute every unique op; per-op seconds and output digests."""
    from opbyop.jaxenv import prepare_jax

    prepare_jax()
    from benchmarks.common import zoo_ops
    from opbyop.golden.inputs import make_inputs
    from opbyop.golden.xla_cpu import XlaCpu

    _, unique = zoo_ops(models)
    golden = XlaCpu(cache_dir=Path(cache_dir) if cache_dir else None)
    compile_s, execute_s, digests = [], [], {}
    for op in unique:
        inputs = make_inputs(op.op_name, op.inputs, op.operands, op.attributes, op.signature, 0)
        start = time.perf_counter()
        exe = golden.executable(op.module_text, op.signature)
        compiled = time.perf_counter()
        outputs = golden.execute(exe, inputs)
        compile_s.append(compiled - start)
        execute_s.append(time.perf_counter() - compiled)
        digests[op.signature] = [np.asarray(o).tobytes().hex()[:64] + str(np.asarray(o).shape) for o in outputs]
    return {"ops": len(unique), "compile": compile_s, "execute": execute_s, "digests": digests,
            "compiles": golden.compiles}


def run_config(name: str, models: list[str], cache_dir: str | None, env: dict[str, str]) -> dict:
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); from benchmarks.bench_golden import measure; "
            f"print('RESULT' + json.dumps(measure({models!r}, {cache_dir!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env},
                         cwd=ROOT, check=True).stdout
    return json.loads(out[out.rindex("RESULT") + len("RESULT"):])


def main() -> None:
    from benchmarks.common import Figures, median_ms
    from opbyop.golden.xla_cpu import FAST_FLAGS, OPBYOP_XLA_FLAGS

    models = sys.argv[1:] or ["resnet50"]
    with tempfile.TemporaryDirectory() as cache:
        configs = [
            ("default (baseline)", None, {OPBYOP_XLA_FLAGS: ""}),
            ("fast flags", None, {OPBYOP_XLA_FLAGS: FAST_FLAGS}),
            ("fast flags, cache written", cache, {OPBYOP_XLA_FLAGS: FAST_FLAGS}),
            ("fast flags, cache read (warm run)", cache, {OPBYOP_XLA_FLAGS: FAST_FLAGS}),
        ]
        results = {name: run_config(name, models, d, env) for name, d, env in configs}
    base = results["default (baseline)"]
    table = Figures(f"golden on XLA:CPU, {base['ops']} unique ops of {', '.join(models)}",
                    ["configuration", "compile median ms", "compile total s", "execute median ms",
                     "execute total s", "XLA compiles", "outputs equal baseline"])
    for name, r in results.items():
        same = sum(r["digests"][k] == v for k, v in base["digests"].items())
        table.add(name, median_ms(r["compile"]), sum(r["compile"]), median_ms(r["execute"]), sum(r["execute"]),
                  r["compiles"], f"{same}/{len(base['digests'])}")
    table.show()


if __name__ == "__main__":
    main()
