"""How one analyze run is carried out: its state in one object, its steps as methods.

The flow (flows/analyze.py) declares the run and its parameters; AnalyzeRun does the work, with
the run engine's steps (opbyop.run.engine, the same as the CLI's local run) and the store as its sink:
1. split every model (a model that fails is recorded, the others go on); none left: the run is
   stored as failed, no cluster is started;
2. dedupe across models; reuse results of ops already analysed with the same signature, compiler
   version, chip and options (configurable) and of ops this run id already finished;
3. the cluster's op workers are warmed up; if none can start (a descriptor no compiler accepts), the
   run stops here with that one error;
4. each model's whole-model analysis goes to the cluster first, then one Prefect task per remaining
   op; results are written to the store in batches as they arrive, so an interruption loses only
   the batch in flight;
5. the run is finished in the store with its phases (where its time went); the summary says how
   many ops failed and why; the report and artifacts follow.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field

from distributed import Client
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from prefect.futures import PrefectFuture
from prefect.states import Cancelled, Completed, Failed, State

from opbyop_flows.engine.phases import PhaseClock, format_phases
from opbyop_flows.engine.summary import RunFailed, RunSummary
from opbyop_flows.hosting.cluster import dask_client
from opbyop_flows.hosting.handoff import Handoff
from opbyop.compiler.assets import Notices
from opbyop.compiler.system_desc import SystemDesc
from opbyop.config import AnalysisConfig, AnalysisSettings, ShrinkOption
from opbyop.errors import OpbyopError
from opbyop.pipeline import Prepared, run_manifest_path, store_modules, write_manifest
from opbyop.records import OpResult, RunInfo, Stage, Status, UniqueOp, WholeModelResult
from opbyop.stage_call import StageCall
from opbyop.run.engine import RunOutcome, prepare_models
from opbyop.run.engine import execute as run_engine
from opbyop.run.plan import RunPlan
from opbyop.worker import dask as on_dask
from opbyop.worker.process import WorkerStartError, parameter_indices
from opbyop.workspace import Workspace
from opbyop_storage.dataset import Store
from opbyop_storage.run_sink import StoreSink
from opbyop_tasks.gate import ClusterGate
from opbyop_tasks.models import split_model, stage_whole_model
from opbyop_tasks.ops import analyze_op, whole_model
from opbyop_tasks.shrink import shrink_failing_ops
from opbyop_tasks.store import publish

POLL_SECONDS = 0.5  # how often the fan-out looks for a stop request between results


@dataclass
class AnalyzeRun:
    """One analyze run: what it was asked, what it runs on, and what it has produced so far. It is the
    run engine's executor (opbyop.run.engine) for the cluster: the engine's steps, its fan-out."""

    config: AnalysisConfig
    run_id: str
    shrink: ShrinkOption | None
    handoff: Handoff
    logger: logging.Logger | logging.LoggerAdapter
    workspace: Workspace = field(default_factory=Workspace.default)
    group_id: str = ""  # the runs started with this one, one per compiler build ("" alone)
    given: Prepared | None = None  # the models already split by an earlier run of the group
    client: Client | None = None  # a cluster already open (the group's), kept open after this run
    clock: PhaseClock = field(init=False)
    plan: RunPlan = field(init=False)
    out: RunOutcome | None = None
    sink: StoreSink | None = None
    prepared: Prepared | None = None
    modules: dict[str, str] = field(default_factory=dict)  # model -> artifact digest of its module

    def __post_init__(self) -> None:
        self.clock = PhaseClock(self.handoff.phases, self.handoff.started, self.handoff.flow_called)
        self.clock.mark("flow start")
        # a first use of the compiler prepares it, of the chip makes its descriptor: said, and timed
        notices = Notices(say=self.logger.info)
        with self.clock.phase("descriptor"):
            self.plan = RunPlan.from_config(self.config, notices=notices)
        self.clock.reassign("descriptor", notices.seconds)
        self.logger.info("compiler: %s", self.plan.compiler.label)

    @property
    def desc(self) -> SystemDesc:
        return self.plan.desc

    @property
    def settings(self) -> AnalysisSettings:
        return self.plan.settings

    @property
    def store(self) -> Store:
        return Store(self.workspace.store)

    def info(self) -> RunInfo:
        return self.plan.run_info(self.run_id, self.group_id)

    def execute(self) -> State:
        """The whole run, from the split to the report; the flow's final state."""
        prepared = self.prepare()
        with self.store.writer() as writer:
            self.clock.mark("store")  # the store's run lock, taken (another run may hold it)
            self.sink = StoreSink(writer, self.run_id, phases=self.clock.as_dict,
                                  run=self.info(), logger=self.logger)
            self.out = run_engine(self.plan, prepared, self, self.sink, modules=self.modules,
                                  stop=self.handoff.stop.is_set, phase=self.clock.phase, logger=self.logger)
        self.clock.mark("store")  # the writer's last batch, flushed as it closes
        return self.conclude(self.sink.run)

    def prepare(self) -> Prepared:
        """Each model split in its own task (one at a time: torch.export is not thread-safe), or taken
        from the caller that split it ahead; then deduplicated, with the values of constant-fed
        arguments computed upstream (opbyop.run.engine.prepare_models). The unique ops and the manifest are
        kept in the workspace."""
        def one(spec: str, zoo, seed: int):  # noqa: ANN001, ANN202
            self.clock.mark("split")
            with self.clock.phase(f"export {spec}"):  # waiting for it: it may have been exported ahead
                outcome = split_model.submit(spec, zoo, seed, self.handoff.splits.get((spec, seed)),
                                             self.config.export).result()
            self.clock.add(f"export {spec}", outcome.seconds)  # its own time, partly beside the start-up
            return outcome.triple

        if self.given is not None:  # split by the group's first run: the same ops, compiled by another build
            self.keep(self.given)
            self.modules = store_modules(self.given, self.workspace.artifacts)
            return self.given
        prepared = prepare_models(self.plan, self.workspace, prepare_one=one)
        for spec, error in prepared.errors.items():
            self.logger.error("model %s produced no ops: %s", spec, error)
        self.keep(prepared)
        self.modules = store_modules(prepared, self.workspace.artifacts)  # each model's graph, for Model Explorer
        self.clock.mark("split")
        return prepared

    def keep(self, prepared: Prepared) -> None:
        """The split's manifest kept in the workspace; `prepared` is the run's from now on."""
        write_manifest(prepared, run_manifest_path(self.workspace.root, self.run_id))
        self.prepared = prepared

    def analyze(self, plan: RunPlan, todo: list[UniqueOp], wholes: dict, outcome: RunOutcome) -> None:
        """The engine's executor step: the ops and whole models on the cluster."""
        self.out = outcome
        self.on_cluster(todo, wholes)

    def on_cluster(self, todo: list[UniqueOp], wholes: dict) -> None:
        """Warm the cluster's op workers, then the fan-out, then (if asked) the shrink of failing ops."""
        try:
            with self.clock.phase("cluster"):
                cluster = nullcontext(self.client) if self.client is not None else dask_client(self.config.cluster)
                client = cluster.__enter__()
        except OpbyopError as e:
            self._stop_with(str(e))
            return
        plugin = on_dask.OpWorkerPlugin.for_home(self.workspace.root, {self.desc.chip: self.desc.path.read_bytes()},
                                                 host_devices=self.plan.host_devices, compiler=self.plan.compiler)
        try:
            with self.clock.phase("warm-up"):
                error = warm_up(client, plugin, self.desc)
            if error:
                self._stop_with(error)
                return
            if self.handoff.stop.is_set():
                self.out.interrupted = True
                return
            self.fan_out(client, plugin.name, todo, wholes)
            if self.shrink is not None and self.shrink.failing and not self.out.interrupted:
                with self.clock.phase("shrink"):
                    shrink_failing_ops(self.shrink, self.out.results, self.prepared.unique, self.desc.chip,
                                       self.settings, self.config.op_timeout_s, plugin.name, self.sink.writer, self.logger)
        finally:
            rest(client, plugin.name, self.logger)  # a cluster that outlives the run keeps only main children
            with self.clock.phase("cluster"):  # a cluster of the run's own takes seconds to stop
                cluster.__exit__(None, None, None)

    def fan_out(self, client: Client, plugin: str, todo: list[UniqueOp], wholes: dict) -> None:
        """One Prefect task per op (the whole models first: the longest jobs), results stored in
        batches as they arrive; a stop request stops the work in flight on the cluster."""
        gate = ClusterGate(client, plugin)
        chip, settings, timeout = self.desc.chip, self.settings, self.config.op_timeout_s
        started = time.monotonic()
        whole_futures = {}
        for name, graph in wholes.items():
            staged = stage_whole_model.submit(graph, self.workspace.scratch)
            whole_futures[name] = whole_model.submit(name, staged, parameter_indices(graph), chip, settings,
                                                     max(600.0, timeout), plugin, gate, self.workspace.artifacts)
        progress = create_progress_artifact(progress=0.0, description=f"ops analysed, run {self.run_id}")
        artifacts = self.workspace.artifacts  # the flow's: ops' inputs come from it, their results' land in it
        futures = {analyze_op.submit(op, _label(op), chip, settings, timeout, plugin, gate, artifacts): op
                   for op in todo}
        done: queue.Queue[PrefectFuture] = queue.Queue()
        for future in list(futures) + list(whole_futures.values()):
            future.add_done_callback(done.put)
        whole_of = {f: name for name, f in whole_futures.items()}
        batches = self.sink.batches
        total = len(futures)  # each op's future is dropped once its result is taken: 20k states are not held
        finished, remaining = 0, total + len(whole_futures)
        try:
            while remaining:
                if self.handoff.stop.is_set():
                    self.out.interrupted = True
                    break
                try:
                    future = done.get(timeout=POLL_SECONDS)
                except queue.Empty:
                    batches.flush_if_due()  # results reach the store in a lull too
                    continue
                remaining -= 1
                if future in whole_of:
                    self.out.add_whole(whole_of[future], _whole_result(future))
                    self.clock.add("whole model", time.monotonic() - started)
                    continue
                written = self.out.add(_op_result(future, futures.pop(future)))
                finished += 1
                if finished == total:
                    self.clock.add("ops", time.monotonic() - started)  # the ops' span
                    self.clock.mark("fan-out")
                if written:
                    update_progress_artifact(progress, progress=100.0 * finished / max(1, total))
        finally:  # whatever stops the loop, what was analysed is kept: a re-run of the id resumes
            if remaining:  # the run is stopping: the work in flight is cancelled and stopped
                self.logger.warning("stopping the run's work on the cluster: %s", gate.close())
            batches.flush()
            self.clock.add("store", batches.writing_seconds)  # inside the fan-out
            self.clock.mark("whole model" if whole_futures and finished == total else "fan-out")
        if not self.out.interrupted:
            update_progress_artifact(progress, progress=100.0)

    def summary(self) -> RunSummary:
        results, prepared = self.out.results, self.prepared
        failures = Counter(r.failed_stage.value for r in results.values() if r.failed_stage is not None)
        return RunSummary(run_id=self.run_id, models=list(prepared.graphs), ops_total=len(prepared.records),
                          ops_unique=len(prepared.unique), reused=sum(1 for r in results.values() if r.reused_from),
                          statuses=dict(Counter(r.status.value for r in results.values())), failures=dict(failures),
                          model_errors=prepared.errors, whole={m: w.status.value for m, w in self.out.wholes.items()},
                          error=self.out.error, compiler=self.plan.compiler.label)

    def conclude(self, run: RunInfo) -> State:
        """The summary, the artifacts and the report; the flow's final state."""
        summary = self.summary()
        if self.out.interrupted:
            summary.phases = self.clock.as_dict()
            self.logger.warning(summary.line())
            return Cancelled(message=f"interrupted; {summary.line()}", data=summary)
        report_path = self.workspace.root / "reports" / f"{self.run_id}.html"
        with self.clock.phase("report"):
            self._artifacts(summary)
            summary.report = str(publish(self.workspace.store, self.run_id, report_path, self.clock.as_dict()))
        summary.phases = self.clock.as_dict()
        self.store.update_run(run.model_copy(update={"phases": summary.phases}))
        self.logger.info("%s\nphases: %s", summary.line(), format_phases(summary.phases))
        if self.out.error:
            return Failed(message=summary.line(), data=RunFailed(summary))
        return Completed(message=summary.line(), data=summary)

    def _stop_with(self, error: str) -> None:
        self.out.error = error
        self.logger.error(error)

    def _artifacts(self, summary: RunSummary) -> None:
        rows = []
        for name, split in self.prepared.splits.items():
            statuses = Counter(self.out.results[r.signature].status.value for r in split.ops
                               if r.signature in self.out.results)
            rows.append({"model": name, "ops": len(split.ops), "unique": len({r.signature for r in split.ops}),
                         **{s.value: statuses.get(s.value, 0) for s in Status},
                         "whole model": summary.whole.get(name, "-")})
        rows += [{"model": name, "ops": 0, "unique": 0, "error": error} for name, error in summary.model_errors.items()]
        create_table_artifact(table=rows, key="run-summary", description=summary.line())


