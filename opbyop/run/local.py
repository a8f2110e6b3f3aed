"""The local executor: one warm OpWorker of this process analyses the ops one after another, then
the whole models; a failing op never stops the others."""

from __future__ import annotations

from typing import Protocol

from opbyop.graph import ModelGraph
from opbyop.records import UniqueOp
from opbyop.run.engine import RunOutcome
from opbyop.run.plan import RunPlan
from opbyop.workspace import Workspace


class Progress(Protocol):
    """What a front end shows while the executor works."""

    def begin(self, total: int) -> None: ...

    def step(self, description: str) -> None: ...

    def advance(self) -> None: ...


class Quiet:
    def begin(self, total: int) -> None:
        return None

    def step(self, description: str) -> None:
        return None

    def advance(self) -> None:
        return None


class LocalExecutor:
    """Executor on one OpWorker named `name` (its scratch and logs its own) in `workspace`."""

    def __init__(self, workspace: Workspace, name: str, progress: Progress | None = None):
        self.workspace, self.name, self.progress = workspace, name, progress or Quiet()

    def analyze(self, plan: RunPlan, ops: list[UniqueOp], wholes: dict[str, ModelGraph], outcome: RunOutcome) -> None:
        settings, progress = plan.settings, self.progress
        with plan.op_worker(self.workspace.root, self.name) as worker:
            progress.begin(len(ops))
            for op in ops:
                progress.step(op.op_name)
                outcome.add(worker.analyze(op, settings, plan.config.op_timeout_s))
                progress.advance()
            for model, graph in wholes.items():
                progress.step(f"{model} (whole model)")
                outcome.add_whole(model, worker.analyze_whole(graph, settings, timeout=plan.whole_timeout))
