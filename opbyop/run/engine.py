"""A run's steps, the same for every front end: prepare -> ops -> whole models -> collect.

Who runs the ops is an Executor (opbyop.run.local's warm worker in this process, or the flow's
fan-out on Dask); where results go is a ResultSink (the store, supplied by the package that may
import it; opbyop itself never does). The front ends only parse their options into one
AnalysisConfig and show what comes back.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Callable, Protocol

from opbyop.graph import ModelGraph
from opbyop.compiler.system_desc import dram_bytes
from opbyop.op_memory import misfits
from opbyop.pipeline import Prepared, PrepareOne, prepare, summarize
from opbyop.config import Zoo, load_zoo
from opbyop.records import ModelSummary, OpResult, RunStatus, Stage, Status, UniqueOp, WholeModelResult
from opbyop.run.plan import RunPlan
from opbyop.workspace import Workspace

log = logging.getLogger("opbyop.run")


class ResultSink(Protocol):
    """Where a run's results go as they arrive."""

    def start(self, plan: RunPlan, prepared: Prepared) -> dict[str, OpResult]:
        """Record the run and its ops; the results it already has (signature -> result): not analysed again."""

    def op_done(self, result: OpResult) -> bool:
        """Keep one op's result; True when results reached the sink's storage with this one."""

    def finish(self, outcome: RunOutcome) -> None:
        """Everything analysed: record the run's models and its status."""


class NoSink:
    """A run whose results are only shown."""

    def start(self, plan: RunPlan, prepared: Prepared) -> dict[str, OpResult]:
        return {}

    def op_done(self, result: OpResult) -> bool:
        return False

    def finish(self, outcome: RunOutcome) -> None:
        return None


@dataclass
class RunOutcome:
    """What a run produced so far, and why it stopped early (if it did)."""

    plan: RunPlan
    prepared: Prepared
    sink: ResultSink = field(default_factory=NoSink)
    results: dict[str, OpResult] = field(default_factory=dict)
    wholes: dict[str, WholeModelResult] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)  # model -> artifact digest of its module
    known: int = 0  # results the sink had before the executor started (resumed from the run id, or reused)
    error: str | None = None  # the run could not go on (no op worker could start ...)
    interrupted: bool = False  # the caller asked the run to stop

    def add(self, result: OpResult) -> bool:
        """One op's result, handed on to the sink; True when the sink wrote results with it."""
        self.results[result.signature] = result
        return self.sink.op_done(result)

    def add_whole(self, model: str, result: WholeModelResult) -> None:
        self.wholes[model] = result

    @property
    def status(self) -> RunStatus:
        return RunStatus.FAILED if self.error or self.interrupted else RunStatus.COMPLETED

    def model_summaries(self) -> list[ModelSummary]:
        """One summary per model: split, whole-model result and module; the models that failed to load too."""
        prepared = self.prepared
        models = [summarize(name, prepared, self.wholes.get(name)).model_copy(
            update={"module_artifact": self.modules.get(name)}) for name in prepared.splits]
        return models + [summarize(spec, prepared) for spec in prepared.errors]


class Executor(Protocol):
    """Runs a plan's ops and whole models, putting each result into `outcome` as it arrives."""

    def analyze(self, plan: RunPlan, ops: list[UniqueOp], wholes: dict[str, ModelGraph], outcome: RunOutcome) -> None:
        ...


Phase = Callable[[str], AbstractContextManager]


def prepare_models(plan: RunPlan, workspace: Workspace, zoo: Zoo | None = None,
                   prepare_one: PrepareOne | None = None) -> Prepared:
    """The plan's models split and deduplicated (opbyop.pipeline.prepare), the unique ops kept in the
    workspace for `opbyop repro`."""
    config = plan.config
    prepared = prepare(config.models, zoo or load_zoo(), config.seed, prepare_one=prepare_one,
                       artifacts=workspace.artifacts, target=plan.target, unshard=config.unshard,
                       budget=config.export)
    keep_ops(prepared, workspace)
    return prepared


def keep_ops(prepared: Prepared, workspace: Workspace) -> None:
    """The unique ops kept in the workspace, for `opbyop repro` and the workers' inputs."""
    for op in prepared.unique:
        workspace.ops.put(op)


def fitting_wholes(plan: RunPlan, outcome: RunOutcome, logger: logging.Logger | logging.LoggerAdapter = log) -> dict:
    """The models whose whole-model run fits the chip and the host; the others are skipped here,
    with their figures (weights' bytes against DRAM and host memory), never run out of memory."""
    graphs = outcome.prepared.graphs
    for name, misfit in misfits(graphs, dram_bytes(plan.desc)).items():
        outcome.add_whole(name, WholeModelResult(status=Status.SKIPPED, depth=Stage.SPLIT, message=misfit))
        logger.info("%s: %s", name, misfit)
    return {name: graph for name, graph in graphs.items() if name not in outcome.wholes}


def execute(plan: RunPlan, prepared: Prepared, executor: Executor, sink: ResultSink | None = None, *,
            modules: dict[str, str] | None = None, stop: Callable[[], bool] = lambda: False,
            phase: Phase = lambda name: nullcontext(),
            logger: logging.Logger | logging.LoggerAdapter = log) -> RunOutcome:
    """The run after its prepare step: the sink records it, the executor analyses what the sink does
    not already know (the whole models too, when they fit), the sink receives the collected outcome.
    `phase(name)` times the sink's writes ("store"); `stop()` true before the executor starts: interrupted."""
    outcome = RunOutcome(plan=plan, prepared=prepared, sink=sink or NoSink(), modules=modules or {})
    with phase("store"):
        outcome.results.update(outcome.sink.start(plan, prepared))
    outcome.known = len(outcome.results)
    todo = [op for op in prepared.unique if op.signature not in outcome.results]
    wholes = fitting_wholes(plan, outcome, logger) if plan.config.whole_model else {}
    if plan.config.models and not prepared.graphs:
        outcome.error = "no model could be split"
    elif stop():
        outcome.interrupted = True
    elif todo or wholes:  # no executor for zero ops (the flow's would start a cluster)
        executor.analyze(plan, todo, wholes, outcome)
    with phase("store"):
        outcome.sink.finish(outcome)
    return outcome
