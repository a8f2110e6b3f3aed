"""Memory of a run's compaction (RunWriter.finish): piece by piece, against the whole table at once.

    python benchmarks/bench_compaction.py                     # 324 models x 550 ops, a breadth run's size
    python benchmarks/bench_compaction.py --models 40 --ops 300

A run is generated as its writer leaves it before finish: one ops part per model, results in batches
of 50 (bench_store's synthetic night, re-cut into parts). Each compaction runs in a fresh process that
resumes the run and finishes it; its figure is the process's RSS peak above what it held before
finish. The baseline is the same code with one piece for the whole table (read whole, sorted whole:
what finish did before it streamed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
from bench_store import make_zoo, write_night
from common import ROOT, Figures

from opbyop_storage.dataset import COMPACTION_CHUNK_BYTES, RUN_PART
from opbyop_storage.files import new_part_name, run_dir, write_parquet_atomic

START = datetime(2026, 11, 29, 2, 0, tzinfo=timezone.utc)
WHOLE = 1 << 62  # one piece: the whole table

# Run in a child: resume the run, then finish it with the given piece size; print seconds and MB.
CHILD = """
import gc, os, sys, time
from common import PeakMemory
from opbyop_storage.dataset import Store
root, run_id, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = Store(root)
run = store.run(run_id)
with store.writer(compaction_chunk_bytes=chunk) as w, PeakMemory(os.getpid(), every=0.01) as memory:
    w.start(run)
    gc.collect()
    memory.reset()
    before = memory.peak
    t = time.perf_counter()
    w.finish(run, [])
    seconds = time.perf_counter() - t
    time.sleep(0.05)  # one more sample after the end
print(seconds, (max(memory.peak, memory.total()) - before) / 2**20)
"""


def unfinished_run(root: Path, models: int, ops: int) -> tuple[str, int, float]:
    """A run as its writer leaves it before finish; (run id, op rows, the ops table's MB in Arrow)."""
    generated = root.parent / "generated"
    write_night(generated, make_zoo(np.random.default_rng(0), models, ops), 0, START, np.random.default_rng(1))
    run_id = f"nightly-{START:%Y%m%d}"
    day = START.date()
    for table in ("runs", "models"):
        write_parquet_atomic(pq.read_table(run_dir(generated, table, day, run_id) / RUN_PART),
                             run_dir(root, table, day, run_id) / RUN_PART)
    ops = pq.ParquetFile(run_dir(generated, "ops", day, run_id) / RUN_PART).read()
    results = pq.ParquetFile(run_dir(generated, "results", day, run_id) / RUN_PART).read()
    ops_dir, results_dir = run_dir(root, "ops", day, run_id), run_dir(root, "results", day, run_id)
    for model in pc.unique(ops.column("model")).to_pylist():  # a part per model
        write_parquet_atomic(ops.filter(pc.equal(ops.column("model"), model)), ops_dir / new_part_name(ops_dir))
    for start in range(0, results.num_rows, 50):
        write_parquet_atomic(results.slice(start, 50), results_dir / new_part_name(results_dir))
    shutil.rmtree(generated)
    return run_id, ops.num_rows, ops.nbytes / 2**20


def compaction(root: Path, run_id: str, chunk: int) -> tuple[float, float]:
    """(seconds, MB above what the process held before) of finishing the run, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])}
    out = subprocess.run([sys.executable, "-c", CHILD, str(root), run_id, str(chunk)], capture_output=True,
                         text=True, cwd=ROOT, env=env, check=True)
    seconds, mb = out.stdout.split()
    return float(seconds), float(mb)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=324)
    parser.add_argument("--ops", type=int, default=550, help="unique ops per model (each occurring 1-3 times)")
    args = parser.parse_args()
    figures = Figures("a run's compaction", ["pieces of", "seconds", "MB above the process before finish"])
    with tempfile.TemporaryDirectory(prefix="opbyop-compaction-") as tmp:
        t = time.perf_counter()
        for label, chunk in (("the whole table (baseline)", WHOLE), (f"{COMPACTION_CHUNK_BYTES >> 20} MB", COMPACTION_CHUNK_BYTES)):
            root = Path(tmp) / label.split()[0] / "store"
            run_id, rows, mb = unfinished_run(root, args.models, args.ops)
            seconds, above = compaction(root, run_id, chunk)
            figures.add(label, seconds, above)
        print(f"{args.models} models, {rows:,} op rows ({mb:.0f} MB in Arrow); generated and run in "
              f"{time.perf_counter() - t:.0f} s")
    figures.show()


if __name__ == "__main__":
    main()
