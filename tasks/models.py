"""Load and split one model (in the flow's process: graphs hold the weights the whole-model run needs)."""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from opbyop.config import ExportBudget, Zoo
from opbyop.graph import ModelGraph
from opbyop.ir.rewrite import rewritten_text
from opbyop.ir.split import SplitResult
from opbyop.pipeline import prepare_model
from opbyop.worker.process import write_values


@dataclass
class SplitOutcome:
    """pipeline.prepare_model's (graph, split, error), with its wall time."""

    graph: ModelGraph | None
    split: SplitResult | None
    error: str | None
    seconds: float = 0.0  # loading, exporting and splitting the model

    @property
    def triple(self) -> tuple[ModelGraph | None, SplitResult | None, str | None]:
        return self.graph, self.split, self.error


def split_outcome(spec: str, zoo: Zoo, seed: int, budget: ExportBudget | None = None) -> SplitOutcome:
    """pipeline.prepare_model, timed."""
    start = time.monotonic()
    graph, split, error = prepare_model(spec, zoo, seed, budget)
    return SplitOutcome(graph, split, error, time.monotonic() - start)


@task(name="split-model", task_run_name="split-{spec}", cache_policy=NONE, persist_result=False)
def split_model(spec: str, zoo: Zoo, seed: int, ready: Future | None = None,
                budget: ExportBudget | None = None) -> SplitOutcome:
    """A model that cannot be exported or split is an error, not an exception. `ready`: the same
    work started earlier by the caller (the CLI splits while the server starts)."""
    return ready.result() if ready is not None else split_outcome(spec, zoo, seed, budget)


@task(name="stage-whole-model", task_run_name="stage-{graph.name}", cache_policy=NONE, persist_result=False)
def stage_whole_model(graph: ModelGraph, scratch: Path) -> tuple[str, str]:
    """(rewritten module text, path of the npz with its arguments and reference outputs)."""
    values = write_values(graph, scratch / f"{graph.name}-values.npz")
    return rewritten_text(graph.module_text, graph.name), str(values)
