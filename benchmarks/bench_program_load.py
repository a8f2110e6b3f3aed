"""Loading an op's TTNN program on the device model: an MLIR context made for each program (the
baseline) against one context reused across programs (opbyop.device.program.ReusedContext, what the
op worker's simulator does), on the same programs in the same run.

    PYTHONPATH=benchmarks .venv/bin/python benchmarks/bench_program_load.py [--workspace HOME] [--limit N] [--rounds R]

Programs: the ttnn_runtime dumps under tests/data, or with --workspace those in an opbyop
workspace's artifacts (a finished run's: every op program it compiled, up to --limit). Each way runs
in a process of its own, so its memory figure is its own: ms per program, and how much the process's
RSS grew over all the loads. Goal: a reused context costs less time and no more memory than a new one.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from common import ROOT, Figures

from opbyop.device.program import ReusedContext, load_program
from opbyop.ir.context import make_context


def programs(workspace: Path | None, limit: int) -> list[Path]:
    """TTNN program dumps: a workspace's artifacts, or the tests' data."""
    root = workspace / "artifacts" if workspace else ROOT / "tests" / "data"
    found = []
    for path in sorted(root.rglob("*.mlir")):
        text = path.read_text(errors="replace")
        if "ttnn." in text and "forward_device" in text:
            found.append(path)
        if len(found) == limit:
            break
    return found


def measure(paths: list[str], reused: bool, rounds: int) -> dict[str, float]:
    """Load every program `rounds` times, one way; ms per load and the RSS grown."""
    texts = [Path(p).read_text() for p in paths]
    contexts = ReusedContext() if reused else None
    load_program(texts[0], make_context(allow_unregistered=True))  # jax's MLIR set up, outside the figures
    gc.collect()
    before = psutil.Process().memory_info().rss
    loads, start = 0, time.perf_counter()
    for _ in range(rounds):
        for text in texts:
            try:
                load_program(text, contexts.get() if contexts else None)
            except Exception:  # a dump the simulator does not read: the same for both ways
                continue
            loads += 1
    seconds = time.perf_counter() - start
    gc.collect()
    return {"loads": loads, "ms": 1000 * seconds / max(loads, 1),
            "rss_mb": (psutil.Process().memory_info().rss - before) / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, default=None, help="an opbyop home whose op programs to load")
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--one", choices=("new", "reused"), help=argparse.SUPPRESS)  # a child's way
    parser.add_argument("--paths", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(json.loads(args.paths.read_text()), args.one == "reused", args.rounds)))
        return
    paths = programs(args.workspace, args.limit)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as listed:
        json.dump([str(p) for p in paths], listed)
        listed.flush()
        figures = Figures(f"{len(paths)} TTNN programs, {args.rounds} round(s), each way in its own process",
                          ["context", "loads", "ms per load", "RSS grown (MB)"])
        for way in ("new", "reused"):
            done = subprocess.run([sys.executable, __file__, "--one", way, "--paths", listed.name,
                                   "--rounds", str(args.rounds)], capture_output=True, text=True, check=True)
            got = json.loads(done.stdout.strip().splitlines()[-1])
            figures.add("one per program (baseline)" if way == "new" else "one reused", got["loads"], got["ms"],
                        got["rss_mb"])
    figures.show()


if __name__ == "__main__":
    main()
