"""What a run's split thread holds when the run takes its models slower than they are split (a second
night reads kept splits faster than it stores their ops): --models StableHLO files of --ops ops each,
asked at once and taken one every --pace seconds, with the read-ahead bound (opbyop.run.models.
READ_AHEAD) and without it (the baseline), each in a fresh process of its own.

    PYTHONPATH=benchmarks .venv/bin/python benchmarks/bench_split_read_ahead.py [--models 50] [--ops 1000]
        [--pace 0.8]

Printed per variant: the most models split and waiting at once, the process's peak RSS above what it
held before the first ask (sampled every 20 ms), and the wall time to take them all.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

UNBOUNDED = 1 << 30


def module_text(index: int, ops: int) -> str:
    """A chain of `ops` elementwise ops on a tensor whose shape is the model's own (so no two are alike)."""
    t = f"tensor<64x{64 + index}xf32>"
    lines = [f"    %0 = stablehlo.tanh %arg0 : {t}"]
    for i in range(1, ops):
        op = ("add", "multiply", "tanh")[i % 3]
        operands = f"%{i - 1}" if op == "tanh" else f"%{i - 1}, %arg0"
        lines.append(f"    %{i} = stablehlo.{op} {operands} : {t}")
    body = "\n".join(lines)
    return (f"module @chain{index} {{\n  func.func public @main(%arg0: {t}) -> {t} {{\n{body}\n"
            f"    return %{ops - 1} : {t}\n  }}\n}}\n")


def measure(folder: Path, read_ahead: int, pace: float) -> dict:
    """In this process: ask every module of `folder`, take one every `pace` seconds."""
    from opbyop.jaxenv import prepare_jax  # deferred: the parent process only writes files and prints
    from opbyop.run.models import Splits

    prepare_jax()
    files = sorted(str(p) for p in folder.glob("*.mlir"))
    me = psutil.Process()
    base = me.memory_info().rss
    peak, most, running = [base], [0], [True]
    splits = Splits(read_ahead=read_ahead)

    def sample() -> None:
        while running[0]:
            peak[0] = max(peak[0], me.memory_info().rss)
            most[0] = max(most[0], splits.waiting())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.monotonic()
    taken = 0
    for outcome in splits.ask(files, 0, reuse=False).arriving(idle=lambda: None):
        assert outcome.error is None, outcome.error
        taken += 1
        del outcome
        time.sleep(pace)  # the run storing this model's ops
    wall = time.monotonic() - start
    running[0] = False
    sampler.join()
    splits.close()
    return {"taken": taken, "most_waiting": most[0], "peak_mb": (peak[0] - base) / 2**20, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=50)
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--pace", type=float, default=0.8, help="seconds the run spends on each model")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # FOLDER: one variant, in this process
    parser.add_argument("--read-ahead", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(Path(args.measure), args.read_ahead, args.pace)))
        return
    from opbyop.run.models import READ_AHEAD  # deferred: only its value

    with tempfile.TemporaryDirectory(prefix="bench-read-ahead-") as tmp:
        folder = Path(tmp)
        for i in range(args.models):
            (folder / f"chain{i:03d}.mlir").write_text(module_text(i, args.ops))
        print(f"{args.models} modules of {args.ops} ops, taken one every {args.pace} s")
        for label, bound in ((f"read-ahead {READ_AHEAD}", READ_AHEAD), ("unbounded (baseline)", UNBOUNDED)):
            done = subprocess.run([sys.executable, __file__, "--measure", str(folder), "--read-ahead", str(bound),
                                   "--pace", str(args.pace)], capture_output=True, text=True, check=True)
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{label:22s} most waiting {figures['most_waiting']:4d}   peak RSS +{figures['peak_mb']:7.1f} MB"
                  f"   {figures['taken']} taken in {figures['wall_s']:.1f} s")


if __name__ == "__main__":
    main()
