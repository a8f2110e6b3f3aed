"""How one analyze run is carried out: its state in one object, its steps as methods.

The flow (flows/analyze.py) declares the run and its parameters; AnalyzeRun does the work, with
the run engine's steps (opbyop.run.engine, the same as the CLI's local run) and the store as its sink.
AnalyzeRun is the engine's executor for the cluster:
1. the models are split one after another in the caller's split thread (opbyop.run.models; the CLI
   asks for them while its server and cluster start), those that must be exported exported on the
   cluster, several at once (flows/hosting/cluster_exports.py); as each arrives its ops are deduplicated
   against the models before it, results this run id or earlier runs already have are taken, and
   the rest go to the cluster at once, one Prefect task per op (its whole model first: the longest
   job), while the next model exports; a model that fails is recorded, the others go on;
2. the first ops handed out start the cluster's op workers; if none can start (a descriptor no
   compiler accepts), the run stops there with that one error; a run with nothing to analyse
   starts nothing; a cluster opbyop started that is lost is started again, and what was on it
   handed out again (flows/hosting/run_cluster.py: a user's lost scheduler stops the run);
3. results are written to the store in batches as they arrive, so an interruption loses only the
   batch in flight;
4. the run is finished in the store with its phases (where its time went); the summary says how
   many ops failed and why; the report and artifacts follow.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field

from distributed import Client
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from prefect.futures import PrefectFuture
from prefect.states import Cancelled, Completed, Failed, State
from prefect.utilities.annotations import quote

from opbyop_flows.engine.phases import PhaseClock, format_phases
from opbyop_flows.engine.summary import RunFailed, RunSummary
from opbyop_flows.hosting.cluster_exports import ClusterExports
from opbyop_flows.hosting.handoff import Handoff
from opbyop_flows.hosting.run_cluster import RunCluster, standing_address
from opbyop.compiler.assets import Notices
from opbyop.compiler.system_desc import SystemDesc
from opbyop.config import AnalysisConfig, AnalysisSettings, ShrinkOption
from opbyop.errors import OpbyopError
from opbyop.graph import ModelGraph
from opbyop.pipeline import run_manifest_path, write_manifest
from opbyop.records import OpResult, RunInfo, Stage, Status, UniqueOp, WholeModelResult
from opbyop.run.models import PlaceRefused
from opbyop.stage_call import StageCall
from opbyop.run.engine import RunOutcome
from opbyop.run.engine import execute as run_engine
from opbyop.run.models import Feed
from opbyop.run.plan import RunPlan
from opbyop.worker import dask as on_dask
from opbyop.worker.process import WorkerStartError, parameter_indices
from opbyop.workspace import Workspace
from opbyop_storage.dataset import Store
from opbyop_storage.run_sink import StoreSink
from opbyop_tasks.gate import ClusterGate
from opbyop_tasks.models import stage_whole_model
from opbyop_tasks.ops import analyze_op, whole_model
from opbyop_tasks.shrink import shrink_failing_ops
from opbyop_tasks.store import publish

POLL_SECONDS = 0.5  # how often the fan-out looks for a stop request between results


@dataclass
class FanOut:
    """What the run handed to the cluster and has not taken back yet."""

    plugin: on_dask.OpWorkerPlugin  # the op workers' (warmed again on a restarted cluster)
    gate: ClusterGate  # the cluster's now: a restarted cluster has a new one
    progress: object  # the Prefect progress artifact's id
    started: float = field(default_factory=time.monotonic)
    # each op out: its (signature, op name) and the gate it went through, not the op (the run keeps it
    # settled; the workspace's op index has it whole); dropped once taken
    ops: dict[PrefectFuture, tuple[str, str, ClusterGate]] = field(default_factory=dict)
    wholes: dict[PrefectFuture, tuple[str, PrefectFuture, list[int], ClusterGate]] = field(default_factory=dict)
    done: queue.Queue[PrefectFuture] = field(default_factory=queue.Queue)
    handed: int = 0  # ops handed out so far
    finished: int = 0  # ops taken back
    last_op: float | None = None  # time.monotonic() of the last op result, and of the last whole model's
    last_whole: float | None = None
    lost: int = 0  # times the cluster was lost, and started again
    restarts: int = 0
    redone: int = 0  # ops handed out again on a restarted cluster, and whole models
    wholes_redone: int = 0

    @property
    def remaining(self) -> int:
        return len(self.ops) + len(self.wholes)


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
    cluster: RunCluster | None = None  # a cluster already open (the group's), kept open after this run
    clock: PhaseClock = field(init=False)
    plan: RunPlan = field(init=False)
    out: RunOutcome | None = None
    sink: StoreSink | None = None
    fan: FanOut | None = None  # the cluster's side of the run, from the first op handed out
    _cluster: ExitStack = field(default_factory=ExitStack)  # what the run started on the cluster: closed at its end
    _cluster_asked: bool = False
    # a LocalCluster of the run's own is opened by the run's thread (its client is that thread's default):
    # the first export asks for it (wanted), the run's thread opens it while it waits for a model (opened)
    _cluster_wanted: threading.Event = field(default_factory=threading.Event)
    _cluster_opened: threading.Event = field(default_factory=threading.Event)
    _exports: ClusterExports | None = None  # where the run's models are exported, once it asks for them

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

    @property
    def prepared(self):  # noqa: ANN201  (opbyop.pipeline.Prepared)
        return self.out.prepared

    def info(self) -> RunInfo:
        return self.plan.run_info(self.run_id, self.group_id)

    def models(self) -> Feed:
        """The run's models, from the caller's split thread (asked there already by the CLI, or by an
        earlier run of the group or the nightly: split once), exported on the run's cluster."""
        self._exports = ClusterExports(self._export_address, self.logger)
        return self.handoff.splits.ask(self.config.models, self.config.seed, self.config.export,
                                       self.plan.host_devices, weights=self.config.keeps_weights,
                                       reuse=self.config.reuse_cached, place=self._exports)

    def _export_address(self) -> str:
        """The cluster's address for the run's exports (called from an export's thread): one that runs
        apart from this process at once; a LocalCluster of the run's own once the run's thread opened it.
        A lost cluster is not restarted here (the fan-out does that): its exports are made in this process."""
        address = standing_address(self.config.cluster, self.handoff.cluster)
        if address:
            return address
        self._cluster_wanted.set()
        self._cluster_opened.wait()
        if self.cluster is None:
            raise PlaceRefused("the run's own Dask cluster did not start (the run says why)")
        return self.cluster.address

    def _open_wanted_cluster(self) -> None:
        """The run's own cluster opened for its exports, if one asked (in the run's thread)."""
        if self._cluster_wanted.is_set() and not self._cluster_opened.is_set():
            started = time.monotonic()
            try:  # inside the time line's wait for a model: beside it
                self._open_cluster()
                self.clock.add("cluster", time.monotonic() - started)
            except OpbyopError as e:
                self.logger.warning("no cluster for the exports: %s", e)
            finally:
                self._cluster_opened.set()

    def _open_cluster(self) -> None:
        self._cluster_asked = True
        if self.cluster is None:
            self.cluster = self._cluster.enter_context(RunCluster(self.config.cluster, self.handoff.cluster))
        elif self.cluster.lost():  # the group's, lost since the run before
            self.cluster.restart(self.run_id)

    def execute(self) -> State:
        """The whole run, from the first model's split to the report; the flow's final state."""
        with self.store.writer() as writer:
            self.clock.mark("store")  # the store's run lock, taken (another run may hold it)
            self.sink = StoreSink(writer, self.run_id, phases=self.clock.as_dict, run=self.info(), logger=self.logger)
            self.out = run_engine(self.plan, self.models(), self, self.sink, workspace=self.workspace,
                                  keep_modules=True, settle_successes=True, stop=self.handoff.stop.is_set,
                                  clock=self.clock, logger=self.logger)
        self.clock.mark("store")  # the writer's last batch, flushed as it closes
        write_manifest(self.out.prepared, run_manifest_path(self.workspace.root, self.run_id))
        return self.conclude(self.sink.run)

    # the engine's executor: open, submit, collect, close

    def open(self, plan: RunPlan, outcome: RunOutcome) -> None:
        self.out = outcome

    def submit(self, ops: list[UniqueOp], wholes: dict[str, ModelGraph]) -> None:
        """A model's ops (and its whole model) to the cluster, started by the first of them: one
        Prefect task each; a stop request leaves them."""
        if self.handoff.stop.is_set() or (self.fan is None and not self._start_cluster()):
            return
        if self.out.error:  # the cluster was lost while this model exported: the run stops
            return
        for name, graph in wholes.items():
            self._hand_whole(name, stage_whole_model.submit(quote(graph), self.workspace.scratch),
                             parameter_indices(graph))
        for op in ops:
            self._hand_op(op)
        self.fan.handed += len(ops)

    def _hand_op(self, op: UniqueOp) -> None:
        """The op as a Prefect task on the cluster. Its arguments that hold no future are quoted: Prefect
        would otherwise walk every field of each (the op, the settings, the gate, the artifact store)
        several times per task run looking for futures, about a quarter of the flow's own CPU per op."""
        fan = self.fan  # the flow's artifacts: the op's inputs come from them, its result's land there
        future = analyze_op.submit(quote(op), _label(op), self.desc.chip, quote(self.settings),
                                   self.config.op_timeout_s, fan.plugin.name, quote(fan.gate),
                                   quote(self.workspace.artifacts))
        fan.ops[future] = (op.signature, op.op_name, fan.gate)
        future.add_done_callback(fan.done.put)

    def _hand_whole(self, name: str, staged: PrefectFuture, parameters: list[int]) -> None:
        fan = self.fan
        future = whole_model.submit(name, staged, parameters, self.desc.chip, quote(self.settings),
                                    self.plan.whole_timeout, fan.plugin.name, quote(fan.gate),
                                    quote(self.workspace.artifacts))  # `staged` is a future: not quoted
        fan.wholes[future] = (name, staged, parameters, fan.gate)
        future.add_done_callback(fan.done.put)

    def collect(self) -> None:
        """The results that arrived, into the outcome (and the store, in batches); the run's own cluster
        opened when an export asks for it."""
        self._open_wanted_cluster()
        if self.fan is not None:
            self._take(wait=0.0)

    def close(self) -> None:
        """Every result handed out taken back (a stop request cancels the work in flight on the
        cluster), then the shrink of failing ops when asked; the op workers rest."""
        fan = self.fan
        try:
            if fan is None:
                return
            try:
                with self.clock.phase("fan-out"):  # the results still out after the last model was handed out
                    while fan.remaining and not self.out.interrupted:
                        self._take(wait=POLL_SECONDS)
            finally:  # whatever stops the loop, what was analysed is kept: a re-run of the id resumes
                if fan.remaining:  # the run is stopping: the work in flight is cancelled and stopped
                    self.logger.warning("stopping the run's work on the cluster: %s", fan.gate.close())
                self.sink.batches.flush()
                self.clock.add("store", self.sink.batches.writing_seconds)  # inside the fan-out
                for name, last in (("ops", fan.last_op), ("whole model", fan.last_whole)):
                    if last is not None:
                        self.clock.add(name, last - fan.started)  # its span, from the first op handed out
            if not self.out.interrupted:
                update_progress_artifact(fan.progress, progress=100.0)
            if self.shrink is not None and self.shrink.failing and not (self.out.interrupted or self.out.error):
                with self.clock.phase("shrink"):
                    shrink_failing_ops(self.shrink, self.out.results, self.prepared.unique, self.workspace.ops,
                                       self.desc.chip, self.settings, self.config.op_timeout_s, fan.plugin.name,
                                       self.sink.writer, self.logger)
        finally:  # the op workers rest (a cluster that outlives the run keeps only their main children)
            self._cluster_opened.set()  # an export still waiting for the cluster is made in this process
            if self._exports is not None:
                self._exports.close()
            if self._cluster_asked:
                with self.clock.phase("cluster"):  # a cluster of the run's own takes seconds to stop
                    self._cluster.close()

    def _start_cluster(self) -> bool:
        """The cluster (the group's, or one of the run's own) and its op workers warm; False, with the
        outcome's error, when no op worker can start."""
        try:
            with self.clock.phase("cluster"):
                self._open_cluster()
        except OpbyopError as e:
            self._stop_with(str(e))
            return False
        plugin = on_dask.OpWorkerPlugin.for_home(self.workspace.root, {self.desc.chip: self.desc.path.read_bytes()},
                                                 host_devices=self.plan.host_devices, compiler=self.plan.compiler)
        self._cluster.callback(rest, self.cluster, plugin.name, self.logger)
        with self.clock.phase("warm-up"):
            error = warm_up(self.cluster.client, plugin, self.desc)
        if error:
            self._stop_with(error)
            return False
        progress = create_progress_artifact(progress=0.0, description=f"ops analysed, run {self.run_id}")
        self.fan = FanOut(plugin, ClusterGate(self.cluster.client, plugin.name), progress)
        return True

    def _mind_cluster(self) -> None:
        """A lost cluster: the work out on it gives up at once (_take hands it out again as it comes
        back). Ours is started again and its op workers warmed; a user's, or ours lost more often than
        the limit, stops the run (what was analysed is kept: the same run id resumes)."""
        fan = self.fan
        if fan.gate.closed or not self.cluster.lost():
            return
        fan.gate.lose()
        fan.lost += 1
        self.logger.warning("lost the Dask cluster at %s with %d op(s) and %d whole model(s) on it",
                            self.cluster.address, len(fan.ops), len(fan.wholes))
        started = time.monotonic()
        try:
            error = warm_up(self.cluster.restart(self.run_id), fan.plugin, self.desc)
        except OpbyopError as e:
            error = str(e)
        if error:
            self._stop_with(error)
            return
        self.clock.add("cluster restart", time.monotonic() - started)
        fan.restarts += 1
        fan.gate = ClusterGate(self.cluster.client, fan.plugin.name)
        self.logger.warning("started the Dask cluster again at %s in %.1f s; what was on the lost one goes again",
                            self.cluster.address, time.monotonic() - started)

    def _take(self, wait: float) -> None:
        """Results that finished, into the outcome; waits up to `wait` seconds for the first. A stop
        request marks the run interrupted."""
        fan = self.fan
        while fan.remaining:
            self._mind_cluster()
            stopping = self.handoff.stop.is_set()  # what finished is still taken, then the run stops
            try:
                future = fan.done.get(timeout=wait) if wait and not stopping else fan.done.get_nowait()
            except queue.Empty:
                if stopping:
                    self.out.interrupted = True
                else:
                    self.sink.batches.flush_if_due()  # results reach the store in a lull too
                return
            wait = 0.0
            if future in fan.wholes:
                name, staged, parameters, gate = fan.wholes.pop(future)
                whole = _whole_result(future)
                if whole.status is Status.INFRA_ERROR and gate.lost:
                    if gate is not fan.gate:  # its cluster was lost and started again: once more there
                        self._hand_whole(name, staged, parameters)
                        fan.wholes_redone += 1
                        continue
                    words = self.cluster.lost_words(self.run_id, "the whole model")
                    whole = whole.model_copy(update={"message": words})
                self.out.add_whole(name, whole)
                fan.last_whole = time.monotonic()
                continue
            signature, op_name, gate = fan.ops.pop(future)
            result = _op_result(future, signature, op_name)
            if result.status is Status.INFRA_ERROR and gate.lost:
                if gate is not fan.gate:  # its cluster was lost and started again: once more there
                    self._hand_op(self.workspace.ops.get(signature))
                    fan.redone += 1
                    continue
                result = result.model_copy(update={"message": self.cluster.lost_words(self.run_id, "this op")})
            written = self.out.add(result)
            fan.finished += 1
            fan.last_op = time.monotonic()
            if written:
                update_progress_artifact(fan.progress, progress=100.0 * fan.finished / max(1, fan.handed))

    def summary(self) -> RunSummary:
        results, prepared = self.out.results, self.prepared
        failures = Counter(r.failed_stage.value for r in results.values() if r.failed_stage is not None)
        return RunSummary(run_id=self.run_id, models=list(prepared.graphs), ops_total=len(prepared.records),
                          ops_unique=len(prepared.unique), reused=sum(1 for r in results.values() if r.reused_from),
                          statuses=dict(Counter(r.status.value for r in results.values())), failures=dict(failures),
                          model_errors=prepared.errors, whole={m: w.status.value for m, w in self.out.wholes.items()},
                          error=self.out.error, compiler=self.plan.compiler.label, **_cluster_counts(self.fan))

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


