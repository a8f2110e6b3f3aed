"""How one analyze run is carried out: its state in one object, its steps as methods.

The flow (flows/analyze.py) declares the run and its parameters; AnalyzeRun does the work:
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
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from distributed import Client
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from prefect.futures import PrefectFuture
from prefect.states import Cancelled, Completed, Failed, State

from flows.engine.phases import PhaseClock, format_phases
from flows.engine.summary import RunFailed, RunSummary
from flows.hosting.cluster import dask_client
from flows.hosting.handoff import Handoff
from opbyop import __version__
from opbyop.compiler.assets import Notices
from opbyop.compiler.system_desc import SystemDesc, plugin_version, resolve
from opbyop.compiler.targets import Target, target_for
from opbyop.config import AnalysisConfig, AnalysisSettings, ShrinkOption, load_thresholds, load_zoo
from opbyop.errors import OpbyopError
from opbyop.op_memory import misfits
from opbyop.pipeline import Prepared, prepare, run_manifest_path, store_modules, summarize, write_manifest
from opbyop.records import OpResult, RunInfo, RunStatus, Stage, Status, UniqueOp, WholeModelResult
from opbyop.worker import dask as on_dask
from opbyop.worker.process import WorkerStartError, parameter_indices
from opbyop.workspace import Workspace
from storage.batches import ResultBatches
from storage.dataset import RunWriter, Store
from storage.known import known_results
from tasks.gate import ClusterGate
from tasks.models import split_model, stage_whole_model
from tasks.ops import analyze_op, whole_model
from tasks.shrink import shrink_failing_ops
from tasks.store import publish

POLL_SECONDS = 0.5  # how often the fan-out looks for a stop request between results


@dataclass
class FanOut:
    """What the cluster produced, and why it stopped early (if it did)."""

    results: dict[str, OpResult] = field(default_factory=dict)
    wholes: dict[str, WholeModelResult] = field(default_factory=dict)
    error: str | None = None  # the run could not go on (no op worker could start ...)
    interrupted: bool = False  # the caller asked the run to stop


@dataclass
class AnalyzeRun:
    """One analyze run: what it was asked, what it runs on, and what it has produced so far."""

    config: AnalysisConfig
    run_id: str
    shrink: ShrinkOption | None
    handoff: Handoff
    logger: logging.Logger | logging.LoggerAdapter
    workspace: Workspace = field(default_factory=Workspace.default)
    clock: PhaseClock = field(init=False)
    desc: SystemDesc = field(init=False)
    settings: AnalysisSettings = field(init=False)
    target: Target = field(init=False)
    out: FanOut = field(default_factory=FanOut)
    prepared: Prepared | None = None
    modules: dict[str, str] = field(default_factory=dict)  # model -> artifact digest of its module

    def __post_init__(self) -> None:
        self.clock = PhaseClock(self.handoff.phases, self.handoff.started, self.handoff.flow_called)
        self.clock.mark("flow start")
        notices = Notices(say=self.logger.info)  # a first use of the chip makes its descriptor: said, and timed
        with self.clock.phase("descriptor"):
            self.desc = resolve(self.config.chip, notices=notices)
        self.clock.reassign("descriptor", notices.seconds)
        self.target = target_for(self.config.chip, self.config.mesh)
        self.settings = AnalysisSettings(options=self.config.compiler,
                                         thresholds=self.config.thresholds or load_thresholds(),
                                         seed=self.config.seed, device=self.config.device,
                                         pass_timing=self.config.pass_timing,
                                         mesh=self.target.mesh_text, topology=self.target.topology.value)

    @property
    def store(self) -> Store:
        return Store(self.workspace.store)

    def info(self) -> RunInfo:
        config = self.config
        return RunInfo(run_id=self.run_id, models=config.models, chip=self.desc.chip,
                       system_desc_sha256=self.desc.sha256, plugin_version=plugin_version(),
                       opbyop_version=__version__, git_sha=_git_sha(), options_key=config.options_key(),
                       config=config.model_dump(mode="json"), mesh=self.target.mesh_text,
                       topology=self.target.topology.value)

    def execute(self) -> State:
        """The whole run, from the split to the report; the flow's final state."""
        prepared = self.prepare()
        store = self.store
        with store.writer() as writer:
            self.clock.mark("store")  # the store's run lock, taken (another run may hold it)
            with self.clock.phase("store"):
                run = writer.start(self.info())
                writer.add_ops(prepared.records)
                known = known_results(writer, store, prepared.unique, run, self.config.reuse_cached)
            self.logger.info(known.line(len(prepared.unique)))
            self.out.results.update(known.results)
            wholes = self.fitting_wholes(prepared.graphs) if self.config.whole_model else {}
            if self.config.models and not prepared.graphs:
                self.out.error = "no model could be split"
            elif self.handoff.stop.is_set():
                self.out.interrupted = True
            elif known.todo or wholes:  # no cluster for zero ops
                self.on_cluster(known.todo, wholes, writer)
            with self.clock.phase("store"):
                run = writer.finish(run.model_copy(update={"ended_at": datetime.now(timezone.utc),
                                                           "phases": self.clock.as_dict()}),
                                    self.model_summaries(), status=self.run_status())
        self.clock.mark("store")  # the writer's last batch, flushed as it closes
        return self.conclude(run)

    def prepare(self) -> Prepared:
        """Each model split in its own task (one at a time: torch.export is not thread-safe), or taken
        from the caller that split it ahead; then deduplicated, with the values of constant-fed
        arguments computed upstream (opbyop.pipeline.prepare). The unique ops and the manifest are
        kept in the workspace."""
        def one(spec: str, zoo, seed: int):  # noqa: ANN001, ANN202
            self.clock.mark("split")
            with self.clock.phase(f"export {spec}"):  # waiting for it: it may have been exported ahead
                outcome = split_model.submit(spec, zoo, seed, self.handoff.splits.get((spec, seed))).result()
            self.clock.add(f"export {spec}", outcome.seconds)  # its own time, partly beside the start-up
            return outcome.triple

        prepared = prepare(self.config.models, load_zoo(), self.config.seed, prepare_one=one,
                           artifacts=self.workspace.artifacts, target=self.target, unshard=self.config.unshard)
        for spec, error in prepared.errors.items():
            self.logger.error("model %s produced no ops: %s", spec, error)
        self.keep(prepared)
        self.modules = store_modules(prepared, self.workspace.artifacts)  # each model's graph, for Model Explorer
        self.clock.mark("split")
        return prepared

    def keep(self, prepared: Prepared) -> None:
        """The split's unique ops and manifest kept in the workspace; `prepared` is the run's from now on."""
        for op in prepared.unique:
            self.workspace.ops.put(op)
        write_manifest(prepared, run_manifest_path(self.workspace.root, self.run_id))
        self.prepared = prepared

    def on_cluster(self, todo: list[UniqueOp], wholes: dict, writer: RunWriter) -> None:
        """Warm the cluster's op workers, then the fan-out, then (if asked) the shrink of failing ops."""
        try:
            with self.clock.phase("cluster"):
                cluster = dask_client(self.config.cluster)
                client = cluster.__enter__()
        except OpbyopError as e:
            self._stop_with(str(e))
            return
        try:
            plugin = on_dask.OpWorkerPlugin.for_home(self.workspace.root, {self.desc.chip: self.desc.path.read_bytes()},
                                                     host_devices=self.target.chips)
            with self.clock.phase("warm-up"):
                error = warm_up(client, plugin, self.desc)
            if error:
                self._stop_with(error)
                return
            if self.handoff.stop.is_set():
                self.out.interrupted = True
                return
            self.fan_out(client, plugin.name, todo, wholes, writer)
            if self.shrink is not None and self.shrink.failing and not self.out.interrupted:
                with self.clock.phase("shrink"):
                    shrink_failing_ops(self.shrink, self.out.results, self.prepared.unique, self.desc.chip,
                                       self.settings, self.config.op_timeout_s, plugin.name, writer, self.logger)
        finally:
            with self.clock.phase("cluster"):  # a cluster of the run's own takes seconds to stop
                cluster.__exit__(None, None, None)

    def fan_out(self, client: Client, plugin: str, todo: list[UniqueOp], wholes: dict, writer: RunWriter) -> None:
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
        batches = ResultBatches(writer)
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
                    self.out.wholes[whole_of[future]] = _whole_result(future)
                    self.clock.add("whole model", time.monotonic() - started)
                    continue
                result = _op_result(future, futures.pop(future))
                self.out.results[result.signature] = result
                finished += 1
                if finished == total:
                    self.clock.add("ops", time.monotonic() - started)  # the ops' span
                    self.clock.mark("fan-out")
                if batches.add(result):
                    update_progress_artifact(progress, progress=100.0 * finished / max(1, total))
        finally:  # whatever stops the loop, what was analysed is kept: a re-run of the id resumes
            if remaining:  # the run is stopping: the work in flight is cancelled and stopped
                self.logger.warning("stopping the run's work on the cluster: %s", gate.close())
            batches.flush()
            self.clock.add("store", batches.writing_seconds)  # inside the fan-out
            self.clock.mark("whole model" if whole_futures and finished == total else "fan-out")
        if not self.out.interrupted:
            update_progress_artifact(progress, progress=100.0)

    def fitting_wholes(self, graphs: dict) -> dict:
        """The models whose whole-model run fits the chip and the host; the others are skipped here,
        with their figures (weights' bytes against DRAM and host memory), never run out of memory."""
        for name, misfit in misfits(graphs, self.desc.chip).items():
            self.out.wholes[name] = WholeModelResult(status=Status.SKIPPED, depth=Stage.SPLIT, message=misfit)
            self.logger.info("%s: %s", name, misfit)
        return {name: graph for name, graph in graphs.items() if name not in self.out.wholes}

    def run_status(self) -> RunStatus:
        return RunStatus.FAILED if self.out.error or self.out.interrupted else RunStatus.COMPLETED

    def model_summaries(self) -> list:
        prepared = self.prepared
        models = [summarize(name, prepared, self.out.wholes.get(name)).model_copy(
            update={"module_artifact": self.modules.get(name)}) for name in prepared.graphs]
        return models + [summarize(spec, prepared) for spec in prepared.errors]

    def summary(self) -> RunSummary:
        results, prepared = self.out.results, self.prepared
        failures = Counter(r.failed_stage.value for r in results.values() if r.failed_stage is not None)
        return RunSummary(run_id=self.run_id, models=list(prepared.graphs), ops_total=len(prepared.records),
                          ops_unique=len(prepared.unique), reused=sum(1 for r in results.values() if r.reused_from),
                          statuses=dict(Counter(r.status.value for r in results.values())), failures=dict(failures),
                          model_errors=prepared.errors, whole={m: w.status.value for m, w in self.out.wholes.items()},
                          error=self.out.error)

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
    return (f"no op worker could start on any of the {len(workers)} Dask workers with the {desc.chip} system "
            f"descriptor {desc.path} (a {kind} problem, nothing analysed): {type(first).__name__}: {first}; "
            f"fix: check the descriptor with `opbyop system-desc {desc.path}`, or choose another --chip")


def _git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _label(op: UniqueOp) -> str:
    return f"{op.op_name.removeprefix('stablehlo.')}-{op.signature[:10]}"


def _op_result(future: PrefectFuture, op: UniqueOp) -> OpResult:
    """The task's result; a task that failed for good (the cluster, twice) is that op's infra_error."""
    try:
        return future.result()
    except Exception as e:
        return OpResult(signature=op.signature, op_name=op.op_name, status=Status.INFRA_ERROR, depth=Stage.SPLIT,
                        failed_stage=None, message=f"the cluster failed while running this op: {type(e).__name__}: {e}")


def _whole_result(future: PrefectFuture) -> WholeModelResult:
    try:
        return future.result()
    except Exception as e:
        return WholeModelResult(status=Status.INFRA_ERROR, depth=Stage.SPLIT,
                                message=f"the cluster failed while running the whole model: {type(e).__name__}: {e}")
