"""A run's results into the store as they arrive (opbyop.run's ResultSink): the ops and the run
record first, results in batches, then the models and the run's status."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Callable, Iterator

from opbyop.pipeline import Prepared
from opbyop.records import OpResult, RunInfo
from opbyop.run.engine import RunOutcome
from opbyop.run.plan import RunPlan
from opbyop.workspace import Workspace
from opbyop_storage.batches import ResultBatches
from opbyop_storage.dataset import RunWriter, Store
from opbyop_storage.known import KnownResults, known_results

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
        self.known = KnownResults()
        self.run = run

    def start(self, plan: RunPlan, prepared: Prepared) -> dict[str, OpResult]:
        self.run = self.writer.start(self.run or plan.run_info(self.run_id))
        self.writer.add_ops(prepared.records)
        self.known = known_results(self.writer, self.writer.store, prepared.unique, self.run,
                                   plan.config.reuse_cached)
        self.logger.info(self.known.line(len(prepared.unique)))
        return self.known.results

    def op_done(self, result: OpResult) -> bool:
        return self.batches.add(result)

    def finish(self, outcome: RunOutcome) -> None:
        self.batches.flush()
        ended = self.run.model_copy(update={"ended_at": datetime.now(timezone.utc), "phases": self.phases()})
        self.run = self.writer.finish(ended, outcome.model_summaries(), status=outcome.status)


@contextmanager
def store_sink(run_id: str) -> Iterator[StoreSink]:
    """The sink of a command-line run: the workspace's store (`opbyop run` asks for no reuse: it shows
    what it analysed)."""
    with Store(Workspace.default().store).writer() as writer:
        yield StoreSink(writer, run_id)