def warm_up(client: Client, plugin: on_dask.OpWorkerPlugin, desc: SystemDesc) -> str | None:
    """Start every Dask worker's op worker (the plugin's start-up is serialised per machine: 3-4 s
    each). The fan-out begins as soon as one is ready; the others join as they become ready. The
    error that stops the run when none can start (a worker that cannot while others can only loses
    the ops it is given)."""
    client.register_plugin(plugin)
    workers = list(client.scheduler_info()["workers"])
    if not workers:
        return (f"the Dask cluster at {client.scheduler.address} has no workers; fix: start some "
                f"(dask worker {client.scheduler.address}), or leave the address empty for a local cluster")
    outcomes: queue.Queue[BaseException | None] = queue.Queue()

    def warm(worker: str) -> None:
        try:
            client.run(on_dask.warm_up, plugin.name, desc.chip, workers=[worker])
            outcomes.put(None)
        except BaseException as e:  # noqa: BLE001  (reported below when every worker fails)
            outcomes.put(e)

    for worker in workers:
        threading.Thread(target=warm, args=(worker,), name=f"warm-up-{worker}", daemon=True).start()
    failures = []
    for _ in workers:
        error = outcomes.get()
        if error is None:
            return None
        failures.append(error)
    first = failures[0]
    kind = "descriptor or compiler" if isinstance(first, WorkerStartError) else "cluster"
    compiler = f" and {plugin.compiler.label}" if plugin.compiler is not None else ""
    return (f"no op worker could start on any of the {len(workers)} Dask workers with the {desc.chip} system "
            f"descriptor {desc.path}{compiler} (a {kind} problem, nothing analysed): {type(first).__name__}: {first}; "
            f"fix: check the descriptor with `opbyop system-desc {desc.path}`, or choose another --chip")


def rest(client: Client, plugin: str, logger: logging.Logger | logging.LoggerAdapter) -> None:
    """The op workers' side children stopped on every Dask worker (best effort: a worker that is gone
    has none)."""
    try:
        client.run(on_dask.rest, plugin)
    except Exception as e:  # noqa: BLE001  (memory, not results: the run stands)
        logger.warning("could not stop the op workers' side children: %s: %s", type(e).__name__, e)


def _label(op: UniqueOp) -> str:
    return f"{op.op_name.removeprefix('stablehlo.')}-{op.signature[:10]}"


def _op_result(future: PrefectFuture, op: UniqueOp) -> OpResult:
    """The task's result; a task that failed for good (the cluster, twice) is that op's infra_error."""
    call = StageCall.of(future.result)
    if call.ok:
        return call.value
    return OpResult.failure(op.signature, op.op_name, Status.INFRA_ERROR,
                            f"the cluster failed while running this op: {call.brief}")


def _whole_result(future: PrefectFuture) -> WholeModelResult:
    try:
        return future.result()
    except Exception as e:
        return WholeModelResult(status=Status.INFRA_ERROR, depth=Stage.SPLIT,
                                message=f"the cluster failed while running the whole model: {type(e).__name__}: {e}")
