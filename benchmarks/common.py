"""Shared by the benchmark scripts: the zoo's ops, timing, a table printer, and an opbyop command
run as a user runs it (its wall time, its peak memory and its children's, SQL over its store)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import psutil
from rich.table import Table
from rich.text import Text

from opbyop.cli.app import make_console

console = make_console()  # literal, and on a pipe wide enough that no cell is cut


@dataclass
class Timer:
    wall: float = 0.0
    cpu: float = 0.0


@contextmanager
def timed() -> Iterator[Timer]:
    t = Timer()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield t
    finally:
        t.wall, t.cpu = time.perf_counter() - wall, time.process_time() - cpu


@dataclass
class Figures:
    title: str
    columns: Sequence[str]
    rows: list[list[str]] = field(default_factory=list)

    def add(self, *values: object) -> None:
        self.rows.append([_fmt(v) for v in values])

    def show(self) -> None:
        table = Table(*self.columns, title=Text(self.title))
        for row in self.rows:  # literally: figures and error messages may hold [brackets]
            table.add_row(*(Text(cell) for cell in row))
        console.print(table)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def median_ms(values: Sequence[float]) -> float:
    return 1000 * statistics.median(values) if values else float("nan")


def zoo_ops(models: Sequence[str]):
    """(per-model split results, unique ops across them)."""
    from opbyop.frontends.loader import load_model
    from opbyop.ir.dedupe import dedupe
    from opbyop.ir.split import split_module

    splits = {m: split_module(load_model(m).module_text, m) for m in models}
    return splits, dedupe([r for s in splits.values() for r in s.ops])


ROOT = Path(__file__).resolve().parent.parent


class PeakMemory:
    """Sampled every `every` seconds while in use: the largest summed RSS of a process and all its
    descendants (`peak`), the same summed as PSS (`peak_pss`: a page shared by a forked child and its
    parent counted once, where RSS counts it in both), of the process alone (`own`), and the most
    descendants at once that `counted` picks (`count`). With a `timeline` file, each sample is a line
    there too: seconds since the start, the process's RSS, the total RSS, the total PSS, and the three
    largest descendants (MB of RSS, command): where a peak was, and whose."""

    def __init__(self, pid: int, every: float = 0.5, counted: Callable[[psutil.Process], bool] | None = None,
                 timeline: Path | None = None):
        self.pid, self.every, self.counted, self.timeline = pid, every, counted, timeline
        self.peak = self.peak_pss = self.own = self.count = 0
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def total(self) -> int:
        """The summed RSS of the process and its descendants now."""
        root = psutil.Process(self.pid)
        total = 0
        for p in [root, *root.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                continue
        return total

    def reset(self) -> None:
        """The peak starts again from now."""
        self.peak = self.total()

    def _sample(self) -> None:
        with open(self.timeline, "w") if self.timeline else nullcontext() as log:
            while not self._stop.is_set():
                try:
                    root = psutil.Process(self.pid)
                    own, total, pss, count, children = root.memory_info().rss, 0, 0, 0, []
                    for p in [root, *root.children(recursive=True)]:
                        try:
                            rss = p.memory_info().rss
                            total += rss
                            pss += p.memory_full_info().pss
                            count += p is not root and self.counted is not None and self.counted(p)
                            if p is not root and log is not None:
                                children.append((rss, " ".join(p.cmdline()[1:4])[:80]))
                        except psutil.Error:
                            continue
                    self.peak, self.own, self.count = max(self.peak, total), max(self.own, own), max(self.count, count)
                    self.peak_pss = max(self.peak_pss, pss)
                    if log is not None:
                        top = "; ".join(f"{rss >> 20} {cmd}" for rss, cmd in sorted(children, reverse=True)[:3])
                        log.write(f"{time.monotonic() - self._start:.1f}\t{own >> 20}\t{total >> 20}\t{pss >> 20}\t{top}\n")
                        log.flush()
                except psutil.Error:
                    pass
                self._stop.wait(self.every)


@dataclass
class Measured:
    """One command's run: exit code, wall seconds, memory (PeakMemory) and output."""

    exit_code: int
    seconds: float
    memory: PeakMemory
    output: str


def measured(command: list[str], env: dict[str, str], counted: Callable[[psutil.Process], bool] | None = None,
             timeline: Path | None = None) -> Measured:
    """`command` run from the checkout with `env`, its output taken whole, its memory sampled (each
    sample written to `timeline` when given: PeakMemory)."""
    start = time.monotonic()
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with PeakMemory(process.pid, counted=counted, timeline=timeline) as memory:
        output = process.communicate()[0]
    return Measured(process.returncode, time.monotonic() - start, memory, output)


def sql(query: str, env: dict[str, str]) -> list[dict]:
    """`opbyop sql QUERY` over the store of `env`'s OPBYOP_HOME, as rows."""
    out = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "sql", query, "--format", "json"],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        print(f"sql failed: {out.stderr[-800:]}")
        return []
