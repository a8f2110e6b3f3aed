"""What a CPU-only opbyop process pays to start JAX: the CLI, the flow, golden, the tests.

    .venv/bin/python benchmarks/bench_jax_start.py [--repeat 5]

Each sample is a fresh process: import opbyop.jaxenv, prepare_jax() (CPU only), one XLA:CPU
computation. Baseline in the same run: the same with JAX's PJRT plugin discovery left to run,
which loads libtt (the tt plugin) although the process never uses the tt platform.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from common import Figures

ROOT = Path(__file__).resolve().parents[1]
_SAMPLE = """
import json, sys, time
t0 = time.perf_counter()
import opbyop.jaxenv as jaxenv
if sys.argv[1] == "discovery":
    jaxenv._skip_plugin_discovery = lambda: False  # the baseline: JAX discovers (and loads) every plugin
jaxenv.prepare_jax()
t1 = time.perf_counter()
import jax.numpy as jnp
float(jnp.arange(4.0).sum())
t2 = time.perf_counter()
import jax._src.xla_bridge as bridge
print(json.dumps({"prepare": t1 - t0, "first": t2 - t1, "tt": "tt" in bridge._backend_factories}))
"""


def sample(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _SAMPLE, mode], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    figures = Figures(f"CPU-only JAX start, median of {args.repeat} fresh processes (wall s)",
                      ["plugin discovery", "prepare_jax", "first computation", "total", "tt plugin loaded"])
    for mode in ("discovery", "skipped"):
        runs = [sample(mode) for _ in range(args.repeat)]  # interleaving would mix page-cache effects
        prepare = statistics.median(r["prepare"] for r in runs)
        first = statistics.median(r["first"] for r in runs)
        figures.add(mode if mode == "skipped" else "runs (baseline)", prepare, first, prepare + first,
                    str(any(r["tt"] for r in runs)))
    figures.show()


if __name__ == "__main__":
    main()