def rest(cluster: RunCluster, plugin: str, logger: logging.Logger | logging.LoggerAdapter) -> None:
    """The op workers' side children stopped on every Dask worker (best effort: a worker that is gone
    has none, nor has a lost cluster, which is asked nothing)."""
    if cluster.lost():
        return
    try:
        cluster.client.run(on_dask.rest, plugin)
    except Exception as e:  # noqa: BLE001  (memory, not results: the run stands)
        logger.warning("could not stop the op workers' side children: %s: %s", type(e).__name__, e)


def _cluster_counts(fan: FanOut | None) -> dict[str, int]:
    """The summary's words on a lost cluster."""
    if fan is None:
        return {}
    return {"cluster_lost": fan.lost, "cluster_restarts": fan.restarts, "redone": fan.redone,
            "wholes_redone": fan.wholes_redone}


def _label(op: UniqueOp) -> str:
    return f"{op.op_name.removeprefix('stablehlo.')}-{op.signature[:10]}"


def _op_result(future: PrefectFuture, signature: str, op_name: str) -> OpResult:
    """The task's result; a task that failed for good (the cluster, twice) is that op's infra_error."""
    call = StageCall.of(future.result)
    if call.ok:
        return call.value
    return OpResult.failure(signature, op_name, Status.INFRA_ERROR,
                            f"the cluster failed while running this op: {call.brief}")


def _whole_result(future: PrefectFuture) -> WholeModelResult:
    try:
        return future.result()
    except Exception as e:
        return WholeModelResult(status=Status.INFRA_ERROR, depth=Stage.SPLIT,
                                message=f"the cluster failed while running the whole model: {type(e).__name__}: {e}")
