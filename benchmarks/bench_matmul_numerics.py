"""The device model's matmul above its bit-exact limit: seconds per bf16 matmul, by math fidelity and
accumulation, and whether its bits depend on the order its products are summed in.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_matmul_numerics.py [--size 2048] [--repeat 3]
        [--baseline-path CHECKOUT]

Each case is `opbyop.device.formats.fidelity_matmul` on random bf16 operands of size^3 (the BLAS
path: far above EXACT_PRODUCTS), timed as the median of --repeat calls in a process of its own.
"order-free" runs the same matmul with K permuted within each tile of 32 (another order of the
sum; a tile's products stay in their tile, whose bf16 rounding is the chip's) and says whether the
bits are the same. `--baseline-path` runs every case again with another checkout's code, in the
same run, the cases taking turns.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from common import Figures

CASES = [(fidelity, fp32_acc) for fp32_acc in (True, False) for fidelity in ("lofi", "hifi2", "hifi4")]

# Run in a child in the checkout, so that its code is the one imported.
CHILD = """
import json, statistics, sys, time
import numpy as np
from opbyop.device import formats
from opbyop.device.formats import BF16, fidelity_matmul
size, repeat, fidelity, fp32_acc = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
rng = np.random.default_rng(0)
a = rng.standard_normal((size, size)).astype(BF16)
b = rng.standard_normal((size, size)).astype(BF16)
times = []
for _ in range(repeat):
    start = time.perf_counter()
    out = fidelity_matmul(a, b, fidelity, fp32_acc)
    times.append(time.perf_counter() - start)
order = np.concatenate([start + rng.permutation(min(32, size - start)) for start in range(0, size, 32)])
same = np.array_equal(out.view(np.uint32), fidelity_matmul(a[:, order], b[order], fidelity, fp32_acc).view(np.uint32))
print(json.dumps({"seconds": statistics.median(times), "order_free": bool(same), "code": formats.__file__}))
"""


def measure(code: Path, size: int, repeat: int, fidelity: str, fp32_acc: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(size), str(repeat), fidelity, "1" if fp32_acc else "0"],
                         env=env, cwd=code, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=2048, help="M = N = K")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline-path", type=Path, default=None, help="another checkout of opbyop")
    args = parser.parse_args()
    trees = [("this tree", Path(__file__).resolve().parents[1])]
    if args.baseline_path:
        trees.append((f"baseline {args.baseline_path}", args.baseline_path.resolve()))
    figures = Figures(f"bf16 matmul {args.size}^3 on the device model (median of {args.repeat})",
                      ["fidelity", "accumulation", "code", "seconds", "order-free"])
    for fidelity, fp32_acc in CASES:
        for label, code in trees:
            result = measure(code, args.size, args.repeat, fidelity, fp32_acc)
            assert result["code"].startswith(str(code)), f"{label} imported {result['code']}"
            figures.add(fidelity, "f32" if fp32_acc else "bf16", label, result["seconds"], result["order_free"])
    figures.show()


if __name__ == "__main__":
    main()
