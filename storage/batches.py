"""Results written to the store in batches as they arrive: an interruption loses only the batch in
flight, and the store is not written once per op (a Parquet part per op would slow every query)."""

from __future__ import annotations

import time

from opbyop.records import OpResult
from opbyop_storage.dataset import RunWriter

BATCH_SIZE = 25
BATCH_SECONDS = 10.0


class ResultBatches:
    """Collects results; writes them when `size` are waiting or `seconds` passed since the last write."""

    def __init__(self, writer: RunWriter, size: int = BATCH_SIZE, seconds: float = BATCH_SECONDS):
        self.writer, self.size, self.seconds = writer, size, seconds
        self._waiting: list[OpResult] = []
        self._flushed = time.monotonic()
        self.writing_seconds = 0.0  # time spent writing (the run's "store" phase)

    def add(self, result: OpResult) -> bool:
        """Keep `result`; True when a batch was written."""
        self._waiting.append(result)
        return self.flush_if_due()

    def flush_if_due(self) -> bool:
        due = len(self._waiting) >= self.size or (self._waiting and time.monotonic() - self._flushed > self.seconds)
        if due:
            self.flush()
        return bool(due)

    def flush(self) -> None:
        started = time.monotonic()
        try:
            self.writer.add_results(self._waiting)
            self._waiting = []  # kept when the write failed: the caller may try again
        finally:
            self._flushed = time.monotonic()
            self.writing_seconds += self._flushed - started
