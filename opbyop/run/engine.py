"""A run's steps, the same for every front end: models -> ops -> results.

The models arrive one at a time (opbyop.run.models: split in a thread of their own while the ops of
those before them run); each is added to the run's Prepared (deduplicated, upstream values), the
sink records its ops and gives back the results it already has, and the executor is handed the ops
left and the model's whole-model run. While the run waits for the next model, the executor collects
what finished. Who runs the ops is an Executor (opbyop.run.local's warm worker in this process, or
the flow's fan-out on Dask); where results go is a ResultSink (the store, supplied by the package
that may import it; opbyop itself never does). The front ends only parse their options into one
AnalysisConfig and show what comes back.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Callable, Protocol

from opbyop.compiler.system_desc import dram_bytes
from opbyop.frontends.export_cache import AGAIN
from opbyop.graph import ModelGraph
from opbyop.op_memory import whole_model_misfit_on
from opbyop.pipeline import Prepared, summarize
from opbyop.records import ModelSummary, OpRecord, OpResult, RunStatus, Stage, Status, UniqueOp, WholeModelResult
from opbyop.run.models import HANDED_BACK, Feed, SplitOutcome
from opbyop.run.plan import RunPlan
from opbyop.run.wholes import whole_key
from opbyop.workspace import Workspace

log = logging.getLogger("opbyop.run")


class ResultSink(Protocol):
    """Where a run's results go as they arrive."""

    def start(self, plan: RunPlan) -> None:
        """Record the run (a run id given again: resumed)."""

    def add_model(self, records: list[OpRecord], new: list[UniqueOp]) -> dict[str, OpResult]:
        """Record one model's ops; the results it already has of `new` (signature -> result): not analysed again."""

    def whole_known(self, key: str) -> WholeModelResult | None:
        """An earlier run's whole-model result for the same key (run.wholes.whole_key), or None."""

    def op_done(self, result: OpResult) -> bool:
        """Keep one op's result; True when results reached the sink's storage with this one."""

    def finish(self, outcome: RunOutcome) -> None:
        """Everything analysed: record the run's models and its status."""


class NoSink:
    """A run whose results are only shown."""

    def start(self, plan: RunPlan) -> None:
        return None

    def add_model(self, records: list[OpRecord], new: list[UniqueOp]) -> dict[str, OpResult]:
        return {}

    def whole_known(self, key: str) -> WholeModelResult | None:
        return None

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
    whole_keys: dict[str, str] = field(default_factory=dict)  # model -> what its whole-model result depends on
    known: int = 0  # results the sink already had (resumed from the run id, or reused from earlier runs)
    error: str | None = None  # the run could not go on (no op worker could start ...)
    interrupted: bool = False  # the caller asked the run to stop
    # Keep of each success only what the run's summary counts once the sink has it (a flow run that
    # shows its results from the store), not its compile, device and golden records (10 KB each)
    settle_successes: bool = False

    def add(self, result: OpResult) -> bool:
        """One op's result, handed on to the sink; True when the sink wrote results with it."""
        written = self.sink.op_done(result)
        self.keep({result.signature: result})
        return written

    def keep(self, results: dict[str, OpResult]) -> None:
        """Results the sink has (signature -> result), as the run keeps them."""
        self.results.update({s: settled_result(r) for s, r in results.items()} if self.settle_successes else results)

    def add_whole(self, model: str, result: WholeModelResult) -> None:
        self.wholes[model] = result

    @property
    def status(self) -> RunStatus:
        return RunStatus.FAILED if self.error or self.interrupted else RunStatus.COMPLETED

    def model_summaries(self) -> list[ModelSummary]:
        """One summary per model: split, whole-model result and module; the models that failed to load too."""
        prepared = self.prepared
        models = [summarize(name, prepared, self.wholes.get(name)).model_copy(
            update={"module_artifact": self.modules.get(name), "whole_key": self.whole_keys.get(name),
                    "export_reused": name in prepared.graphs and prepared.graphs[name].reused})
            for name in prepared.splits]
        return models + [summarize(spec, prepared) for spec in prepared.errors]


def settled_result(result: OpResult) -> OpResult:
    """A successful result as a run that stored it keeps it: its status and timing, not its compile,
    device and golden records; a failure is kept whole (the shrink of failing ops reads it)."""
    if result.status is not Status.SUCCESS:
        return result
    return result.model_copy(update={"compile": None, "device": None, "golden": None, "ttsim": None})


class Executor(Protocol):
    """Runs a plan's ops and whole models, putting each result into the run's outcome as it arrives."""

    def open(self, plan: RunPlan, outcome: RunOutcome) -> None:
        """The run begins (nothing need start yet: a run whose results are all known starts nothing)."""

    def submit(self, ops: list[UniqueOp], wholes: dict[str, ModelGraph]) -> None:
        """Hand out these ops and whole models (the first call starts what runs them); a failure to
        start sets the outcome's error."""

    def collect(self) -> None:
        """Take the results that finished (the run waits for its next model meanwhile)."""

    def close(self) -> None:
        """Wait for every result handed out (unless the run was stopped), then let go of the workers."""


class Clock(Protocol):
    """Where a run's time goes (flows' PhaseClock): a step of its time line, and time spent beside it."""

    def phase(self, name: str) -> AbstractContextManager: ...

    def add(self, name: str, seconds: float) -> None: ...


class NoClock:
    def phase(self, name: str) -> AbstractContextManager:
        return nullcontext()

    def add(self, name: str, seconds: float) -> None:
        return None


