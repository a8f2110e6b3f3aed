"""Shared by the benchmark scripts: the zoo's ops, timing, and a table printer."""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

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
