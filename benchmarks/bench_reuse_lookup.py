"""A second night's reuse lookups, model by model, against a store that holds the first night.

    PYTHONPATH=benchmarks .venv/bin/python benchmarks/bench_reuse_lookup.py --home <a workspace> [--run RUN_ID]

A run asks the store, as each model arrives, which of its unique ops an earlier run of the same
build, chip, options and code already judged (storage/cache.py). This replays those asks for every
model of a stored run (default: the latest with the most results), in the order the models were
stored, with the earlier runs' rows read whole per run and kept (this tree), and with the rows
fetched per ask (the baseline, RUN_ROWS_BYTES = 0), both in this process, one after the other.
The workspace of `bench_second_night.py --all` (it prints its scratch folder) is a breadth store.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import psutil

from opbyop_storage import cache
from opbyop_storage.cache import CachedResults
from opbyop_storage.dataset import Store
from opbyop_storage.readonly import run_sql

MODELS_SQL = """
SELECT model, list(DISTINCT signature) AS signatures, min(position) AS first FROM ops
WHERE run_id = $run AND signature IS NOT NULL GROUP BY model ORDER BY model
"""


def asks(root: Path, run_id: str) -> list[list[str]]:
    """Each model's ops not brought by a model before it, in model order: what a run of the same models
    asks (opbyop.run's Prepared hands each unique op out once, with the first model that brings it)."""
    rows = run_sql(MODELS_SQL.replace("$run", f"'{run_id}'"), root).rows
    seen: set[str] = set()
    out = []
    for _, signatures, _ in rows:
        new = [s for s in signatures if s not in seen]
        seen.update(new)
        out.append(new)
    return out


def replay(store: Store, run_id: str, models: list[list[str]]) -> tuple[float, int, float]:
    """(seconds, results found, MB this process grew by) of every model's ask, one cache per run."""
    run = store.run(run_id)
    before = psutil.Process().memory_info().rss
    start = time.perf_counter()
    found = CachedResults(store, run.compiler.key, run.chip, run.options_key, run.verdict_code, exclude_run="-")
    hits = sum(len(found.lookup(signatures)) for signatures in models)
    found.close()
    return time.perf_counter() - start, hits, (psutil.Process().memory_info().rss - before) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="a workspace (its store/ holds the runs)")
    parser.add_argument("--run", help="the run whose models ask (default: the latest with the most results)")
    args = parser.parse_args()
    root = args.home / "store"
    run_id = args.run or run_sql("SELECT run_id FROM results GROUP BY run_id ORDER BY count(*) DESC, run_id DESC "
                                 "LIMIT 1", root).rows[0][0]
    models = asks(root, run_id)
    print(f"{len(models)} models of run {run_id}, {sum(map(len, models)):,} unique ops asked for")
    store = Store(root)
    seconds, hits, grown = replay(store, run_id, models)
    print(f"this tree (each run's rows read whole, kept up to {cache.RUN_ROWS_BYTES / 2**20:.0f} MiB): "
          f"{seconds:.1f} s, {hits:,} found, +{grown:.0f} MB")
    cache.RUN_ROWS_BYTES = 0  # the baseline: each ask fetches its rows with a query of its own
    seconds_b, hits_b, grown_b = replay(store, run_id, models)
    print(f"baseline (rows fetched per ask): {seconds_b:.1f} s, {hits_b:,} found, +{grown_b:.0f} MB")
    print(f"speed-up {seconds_b / seconds:.1f}x; the same results: {hits == hits_b}")


if __name__ == "__main__":
    main()
