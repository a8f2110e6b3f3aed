"""A run's results into the store as they arrive (opbyop.run's ResultSink): the ops and the run
record first, results in batches, then the models and the run's status."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Callable, Iterator

from opbyop.records import OpRecord, OpResult, RunInfo, UniqueOp, WholeModelResult
from opbyop.run.engine import RunOutcome
from opbyop.run.plan import RunPlan
from opbyop.workspace import Workspace
from opbyop_storage.batches import ResultBatches
from opbyop_storage.dataset import RunWriter, Store
from opbyop_storage.known import KnownResults

log = logging.getLogger("opbyop.storage")


class StoreSink:
    """Writes run `run_id` through `writer`; when the run's configuration says `reuse_cached`, results
    of earlier runs of the same compiler build, chip and options are taken instead of analysing those
    ops again. `phases()` gives the run's time line when it finishes."""

    def __init__(self, writer: RunWriter, run_id: str, phases: Callable[[], dict[str, float]] = dict,
                 run: RunInfo | None = None, logger: logging.Logger | logging.LoggerAdapter = log):
        """`run`: the run's record when the caller's differs from its plan's (a corpus run's)."""
        self.writer, self.run_id, self.phases, self.logger = writer, run_id, phases, logger
        self.batches = ResultBatches(writer)
        self.known: KnownResults | None = None
        self.run = run

    def start(self, plan: RunPlan) -> None:
        self.run = self.writer.start(self.run or plan.run_info(self.run_id))
        self.known = KnownResults(self.writer, self.writer.store, self.run, plan.config.reuse_cached)

    def add_model(self, records: list[OpRecord], new: list[UniqueOp]) -> dict[str, OpResult]:
        self.writer.add_ops(records)
        return self.known.of(new)

    def whole_known(self, key: str) -> WholeModelResult | None:
        return self.known.whole(key)

    def op_done(self, result: OpResult) -> bool:
        return self.batches.add(result)

    def finish(self, outcome: RunOutcome) -> None:
        self.batches.flush()
        if self.known is not None:
            self.known.close()
            self.logger.info(self.known.line())
        ended = self.run.model_copy(update={"ended_at": datetime.now(timezone.utc), "phases": self.phases()})
        self.run = self.writer.finish(ended, outcome.model_summaries(), status=outcome.status)


@contextmanager
def store_sink(run_id: str) -> Iterator[StoreSink]:
    """The sink of a command-line run: the workspace's store (`opbyop run` asks for no reuse: it shows
    what it analysed)."""
    with Store(Workspace.default().store).writer() as writer:
        yield StoreSink(writer, run_id)
