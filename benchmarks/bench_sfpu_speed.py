"""The device model's vector-unit (SFPU) ops on a large tensor, this checkout beside others, in one run.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_sfpu_speed.py --checkout before=/tmp/base [--checkout ...]
        [--size 1024] [--rounds 3] [--cold]

Each op (exp, tanh, logistic, rsqrt, divide, pow, log) on a SIZE x SIZE tensor of f32 and of bf16
values goes through the model's kernel as the executor calls it (opbyop.device.kernels.KERNELS, the
chip's numerics on), in a process with each checkout's code (PYTHONPATH and working directory set to
it). The figure is the best of `--rounds` calls after a first one; the first call of a process pays
numba's start (and loads each compiled kernel from its cache), reported apart. `--cold` also runs this
checkout with an empty numba cache: what a machine pays once, the first time each kernel compiles.
Inputs: standard normal values (|x| + 0.1 for rsqrt, log and pow's base), rounded to bf16 for bf16.
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

OPS = {"exp": ("ttnn.exp", 1), "tanh": ("ttnn.tanh", 1), "logistic": ("ttnn.sigmoid", 1), "rsqrt": ("ttnn.rsqrt", 1),
       "divide": ("ttnn.divide", 2), "pow": ("ttnn.pow", 2), "log": ("ttnn.log", 1)}
POSITIVE = {"rsqrt", "log", "pow"}


def inner(size: int, rounds: int, out: Path) -> None:
    """In the checkout under test: each op and dtype timed through KERNELS."""
    import numpy as np

    from opbyop.device.kernels import KERNELS, Call
    from opbyop.device.layout import Layout
    from opbyop.device.program import Op, TensorType

    def run(name: str, inputs: list[np.ndarray], storage: str) -> None:
        def tensor_type(x: np.ndarray) -> TensorType:
            return TensorType(tuple(x.shape), storage, Layout(tiled=True, dtype=storage))
        op = Op(name=name, operands=list(range(len(inputs))), results=[len(inputs)],
                operand_types=[tensor_type(x) for x in inputs], result_types=[tensor_type(inputs[0])], attrs={})
        KERNELS[name](Call(op=op, inputs=inputs, out_types=op.result_types))

    rng = np.random.default_rng(0)
    figures: dict[str, dict[str, float]] = {}
    started = time.perf_counter()
    for dtype in ("f32", "bf16"):
        for label, (name, arity) in OPS.items():
            xs = [rng.standard_normal((size, size)).astype(np.float32) for _ in range(arity)]
            if label in POSITIVE:
                xs[0] = np.abs(xs[0]) + np.float32(0.1)
            if dtype == "bf16":
                xs = [(x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32) for x in xs]
            with np.errstate(all="ignore"):
                t = time.perf_counter()
                run(name, xs, dtype)
                first = time.perf_counter() - t
                best = float("inf")
                for _ in range(rounds):
                    t = time.perf_counter()
                    run(name, xs, dtype)
                    best = min(best, time.perf_counter() - t)
            figures[f"{label} {dtype}"] = {"first": first, "best": best}
    out.write_text(json.dumps({"figures": figures, "total": time.perf_counter() - started}))


def run_checkout(path: str, size: int, rounds: int, numba_cache: str | None = None) -> dict:
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    env = {**os.environ, "PYTHONPATH": path}
    if numba_cache:
        env["NUMBA_CACHE_DIR"] = numba_cache  # numba's own setting: where its compiled kernels go
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--inner", str(out), "--size", str(size),
                    "--rounds", str(rounds)], env=env, cwd=path, check=True)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkout", action="append", default=[], metavar="NAME=PATH",
                        help="another checkout to measure beside this one")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="also run this checkout with an empty numba cache")
    parser.add_argument("--inner", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        inner(args.size, args.rounds, Path(args.inner))
        return

    checkouts = dict(c.split("=", 1) for c in args.checkout)
    checkouts["this"] = str(Path(__file__).resolve().parent.parent)
    runs = {name: run_checkout(path, args.size, args.rounds) for name, path in checkouts.items()}
    if args.cold:
        runs["this, cold numba cache"] = run_checkout(checkouts["this"], args.size, args.rounds,
                                                      tempfile.mkdtemp(prefix="numba-cold-"))
    from common import Figures

    names = list(runs)
    first = names[0]
    table = Figures(f"SFPU ops on a {args.size}x{args.size} tensor through the model's kernels: ms, best of "
                    f"{args.rounds} (first call of the process in brackets)",
                    ["op", *names, *(f"{n} / {first}" for n in names[1:])])
    for key in runs[first]["figures"]:
        cells = [f"{1000 * runs[n]['figures'][key]['best']:.1f} ({1000 * runs[n]['figures'][key]['first']:.0f})"
                 for n in names]
        ratios = [f"{runs[n]['figures'][key]['best'] / runs[first]['figures'][key]['best']:.1f}" for n in names[1:]]
        table.add(key, *cells, *ratios)
    table.add("whole run, s", *(f"{runs[n]['total']:.1f}" for n in names), *([""] * (len(names) - 1)))
    table.show()


if __name__ == "__main__":
    main()
