"""What a run already knows of an op before it is handed out: results this run id stored before (an
interrupted run resumed) and results reused from earlier runs of the same compiler build, chip and
options, made by the same opbyop code. Asked model by model, as the run's models arrive."""

from __future__ import annotations

from opbyop.records import RETRYABLE, OpResult, RunInfo, UniqueOp, WholeModelResult
from opbyop_storage.cache import CachedResults
from opbyop_storage.dataset import RunWriter, Store


class KnownResults:
    """The results of `run` that need no analysis, from the store behind `writer`; with `reuse`, also
    those of earlier runs (written for this run, naming their origin). Retryable outcomes (crashes,
    infra errors ...) are redone."""

    def __init__(self, writer: RunWriter, store: Store, run: RunInfo, reuse: bool):
        self.writer, self.store, self.run, self.reuse = writer, store, run, reuse
        stored = {r.signature: r for r in store.results(run.run_id)}  # one read; the latest result per op wins
        self.stored = {s: r for s, r in stored.items() if r.status not in RETRYABLE}
        self.unique = self.todo = self.resumed = self.reused = self.wholes_reused = 0
        # earlier runs' results: the store scanned once for the run, not once per model
        self.cache = CachedResults(store, run.compiler.key, run.chip, run.options_key, run.verdict_code,
                                   exclude_run=run.run_id) if reuse else None

    def of(self, ops: list[UniqueOp]) -> dict[str, OpResult]:
        """signature -> result, for the ops of `ops` that need no analysis."""
        known = {op.signature: self.stored[op.signature] for op in ops if op.signature in self.stored}
        todo = [op for op in ops if op.signature not in known]
        if self.cache is not None and todo:
            cached = self.cache.lookup(op.signature for op in todo)
            reused = [r.model_copy(update={"reused_from": source}) for source, r in
                      (cached[op.signature] for op in todo if op.signature in cached)]
            self.writer.add_results(reused)
            known.update({r.signature: r for r in reused})
            self.reused += len(reused)
        self.resumed += len(ops) - len(todo)
        self.unique += len(ops)
        self.todo += len(ops) - len(known)
        return known

    def whole(self, key: str) -> WholeModelResult | None:
        """An earlier run's whole-model result for `key` (run.wholes.whole_key), naming its origin."""
        if self.cache is None:
            return None
        found = self.cache.whole(key)
        if found is None:
            return None
        origin, result = found
        self.wholes_reused += 1
        return result.model_copy(update={"reused_from": origin})

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()

    def line(self) -> str:
        return (f"{self.unique} unique ops: {self.todo} to analyse, {self.resumed} from this run id, "
                f"{self.reused} reused from earlier runs; {self.wholes_reused} whole models reused")