def keep_ops(ops: list[UniqueOp], workspace: Workspace) -> None:
    """The unique ops kept in the workspace, for `opbyop repro` and the workers' inputs."""
    for op in ops:
        workspace.ops.put(op)


def fitting_whole(plan: RunPlan, outcome: RunOutcome, name: str, logger: logging.Logger | logging.LoggerAdapter = log
                  ) -> dict[str, ModelGraph]:
    """The model's whole-model run, when it fits the chip and the host; else it is skipped here, with
    its figures (weights' bytes against DRAM and host memory), never run out of memory."""
    graph = outcome.prepared.graphs.get(name)
    if graph is None:
        return {}
    misfit = whole_model_misfit_on(graph, dram_bytes(plan.desc))
    if misfit:
        outcome.add_whole(name, WholeModelResult(status=Status.SKIPPED, depth=Stage.SPLIT, message=misfit))
        logger.info("%s: %s", name, misfit)
        return {}
    return {name: graph}


def _whole_unless_known(plan: RunPlan, outcome: RunOutcome, name: str, graph: ModelGraph,
                        logger: logging.Logger | logging.LoggerAdapter) -> dict[str, ModelGraph]:
    """The model's whole-model run to hand out, or none when the sink has an earlier run's result
    for the same graph, build, chip and options (taken instead)."""
    key = outcome.whole_keys[name] = whole_key(graph, plan)
    known = outcome.sink.whole_known(key) if plan.config.reuse_cached else None
    if known is None:
        return {name: graph}
    outcome.add_whole(name, known)
    logger.info("%s: whole model reused from run %s (%s)", name, known.reused_from, known.status.value)
    return {}


def execute(plan: RunPlan, models: Feed, executor: Executor, sink: ResultSink | None = None, *,
            workspace: Workspace | None = None, keep_modules: bool = False, settle_successes: bool = False,
            stop: Callable[[], bool] = lambda: False, clock: Clock | None = None,
            logger: logging.Logger | logging.LoggerAdapter = log) -> RunOutcome:
    """The run: each model as it arrives added to the run (its new ops kept in `workspace`, their
    upstream values computed, with `keep_modules` its module stored for the viewers), the sink asked
    what it already has, the executor handed the rest; then every result collected and the sink
    given the outcome (with `settle_successes`, the outcome keeps of each success what its summary
    counts: settled_result). `stop()` true between models: the run is interrupted there. `clock`
    times the steps: waiting for a model's export ("export"), adding it ("split"), the sink ("store")."""
    clock = clock or NoClock()
    outcome = RunOutcome(plan=plan, prepared=Prepared(), sink=sink or NoSink(), settle_successes=settle_successes)
    with clock.phase("store"):
        outcome.sink.start(plan)
    executor.open(plan, outcome)
    try:
        arrivals = models.arriving(idle=executor.collect, stop=stop)
        while not (outcome.error or stop()):
            with clock.phase("export"):  # waiting for the next model; the ops handed out run meanwhile
                model = next(arrivals, None)
            if model is None or stop():
                break
            clock.add(f"export {model.spec}", model.seconds)
            _arrived(plan, outcome, model, executor, workspace, keep_modules, clock, logger)
            del model  # the run keeps only what Prepared.settle left of it
        arrivals.close()  # the models not taken are let go of
        outcome.interrupted = outcome.interrupted or stop()
        if plan.config.models and not outcome.prepared.graphs and not (outcome.error or outcome.interrupted):
            outcome.error = "no model could be split"
    finally:
        executor.close()  # the results still out, taken (the executor times its own steps)
    with clock.phase("store"):
        outcome.sink.finish(outcome)
    return outcome


def _arrived(plan: RunPlan, outcome: RunOutcome, model: SplitOutcome, executor: Executor, workspace: Workspace | None,
             keep_modules: bool, clock: Clock, logger: logging.Logger | logging.LoggerAdapter) -> None:
    """One model (a SplitOutcome) added to the run and its ops left to analyse handed out."""
    with clock.phase("split"):
        name, new = outcome.prepared.add(model.spec, model.graph, model.split, model.error, target=plan.target,
                                         unshard=plan.config.unshard, reuse=plan.config.reuse_cached,
                                         artifacts=workspace.artifacts if workspace else None)
        if name in outcome.prepared.errors:
            logger.error("model %s produced no ops: %s", name, outcome.prepared.errors[name])
            return
        for note in outcome.prepared.graphs[name].notes if name in outcome.prepared.graphs else []:
            if note.startswith((AGAIN, HANDED_BACK)):  # a kept export not used, an export the cluster
                logger.warning("%s: %s", name, note)  # could not take: said, not silent
        if workspace is not None:
            keep_ops(new, workspace)
            graph = outcome.prepared.graphs.get(name)
            if keep_modules and graph is not None and graph.module_text:  # the graph a viewer draws
                outcome.modules[name] = workspace.artifacts.put(graph.module_text.encode(), ".mlir")
    with clock.phase("store"):
        known = outcome.sink.add_model(outcome.prepared.splits[name].ops, new)
    outcome.keep(known)
    outcome.known += len(known)
    todo = [op for op in new if op.signature not in known]
    wholes = fitting_whole(plan, outcome, name, logger) if plan.config.whole_model else {}
    if wholes:
        wholes = _whole_unless_known(plan, outcome, name, wholes[name], logger)
    logger.info("%s: %d ops, %d new unique (%d to analyse)", name, len(outcome.prepared.splits[name].ops),
                len(new), len(todo))
    if todo or wholes:
        executor.submit(todo, wholes)
    outcome.prepared.settle(name, kept=new if workspace is not None else [])
