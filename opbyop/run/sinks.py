"""Where the command line's runs are stored. opbyop never imports the store: the package that may
(storage/, through the `opbyop.cli` entry point) supplies a sink factory when the CLI starts."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Callable

from opbyop.run.engine import NoSink, ResultSink

SinkFactory = Callable[[str], AbstractContextManager[ResultSink]]  # run id -> the run's sink, open while it runs

_supplied: list[SinkFactory] = []  # at most one: the last supplied


def supply_sink(factory: SinkFactory) -> None:
    """Make `factory` the sink of every run this process starts from now on."""
    _supplied[:] = [factory]


def storing() -> bool:
    """True when a sink was supplied (the run's results will be queryable by its run id)."""
    return bool(_supplied)


def open_sink(run_id: str) -> AbstractContextManager[ResultSink]:
    """The supplied sink for run `run_id`, or one that keeps nothing."""
    return _supplied[0](run_id) if _supplied else nullcontext(NoSink())
