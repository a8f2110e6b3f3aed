"""What the store costs on S3-compatible object storage against a local directory, in the same run.

    python benchmarks/bench_store_s3.py                     # 20 runs x 2,000 results, batches of 25
    python benchmarks/bench_store_s3.py --runs 5 --results 500

The object store is moto's S3 server on 127.0.0.1 (`moto[server]`, the `test` extra): a Python
server on the same 2 cores, so its figures are an upper bound of the client's own work plus
loopback, not a real S3's latency. Per store: one run written as the flow writes it (ops, results
in batches, compaction), `--runs` more runs written whole, then a fresh reader's scan and queries.
On S3, the reads of that first run's manifest while it is written, counted at moto's server.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from opbyop.records import OpResult, Status  # noqa: E402
from opbyop_storage.batches import BATCH_SIZE  # noqa: E402
from opbyop_storage.dataset import Store  # noqa: E402
from opbyop_storage.readonly import StoreConnection  # noqa: E402
from tests import store_samples as samples  # noqa: E402
from tests.object_store import moto_server  # noqa: E402 (the tests' moto fixture, as a context manager)

QUERIES = {
    "status counts": "SELECT run_id, status, count(*) FROM results GROUP BY ALL",
    "deepest per op": "SELECT signature, max(depth) FROM results GROUP BY 1 ORDER BY 2 DESC LIMIT 20",
    "occurrences": "SELECT model, count(*) FROM occurrences GROUP BY 1",
}


def _results(n: int) -> list[OpResult]:
    base = [samples.result(samples.ADD, Status.SUCCESS), samples.result(samples.DOT, Status.GOLDEN_FAILED,
                                                                        message="mismatch")]
    return [base[i % 2].model_copy(update={"signature": hashlib.sha256(f"op-{i}".encode()).hexdigest()})
            for i in range(n)]


@contextmanager
def _clock(figures: dict[str, float], name: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    figures[name] = time.perf_counter() - start


def measure(root: Path | str, runs: int, results: list[OpResult],
            reads: Callable[[], int] = lambda: 0) -> tuple[dict[str, float], dict[str, int]]:
    """(seconds per step, reads of the batch-written run's manifest per step: `reads()` counts them)."""
    figures: dict[str, float] = {}
    counted: dict[str, int] = {}
    night = samples.history()[1]
    store = Store(root)
    before = reads()
    with _clock(figures, "start"):
        w = store.writer()
        w.start(night.run.model_copy(update={"run_id": "flow"}))
        w.add_ops(night.ops)
    counted["start"], before = reads() - before, reads()
    batches = [results[i:i + BATCH_SIZE] for i in range(0, len(results), BATCH_SIZE)]
    with _clock(figures, "batches"):
        for batch in batches:
            w.add_results(batch)
    figures["per batch (ms)"] = figures["batches"] / len(batches) * 1000
    counted[f"{len(batches)} batches"], before = reads() - before, reads()
    with _clock(figures, "compaction"):
        w.finish(None, night.models)
    counted["compaction"] = reads() - before
    with _clock(figures, f"{runs} whole runs"):
        for i in range(runs):
            run = night.run.model_copy(update={"run_id": f"r{i}", "started_at": night.run.started_at + timedelta(i)})
            store.write_run(run, night.ops, results, night.models)
    with _clock(figures, "reader scan"):
        con = StoreConnection(root)
    for name, sql in QUERIES.items():
        with _clock(figures, name):
            con.query(sql)
    con.close()
    return figures, counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--results", type=int, default=2000)
    args = parser.parse_args()
    results = _results(args.results)
    with tempfile.TemporaryDirectory(prefix="bench-store-s3-") as tmp:
        os.environ["OPBYOP_HOME"] = str(Path(tmp) / "home")  # the object store's writer locks
        local, _ = measure(Path(tmp) / "local", args.runs, results)
        with moto_server(Path(tmp) / "moto.log") as server:
            os.environ.update(server.env)
            manifest = f"{server.url('bench')}/_manifests/flow.json"
            remote, counted = measure(server.url("bench"), args.runs, results,
                                      lambda: server.requests("HEAD", manifest))  # a read: HEAD, then GET
    table = Table("seconds (unless ms)", "local directory", "moto S3 on 127.0.0.1", "ratio",
                  title=f"store: {args.results} results in batches of {BATCH_SIZE}, then {args.runs} whole runs")
    for name in local:
        ratio = remote[name] / max(local[name], 1e-9)
        table.add_row(name, f"{local[name]:.3f}", f"{remote[name]:.3f}", f"{ratio:.1f}x")
    Console(width=120).print(table)
    print("reads of the batch-written run's manifest on S3:", ", ".join(f"{k} {v}" for k, v in counted.items()))


if __name__ == "__main__":
    main()
