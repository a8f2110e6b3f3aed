"""The local executor: one warm OpWorker of this process analyses each model's ops one after another,
then its whole model; a failing op never stops the others."""

from __future__ import annotations

from typing import Protocol

from opbyop.graph import ModelGraph
from opbyop.records import UniqueOp
from opbyop.run.engine import RunOutcome
from opbyop.run.plan import RunPlan
from opbyop.worker.process import OpWorker
from opbyop.workspace import Workspace


class Progress(Protocol):
    """What a front end shows while the executor works."""

    def begin(self, more: int) -> None: ...  # `more` ops handed out (a model's, as it arrives)

    def step(self, description: str) -> None: ...

    def advance(self) -> None: ...


class Quiet:
    def begin(self, more: int) -> None:
        return None

    def step(self, description: str) -> None:
        return None

    def advance(self) -> None:
        return None


class LocalExecutor:
    """Executor on one OpWorker named `name` (its scratch and logs its own) in `workspace`: each op
    is analysed as it is handed out (the next model exports meanwhile, in the split thread)."""

    def __init__(self, workspace: Workspace, name: str, progress: Progress | None = None):
        self.workspace, self.name, self.progress = workspace, name, progress or Quiet()
        self.plan: RunPlan | None = None
        self.outcome: RunOutcome | None = None
        self._worker: OpWorker | None = None

    def open(self, plan: RunPlan, outcome: RunOutcome) -> None:
        self.plan, self.outcome = plan, outcome

    def submit(self, ops: list[UniqueOp], wholes: dict[str, ModelGraph]) -> None:
        plan, outcome, progress = self.plan, self.outcome, self.progress
        worker = self._started()
        progress.begin(len(ops))
        for op in ops:
            progress.step(op.op_name)
            outcome.add(worker.analyze(op, plan.settings, plan.config.op_timeout_s))
            progress.advance()
        for model, graph in wholes.items():
            progress.step(f"{model} (whole model)")
            outcome.add_whole(model, worker.analyze_whole(graph, plan.settings, timeout=plan.whole_timeout))

    def collect(self) -> None:
        return None  # every result was taken as it was handed out

    def close(self) -> None:
        if self._worker is not None:
            self._worker.__exit__(None, None, None)
            self._worker = None

    def _started(self) -> OpWorker:
        """The warm worker, started by the first op handed out."""
        if self._worker is None:
            self._worker = self.plan.op_worker(self.workspace.root, self.name).__enter__()
        return self._worker
