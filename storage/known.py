"""What a run already knows before its fan-out: results this run id stored before (an interrupted
run resumed) and results reused from earlier runs of the same compiler build, chip and options."""

from __future__ import annotations

from dataclasses import dataclass, field

from opbyop.records import RETRYABLE, OpResult, RunInfo, UniqueOp
from opbyop_storage.cache import lookup_cached
from opbyop_storage.dataset import RunWriter, Store


@dataclass
class KnownResults:
    results: dict[str, OpResult] = field(default_factory=dict)  # signature -> result, stored for the run
    todo: list[UniqueOp] = field(default_factory=list)  # the ops still to analyse
    resumed: int = 0  # from this run id's earlier attempt
    reused: int = 0  # from earlier runs

    def line(self, unique: int) -> str:
        return (f"{unique} unique ops: {len(self.todo)} to analyse, {self.resumed} from this run id, "
                f"{self.reused} reused from earlier runs")


def known_results(writer: RunWriter, store: Store, unique: list[UniqueOp], run: RunInfo,
                  reuse: bool) -> KnownResults:
    """Results the run keeps (resumed ones as they are; reused ones written for this run, naming
    their origin), and the ops left to analyse. Retryable outcomes (crashes, infra errors ...) are redone."""
    stored = {r.signature: r for r in store.results(run.run_id)}  # one read; the latest result per op wins
    known = KnownResults(results={s: r for s, r in stored.items() if r.status not in RETRYABLE})
    known.resumed = len(known.results)
    todo = [op for op in unique if op.signature not in known.results]
    if reuse and todo:
        cached = lookup_cached(store, [op.signature for op in todo], run.compiler.key, run.chip, run.options_key,
                               exclude_run=run.run_id)
        reused = [r.model_copy(update={"reused_from": source}) for source, r in
                  (cached[op.signature] for op in todo if op.signature in cached)]
        writer.add_results(reused)
        known.results.update({r.signature: r for r in reused})
        known.reused = len(reused)
        todo = [op for op in todo if op.signature not in known.results]
    known.todo = todo
    return known
