"""Benchmark of the store's aggregation SQL on a synthetic history, against pandas doing the same.

    python benchmarks/bench_store.py                       # 365 nights x 50 models x 1,000 ops
    python benchmarks/bench_store.py --nights 30 --models 10 --ops 200 --root /tmp/small

The history is generated straight into the dataset's Parquet layout with numpy/pyarrow (vectorised,
one night at a time: memory stays flat), not through pydantic. Each model has `--ops` unique ops (5 %
of them shared by every model) occurring 1-3 times; every night a few ops move deeper (fixes), a few
get shallower (regressions) and a few are replaced by new ones (model churn). A generated history is
reused when its parameters match (`--regenerate` to force).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from opbyop.messages import message_pattern
from opbyop_storage.cache import lookup_cached
from opbyop_storage.aggregate import run_query
from opbyop_storage.dataset import RUN_PART
from opbyop_storage.files import data_files, run_dir, write_parquet_atomic
from opbyop_storage.readonly import StoreConnection
from opbyop_storage.schema import DEPTH_COUNT_COLUMNS, STATUS_COUNT_COLUMNS, TENSOR, schema_of

STAGES = np.array(["SPLIT", "STABLEHLO", "TTIR", "TTNN", "FLATBUFFER", "DEVICE_RUN", "GOLDEN"], dtype=object)
FAILED_AT = np.array(["STABLEHLO", "TTIR", "TTNN", "FLATBUFFER", "DEVICE_RUN", "GOLDEN", None], dtype=object)
STATUS_BY_DEPTH = np.array(["compile_failed"] * 4 + ["run_failed", "golden_failed", "success"], dtype=object)
# depth rank distribution of a fresh op: most pass, the rest spread over the pipeline
DEPTH_P = np.array([0.02, 0.05, 0.08, 0.07, 0.06, 0.08, 0.64])
OP_KINDS = np.array(["stablehlo.add", "stablehlo.multiply", "stablehlo.dot_general", "stablehlo.convolution",
                     "stablehlo.reshape", "stablehlo.transpose", "stablehlo.broadcast_in_dim", "stablehlo.reduce",
                     "stablehlo.exponential", "stablehlo.tanh", "stablehlo.divide", "stablehlo.subtract",
                     "stablehlo.maximum", "stablehlo.select", "stablehlo.compare", "stablehlo.convert",
                     "stablehlo.slice", "stablehlo.concatenate", "stablehlo.gather", "stablehlo.reduce_window",
                     "stablehlo.rsqrt", "stablehlo.sort", "stablehlo.iota", "stablehlo.pad"], dtype=object)
TEMPLATES = [
    "error: failed to legalize operation '{op}' that was explicitly marked illegal for {shape}",
    "error: '{ttnn}' op input tensor {shape} at %arg{n} does not satisfy the layout constraint",
    "error: could not lower '{op}' to TTNN: unsupported dtype in {shape}",
    "error: flatbuffer serialisation failed for '{ttnn}' at 0x{addr:x}",
    "L1 overflow: {bytes} bytes needed on core ({n}, {m}) for {shape}",
    "output mismatch: pcc {pcc:.4f} < 0.99, max abs error {err:.3g}",
]


@dataclass
class Zoo:
    """The op universe: per signature index its hex signature, kind, current depth rank and message."""

    signatures: list[str]
    kinds: np.ndarray
    depth: np.ndarray
    messages: np.ndarray  # (signature, depth rank) -> message, None at GOLDEN
    model_ops: list[np.ndarray]  # per model: signature indices
    model_occ: list[np.ndarray]  # per model: occurrences of each of them


def _sig(i: int) -> str:
    return hashlib.sha256(f"op-{i}".encode()).hexdigest()


def _messages(rng: np.random.Generator, kinds: np.ndarray) -> np.ndarray:
    out = np.empty((len(kinds), len(STAGES)), dtype=object)
    for i, op in enumerate(kinds):
        shape = "x".join(str(d) for d in rng.choice([1, 4, 8, 32, 64, 128, 224], size=rng.integers(1, 5))) + "xbf16"
        ttnn = "ttnn." + op.split(".")[1]
        for rank in range(len(STAGES) - 1):
            tpl = TEMPLATES[min(rank, 3)] if rank < 4 else TEMPLATES[rank]
            out[i, rank] = tpl.format(op=op, ttnn=ttnn, shape=shape, n=int(rng.integers(0, 8)),
                                      m=int(rng.integers(0, 8)), addr=int(rng.integers(1 << 40, 1 << 44)),
                                      bytes=int(rng.integers(1 << 20, 1 << 24)), pcc=rng.uniform(0.2, 0.98),
                                      err=rng.uniform(0.01, 3))
    return out


def make_zoo(rng: np.random.Generator, models: int, ops: int) -> Zoo:
    shared = max(1, ops // 20)
    own = ops - shared
    total = shared + models * own
    kinds = rng.choice(OP_KINDS, size=total)
    depth = rng.choice(len(STAGES), size=total, p=DEPTH_P)
    model_ops = [np.concatenate([np.arange(shared), shared + m * own + np.arange(own)]) for m in range(models)]
    model_occ = [1 + rng.poisson(0.5, size=ops).clip(0, 2) for _ in range(models)]
    return Zoo([_sig(i) for i in range(total)], kinds, depth, _messages(rng, kinds), model_ops, model_occ)


def evolve(rng: np.random.Generator, zoo: Zoo) -> None:
    """One night of compiler work: fixes, regressions, churn."""
    n = len(zoo.depth)
    fixes = rng.random(n) < 0.004
    zoo.depth[fixes] = np.minimum(zoo.depth[fixes] + rng.integers(1, 4, fixes.sum()), 6)
    regressions = rng.random(n) < 0.001
    zoo.depth[regressions] = np.maximum(zoo.depth[regressions] - rng.integers(1, 4, regressions.sum()), 0)
    for m in range(len(zoo.model_ops)):  # ~0.2 % of each model's ops replaced by new ones
        churn = np.flatnonzero(rng.random(len(zoo.model_ops[m])) < 0.002)
        if len(churn) == 0:
            continue
        start = len(zoo.signatures)
        zoo.signatures.extend(_sig(i) for i in range(start, start + len(churn)))
        new_kinds = rng.choice(OP_KINDS, size=len(churn))
        zoo.kinds = np.concatenate([zoo.kinds, new_kinds])
        zoo.depth = np.concatenate([zoo.depth, rng.choice(len(STAGES), size=len(churn), p=DEPTH_P)])
        zoo.messages = np.concatenate([zoo.messages, _messages(rng, new_kinds)])
        zoo.model_ops[m] = zoo.model_ops[m].copy()
        zoo.model_ops[m][churn] = start + np.arange(len(churn))


def _table(name: str, columns: dict[str, pa.Array], rows: int) -> pa.Table:
    schema = schema_of(name)
    return pa.Table.from_arrays([columns[f.name] if f.name in columns else pa.nulls(rows, f.type) for f in schema],
                                schema=schema)


def _masked(values: np.ndarray, valid: np.ndarray) -> pa.Array:
    """Nulls where not `valid` (a NaN is a value, not a missing part)."""
    return pa.array(values, mask=~np.asarray(valid, dtype=bool))


def _tensors(count: int, rng: np.random.Generator) -> pa.Array:
    """Each row: one or two tensors of shape [4, 32] or [1, 128] (a list<struct<shape, dtype>>)."""
    per_row = rng.integers(1, 3, size=count)
    offsets = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int32)
    n = int(offsets[-1])
    shapes = pa.ListArray.from_arrays(pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32)),
                                      pa.array(np.tile(np.array([4, 32], dtype=np.int64), n)))
    structs = pa.StructArray.from_arrays([shapes, pa.array(np.full(n, "bf16", dtype=object), pa.string())],
                                         fields=list(TENSOR))
    return pa.ListArray.from_arrays(pa.array(offsets), structs)


def write_night(root: Path, zoo: Zoo, night: int, start: datetime, rng: np.random.Generator) -> tuple[int, int]:
    run_id = f"nightly-{start:%Y%m%d}"
    day = start.date()
    unique = np.unique(np.concatenate(zoo.model_ops))
    n = len(unique)
    depth = zoo.depth[unique].copy()
    status = STATUS_BY_DEPTH[depth].copy()
    failed = FAILED_AT[depth]
    message = zoo.messages[unique, depth]
    crash = (rng.random(n) < 0.003) & (depth < 6)  # a worker dies now and then, mid-way
    status[crash] = rng.choice(np.array(["crashed", "timeout"], dtype=object), crash.sum())
    message[crash] = np.where(status[crash] == "crashed", "worker died: signal 11 (SIGSEGV)", "timed out after 120 s")
    secs = rng.gamma(2.0, 0.4, size=n)
    t0 = np.int64(start.timestamp() * 1_000_000)
    started = t0 + np.cumsum(secs * 1_000_000).astype(np.int64) // 2  # two workers
    ended = started + (secs * 1_000_000).astype(np.int64)
    reached = depth >= 4
    ran = (depth >= 5) & ~crash
    compared = ran & ((depth == 6) | (status == "golden_failed"))
    results = _table("results", {
        "run_id": pa.array(np.full(n, run_id, dtype=object), pa.string()),
        "signature": pa.array(np.array(zoo.signatures, dtype=object)[unique], pa.string()),
        "op_name": pa.array(zoo.kinds[unique], pa.string()),
        "status": pa.array(status, pa.string()), "depth": pa.array(STAGES[depth], pa.string()),
        "failed_stage": pa.array(failed, pa.string()), "message": pa.array(message, pa.string()),
        "stablehlo_s": pa.array(secs * 0.1), "ttir_s": _masked(secs * 0.2, depth >= 2),
        "ttnn_s": _masked(secs * 0.3, depth >= 3), "flatbuffer_s": _masked(secs * 0.1, reached),
        "compile_s": pa.array(secs * 0.7),
        "compile_reached": _masked(STAGES[np.clip(depth, 1, 4)].astype(str), depth >= 1),
        "compile_failed_stage": _masked(FAILED_AT[depth].astype(str), depth < 4),
        "compile_message": _masked(message.astype(str), depth < 4),
        "ttnn_ops": _masked(rng.integers(1, 6, n), ran), "cycles": _masked(rng.integers(1_000, 500_000, n), ran),
        "peak_l1_bytes": _masked(rng.integers(1 << 12, 1 << 20, n), ran),
        "peak_dram_bytes": _masked(rng.integers(1 << 16, 1 << 26, n), ran), "device_s": _masked(secs * 0.05, ran),
        "pcc": _masked(np.where(depth == 6, 0.999, 0.7), compared),
        "max_abs_error": _masked(np.where(depth == 6, 1e-3, 0.4), compared),
        "max_rel_error": _masked(np.where(depth == 6, 1e-3, 2.0), compared),
        "allclose": _masked(depth == 6, compared), "golden_passed": _masked(depth == 6, compared),
        "pcc_threshold": _masked(np.full(n, 0.99), compared), "golden_s": _masked(secs * 0.01, compared),
        "started_at": pa.array(started, pa.timestamp("us", tz="UTC")),
        "ended_at": pa.array(ended, pa.timestamp("us", tz="UTC")),
        "worker": pa.array(np.where(np.arange(n) % 2 == 0, "w0", "w1").astype(object), pa.string()),
    }, n)

    # ops: every occurrence of every model's ops
    sig_idx = np.concatenate([np.repeat(ops, occ) for ops, occ in zip(zoo.model_ops, zoo.model_occ)])
    model_idx = np.concatenate([np.full(occ.sum(), m) for m, occ in enumerate(zoo.model_occ)])
    m_rows = len(sig_idx)
    position = np.concatenate([np.arange(occ.sum()) for occ in zoo.model_occ])
    model_names = np.array([f"model_{m:03d}" for m in range(len(zoo.model_ops))], dtype=object)
    ops = _table("ops", {
        "run_id": pa.array(np.full(m_rows, run_id, dtype=object), pa.string()),
        "model": pa.array(model_names[model_idx], pa.string()), "position": pa.array(position.astype(np.int64)),
        "op_name": pa.array(zoo.kinds[sig_idx], pa.string()),
        "signature": pa.array(np.array(zoo.signatures, dtype=object)[sig_idx], pa.string()),
        "framework_op": pa.array(np.char.replace(zoo.kinds[sig_idx].astype(str), "stablehlo.", "torch.").astype(object),
                                 pa.string()),
        "source_file": pa.array(np.full(m_rows, "/zoo/model.py", dtype=object), pa.string()),
        "source_line": pa.array(position.astype(np.int64) + 1),
        "inputs": _tensors(m_rows, rng), "outputs": _tensors(m_rows, rng),
        "attributes": pa.array(np.full(m_rows, "{}", dtype=object), pa.string()),
    }, m_rows)

    # models: counts by depth / status of each model's occurrences
    depth_of = np.zeros(len(zoo.signatures), dtype=np.int64)
    depth_of[unique] = depth
    status_of = np.empty(len(zoo.signatures), dtype=object)
    status_of[unique] = status
    cols: dict[str, list] = {c: [] for c in (*DEPTH_COUNT_COLUMNS, *STATUS_COUNT_COLUMNS)}
    for ops_m, occ in zip(zoo.model_ops, zoo.model_occ):
        counts = np.bincount(depth_of[ops_m], weights=occ, minlength=7).astype(np.int64)
        for c, v in zip(DEPTH_COUNT_COLUMNS, counts):
            cols[c].append(int(v))
        st = status_of[ops_m]
        for c in STATUS_COUNT_COLUMNS:
            cols[c].append(int(occ[st == c.removeprefix("status_")].sum()))
    k = len(zoo.model_ops)
    models = _table("models", {
        "run_id": pa.array([run_id] * k), "model": pa.array(model_names.tolist()),
        "frontend": pa.array(["torch"] * k), "ops_total": pa.array([int(o.sum()) for o in zoo.model_occ]),
        "ops_unique": pa.array([len(o) for o in zoo.model_ops]), "split_failures": pa.array([0] * k),
        **{c: pa.array(v, pa.int64()) for c, v in cols.items()}, "ops_without_result": pa.array([0] * k),
        "whole_status": pa.array(["success" if cols["depth_golden"][i] == zoo.model_occ[i].sum() else "compile_failed"
                                  for i in range(k)]),
    }, k)
    runs = _table("runs", {
        "run_id": pa.array([run_id]), "started_at": pa.array([start], pa.timestamp("us", tz="UTC")),
        "ended_at": pa.array([start + timedelta(hours=5)], pa.timestamp("us", tz="UTC")),
        "status": pa.array(["completed"]), "models": pa.array([model_names.tolist()]), "chip": pa.array(["p150"]),
        "plugin_version": pa.array(["0.1.3"]), "options_key": pa.array(["0123456789abcdef"]),
        "config": pa.array([json.dumps({"night": night})]),
    }, 1)
    for name, table in (("results", results.sort_by("signature")), ("ops", ops), ("models", models), ("runs", runs)):
        write_parquet_atomic(table, run_dir(root, name, day, run_id) / RUN_PART)
    return n, m_rows


def generate(root: Path, nights: int, models: int, ops: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    zoo = make_zoo(rng, models, ops)
    first = datetime(2025, 1, 1, 2, 0, tzinfo=timezone.utc)
    results = occurrences = 0
    t = time.perf_counter()
    for night in range(nights):
        if night:
            evolve(rng, zoo)
        r, o = write_night(root, zoo, night, first + timedelta(days=night), rng)
        results, occurrences = results + r, occurrences + o
        if night % 50 == 49:
            print(f"  night {night + 1}/{nights}: {results:,} result rows, {occurrences:,} op rows, "
                  f"{time.perf_counter() - t:.0f} s", flush=True)
    (root / "_bench.json").write_text(json.dumps({"nights": nights, "models": models, "ops": ops, "seed": seed,
                                                  "results": results, "ops_rows": occurrences}))


# ----------------------------------------------------------------------------- pandas baseline

def _pd(root: Path, table: str, run_ids: list[str] | None, columns: list[str]) -> pd.DataFrame:
    files = [f for r in run_ids for f in data_files(root, table, r)] if run_ids else data_files(root, table)
    return pa.concat_tables([pq.ParquetFile(f).read(columns=columns) for f in files]).to_pandas()


def _window(runs: pd.DataFrame, run_id: str, n: int) -> list[str]:
    cur = runs[runs.run_id == run_id].iloc[0]
    same = runs[(runs.chip == cur.chip) & (runs.options_key == cur.options_key) & (runs.started_at <= cur.started_at)]
    return same.sort_values("started_at", ascending=False).run_id.head(n).tolist()


def pandas_queries(root: Path, run_id: str, prev: str, n: int) -> dict[str, Callable[[], object]]:
    rank = {s: i for i, s in enumerate(STAGES)}

    def runs() -> pd.DataFrame:
        return _pd(root, "runs", None, ["run_id", "started_at", "chip", "options_key", "status"])

    def histogram():
        o = _pd(root, "ops", [run_id], ["model", "signature"])
        r = _pd(root, "results", [run_id], ["signature", "depth"])
        return o.merge(r, on="signature", how="left").groupby(["model", "depth"]).size()

    def blockers():
        o = _pd(root, "ops", [run_id], ["model", "signature"])
        r = _pd(root, "results", [run_id], ["signature", "op_name", "status", "depth", "failed_stage", "message"])
        j = o.merge(r[r.depth != "GOLDEN"], on="signature")
        return j.groupby(["model", "signature", "op_name", "status", "depth"]).size().sort_values(ascending=False)

    def top_blockers():
        o = _pd(root, "ops", [run_id], ["model", "signature"])
        r = _pd(root, "results", [run_id], ["signature", "op_name", "depth"])
        j = o.merge(r[r.depth != "GOLDEN"], on="signature")
        return j.groupby("signature").agg(models=("model", "nunique"), occ=("model", "size")).nlargest(50, "models")

    def pass_rate():
        win = _window(runs(), run_id, n)
        o = _pd(root, "ops", win, ["run_id", "model", "signature"]).drop_duplicates()
        r = _pd(root, "results", win, ["run_id", "signature", "status"])
        j = o.merge(r, on=["run_id", "signature"])
        j["ok"] = j.status == "success"
        return j.groupby("signature").agg(models=("model", "nunique"), model_runs=("ok", "size"), passes=("ok", "sum"))

    def matrix():
        r = _pd(root, "results", [run_id], ["signature", "op_name", "depth"])
        return pd.crosstab(r.op_name, r.depth)

    def change(sign: int):
        def q():
            c = _pd(root, "results", [run_id], ["signature", "op_name", "depth", "status", "message"])
            p = _pd(root, "results", [prev], ["signature", "depth"])
            j = c.merge(p, on="signature", suffixes=("", "_prev"))
            d = j.depth.map(rank) - j.depth_prev.map(rank)
            return j[d * sign > 0]
        return q

    def new_ops():
        c = _pd(root, "results", [run_id], ["signature", "op_name", "depth"])
        p = _pd(root, "results", [prev], ["signature"])
        return c[~c.signature.isin(p.signature)]

    def trend():
        win = _window(runs(), run_id, n)
        r = _pd(root, "results", win, ["run_id", "depth", "status"])
        m = _pd(root, "models", win, ["run_id", "ops_total", "depth_golden"])
        u = r.assign(g=r.depth == "GOLDEN").groupby("run_id").agg(unique=("g", "size"), golden=("g", "sum"))
        return u.join(m.groupby("run_id").sum())

    def top_failures():
        r = _pd(root, "results", [run_id], ["signature", "failed_stage", "status", "message"])
        r = r[~r.status.isin(["success", "skipped"])].copy()
        r["pattern"] = r.message.map(message_pattern, na_action="ignore")
        o = _pd(root, "ops", [run_id], ["signature"]).value_counts().rename("n").reset_index()
        j = r.merge(o, on="signature", how="left")
        return j.groupby(["failed_stage", "pattern"]).agg(unique=("signature", "size"), occ=("n", "sum")).nlargest(50, "occ")

    def runs_overview():
        r = _pd(root, "results", None, ["run_id", "depth"])
        return r.assign(g=r.depth == "GOLDEN").groupby("run_id").agg(unique=("g", "size"), golden=("g", "sum"))

    return {"depth_histogram": histogram, "blockers": blockers, "top_blockers": top_blockers,
            "op_pass_rate": pass_rate, "kind_depth_matrix": matrix, "regressions": change(-1),
            "progressions": change(1), "new_ops": new_ops, "trend": trend, "top_failures": top_failures,
            "runs_overview": runs_overview}


# ----------------------------------------------------------------------------- timing

def _time(fn: Callable[[], object], repeat: int) -> tuple[float, float, object]:
    """(first call, median of the following ones) in seconds, and the first call's result."""
    times, result = [], None
    for i in range(repeat + 1):
        t = time.perf_counter()
        got = fn()
        times.append(time.perf_counter() - t)
        result = got if i == 0 else result
    return times[0], statistics.median(times[1:]) if repeat else times[0], result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nights", type=int, default=365)
    ap.add_argument("--models", type=int, default=50)
    ap.add_argument("--ops", type=int, default=1000, help="unique ops per model")
    ap.add_argument("--root", type=Path, default=Path("/tmp/opbyop-bench/store"))
    ap.add_argument("--regenerate", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n", type=int, default=30, help="runs in trends and pass rates")
    ap.add_argument("--no-pandas", action="store_true")
    args = ap.parse_args()
    console = Console(width=150)

    params = {"nights": args.nights, "models": args.models, "ops": args.ops, "seed": 0}
    meta_path = args.root / "_bench.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if args.regenerate or {k: meta.get(k) for k in params} != params:
        shutil.rmtree(args.root, ignore_errors=True)
        console.print(f"generating {args.nights} nights x {args.models} models x {args.ops} ops into {args.root}")
        t = time.perf_counter()
        generate(args.root, args.nights, args.models, args.ops)
        meta = json.loads(meta_path.read_text())
        console.print(f"generated in {time.perf_counter() - t:.1f} s")
    size = sum(f.stat().st_size for f in args.root.rglob("*.parquet"))
    console.print(f"history: {meta['results']:,} result rows, {meta['ops_rows']:,} op rows, "
                  f"{size / 2**30:.2f} GiB of Parquet")

    t = time.perf_counter()
    con = StoreConnection(args.root)
    setup = time.perf_counter() - t
    console.print(f"connect (scan {con.scan.file_count} files, check footers, create views): {setup:.2f} s")
    last = run_query(con, "runs_overview", limit=2).rows
    run_id, prev = last[0][0], last[1][0]
    all_sigs = run_query(con, "run_ops", run_id=run_id).column("signature")
    sigs = all_sigs[:1000]

    from opbyop_storage.dataset import Store
    store = Store(args.root)
    duck: dict[str, Callable[[], object]] = {
        name: (lambda name=name: run_query(con, name, run_id=run_id, prev_run_id=prev, n=args.n, limit=50))
        for name in ("depth_histogram", "blockers", "top_blockers", "op_pass_rate", "kind_depth_matrix",
                     "regressions", "progressions", "new_ops", "removed_ops", "trend", "model_trend",
                     "top_failures", "previous_run", "run_ops", "run_models", "runs_overview")
    }
    # what a flow asks at its start: which of its ops were analysed before with the same settings
    duck["lookup_cached (1,000 ops)"] = lambda: lookup_cached(store, sigs, "0.1.3", "p150", "0123456789abcdef",
                                                                    "", exclude_run=run_id)
    duck[f"lookup_cached ({len(all_sigs):,} ops)"] = lambda: lookup_cached(store, 
        all_sigs, "0.1.3", "p150", "0123456789abcdef", "", exclude_run=run_id)
    baseline = {} if args.no_pandas else pandas_queries(args.root, run_id, prev, args.n)

    table = Table("query", "rows", "DuckDB first (s)", f"DuckDB median of {args.repeat} (s)", "pandas (s)",
                  "pandas / DuckDB", title=f"run {run_id} vs {prev}, n={args.n}")
    for name, fn in duck.items():
        first, median, got = _time(fn, args.repeat)
        rows = len(got.rows) if hasattr(got, "rows") else len(got)
        p = baseline.get(name)
        p_time = _time(p, 0)[0] if p else None
        ok = "[green]" if median < 2 else "[red]"
        table.add_row(name, f"{rows:,}", f"{first:.3f}", f"{ok}{median:.3f}",
                      f"{p_time:.3f}" if p_time is not None else "-",
                      f"{p_time / median:.1f}x" if p_time is not None else "-")
    console.print(table)
    con.close()


if __name__ == "__main__":
    sys.exit(main())
