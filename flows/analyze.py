"""The `analyze` flow: models -> single ops -> one task per unique op on Dask -> the result store.

1. split every model (a model that fails is recorded, the others go on); none left: the run is
   stored as failed, no cluster is started;
2. dedupe across models; reuse results of ops already analysed with the same signature, compiler
   version, chip and options (configurable) and of ops this run id already finished (a re-run
   of an interrupted run completes it; a run started without a run id gets one derived from its
   flow run, so Prefect's Retry of that flow run resumes it);
3. the cluster's op workers are warmed up; if none can start (a descriptor no compiler accepts), the
   run stops here with that one error;
4. each model's whole-model analysis goes to the cluster first, then one Prefect task per remaining
   op; results are written to the store in batches as they arrive, so an interruption loses only
   the batch in flight;
5. the run is finished in the store with its phases (where its time went); the summary says how
   many ops failed and why; the report and artifacts follow.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from distributed import Client
from prefect import flow, get_run_logger
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from prefect.context import get_run_context
from prefect.futures import PrefectFuture
from prefect.states import Cancelled, Completed, Failed
from prefect.task_runners import ThreadPoolTaskRunner

from flows import handoff as handoffs
from flows.cluster import dask_client
from flows.phases import PhaseClock, format_phases
from flows.run_ids import new_run_id, run_id_for  # noqa: F401  (new_run_id: part of this module's API)
from flows.summary import RunFailed, RunSummary
from opbyop import __version__
from opbyop.compiler.system_desc import SystemDesc, plugin_version, resolve
from opbyop.config import AnalysisConfig, AnalysisSettings, ShrinkOption, load_thresholds, load_zoo
from opbyop.errors import OpbyopError
from opbyop.jaxenv import prepare_jax
from opbyop.pipeline import Prepared, prepare, run_manifest_path, summarize, write_manifest
from opbyop.records import OpResult, RunInfo, Stage, Status, UniqueOp, WholeModelResult
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

TASK_THREADS = 16  # Prefect task threads: each mostly waits on Dask, a few keep the workers fed
POLL_SECONDS = 0.5  # how often the fan-out looks for a stop request between results


def _git_sha() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _label(op: UniqueOp) -> str:
    return f"{op.op_name.removeprefix('stablehlo.')}-{op.signature[:10]}"


def claim_flow_run(logger) -> None:  # noqa: ANN001
    """Label this flow run with its process (so a later run can tell it was killed), and mark
    this host's runs whose process is gone as Crashed. Best effort: never stops the run."""
    from prefect.client.orchestration import get_client

    from flows.crashed import label_flow_run, sweep

    try:
        with get_client(sync_client=True) as client:
            label_flow_run(client, get_run_context().flow_run.id)
            for crashed in sweep(client):
                logger.warning("flow run %s was left Running by a killed process: marked Crashed", crashed)
    except Exception as e:  # an API that refuses labels must not cost the run
        logger.warning("could not check for crashed flow runs: %s: %s", type(e).__name__, e)


def _prepare(config: AnalysisConfig, clock: PhaseClock, handoff: handoffs.Handoff, workspace: Workspace) -> Prepared:
    """Each model split in its own task (one at a time: torch.export is not thread-safe), or taken
    from the caller that split it ahead; then deduplicated, with the values of constant-fed
    arguments computed upstream (opbyop.pipeline.prepare)."""
    start, exporting = time.monotonic(), 0.0

    def one(spec: str, zoo, seed: int):  # noqa: ANN001, ANN202
        nonlocal exporting
        waited = time.monotonic()
        outcome = split_model.submit(spec, zoo, seed, handoff.splits.get((spec, seed))).result()
        exporting += time.monotonic() - waited
        clock.add("export", outcome.seconds)
        return outcome.triple

    prepared = prepare(config.models, load_zoo(), config.seed, prepare_one=one, artifacts=workspace.artifacts)
    clock.add("split", time.monotonic() - start - exporting)
    return prepared


@dataclass
class FanOut:
    """What the cluster produced, and why it stopped early (if it did)."""

    results: dict[str, OpResult] = field(default_factory=dict)
    wholes: dict[str, WholeModelResult] = field(default_factory=dict)
    error: str | None = None  # the run could not go on (no op worker could start ...)
    interrupted: bool = False  # the caller asked the run to stop


@flow(name="analyze", task_runner=ThreadPoolTaskRunner(max_workers=TASK_THREADS), persist_result=False)
def analyze(config: AnalysisConfig = AnalysisConfig(), run_id: str | None = None, shrink: ShrinkOption = ShrinkOption()):
    """Analyse models op by op on a Dask cluster and store every op's result."""
    handoff = handoffs.current() or handoffs.Handoff()
    clock = PhaseClock(handoff.phases, handoff.started)
    prepare_jax()  # this process exports JAX models on the CPU; compilers live in the workers
    logger = get_run_logger()
    run_id = run_id or run_id_for(get_run_context().flow_run)
    claim_flow_run(logger)
    workspace = Workspace.default()
    store = Store(workspace.store)
    desc = resolve(config.chip)
    settings = AnalysisSettings(options=config.compiler, thresholds=config.thresholds or load_thresholds(),
                                seed=config.seed, device=config.device, pass_timing=config.pass_timing)
    run = RunInfo(run_id=run_id, models=config.models, chip=desc.chip, system_desc_sha256=desc.sha256,
                  plugin_version=plugin_version(), opbyop_version=__version__, git_sha=_git_sha(),
                  options_key=config.options_key(), config=config.model_dump(mode="json"))

    prepared = _prepare(config, clock, handoff, workspace)
    for spec, error in prepared.errors.items():
        logger.error("model %s produced no ops: %s", spec, error)
    for op in prepared.unique:
        workspace.ops.put(op)
    write_manifest(prepared, run_manifest_path(workspace.root, run_id))  # unique ops and every model they came from

    with store.writer() as writer:
        with clock.phase("store"):
            run = writer.start(run)
            writer.add_ops(prepared.records)
            known = known_results(writer, store, prepared.unique, run, config.reuse_cached)
        logger.info(known.line(len(prepared.unique)))
        todo = known.todo
        out = FanOut(results=known.results)
        wholes_todo = prepared.graphs if config.whole_model else {}
        if config.models and not prepared.graphs:
            out.error = "no model could be split"
        elif handoff.stop.is_set():
            out.interrupted = True
        elif todo or wholes_todo:  # no cluster for zero ops
            _on_cluster(out, config, desc, settings, workspace, todo, prepared, wholes_todo, writer, clock, handoff,
                        logger, shrink)
        with clock.phase("store"):
            models = [summarize(name, prepared, out.wholes.get(name)) for name in prepared.graphs]
            models += [summarize(spec, prepared) for spec in prepared.errors]
            status = "failed" if out.error or out.interrupted else "completed"
            run = writer.finish(run.model_copy(update={"ended_at": datetime.now(timezone.utc),
                                                       "phases": clock.as_dict()}), models, status=status)

    summary = _summary(run_id, prepared, out)
    if out.interrupted:
        summary.phases = clock.as_dict()
        logger.warning(summary.line())
        return Cancelled(message=f"interrupted; {summary.line()}", data=summary)
    _artifacts(summary, prepared, out.results)
    report_path = workspace.root / "reports" / f"{run_id}.html"
    with clock.phase("report"):
        summary.report = str(publish(workspace.store, run_id, report_path, clock.as_dict()))
    summary.phases = clock.as_dict()
    store.update_run(run.model_copy(update={"phases": summary.phases}))
    logger.info("%s\nphases: %s", summary.line(), format_phases(summary.phases))
    if out.error:
        return Failed(message=summary.line(), data=RunFailed(summary))
    return Completed(message=summary.line(), data=summary)


def _on_cluster(out: FanOut, config: AnalysisConfig, desc: SystemDesc, settings: AnalysisSettings,
                workspace: Workspace, todo: list[UniqueOp], prepared: Prepared, wholes: dict, writer: RunWriter,
                clock: PhaseClock, handoff: handoffs.Handoff, logger, shrink: ShrinkOption | None = None) -> None:  # noqa: ANN001
    """Warm the cluster's op workers, then the fan-out; fills `out`."""
    try:
        with clock.phase("cluster"):
            cluster = dask_client(config.cluster)
            client = cluster.__enter__()
    except OpbyopError as e:
        out.error = str(e)
        logger.error(out.error)
        return
    try:
        plugin = on_dask.OpWorkerPlugin(str(workspace.root), {desc.chip: desc.path.read_bytes()})
        with clock.phase("warm-up"):
            error = _warm_up(client, plugin, desc)
        if error:
            out.error = error
            logger.error(error)
            return
        if handoff.stop.is_set():
            out.interrupted = True
            return
        _fan_out(out, client, plugin.name, config, desc, settings, workspace, todo, prepared, wholes, writer, clock,
                 handoff, logger)
        if shrink is not None and shrink.failing and not out.interrupted:  # issue 13: failing shape boundaries
            with clock.phase("shrink"):
                shrink_failing_ops(shrink, out.results, prepared.unique, desc.chip, settings, config.op_timeout_s,
                                   plugin.name, writer, logger)
    finally:
        cluster.__exit__(None, None, None)


def _warm_up(client: Client, plugin: on_dask.OpWorkerPlugin, desc: SystemDesc) -> str | None:
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


def _fan_out(out: FanOut, client: Client, plugin: str, config: AnalysisConfig, desc: SystemDesc,
             settings: AnalysisSettings, workspace: Workspace, todo: list[UniqueOp], prepared: Prepared,
             wholes: dict, writer: RunWriter, clock: PhaseClock, handoff: handoffs.Handoff,
             logger) -> None:  # noqa: ANN001
    gate = ClusterGate(client, plugin)
    started = time.monotonic()
    # the whole models first: the longest jobs, beside the ops, never in front of the batch writes
    whole_futures = {}
    for name, graph in wholes.items():
        staged = stage_whole_model.submit(graph, workspace.scratch)
        whole_futures[name] = whole_model.submit(name, staged, parameter_indices(graph), desc.chip, settings,
                                                 max(600.0, config.op_timeout_s), plugin, gate)
    progress = create_progress_artifact(progress=0.0, description=f"ops analysed, run {writer.run.run_id}")
    futures = {analyze_op.submit(op, _label(op), desc.chip, settings, config.op_timeout_s, plugin, gate): op
               for op in todo}
    done: queue.Queue[PrefectFuture] = queue.Queue()
    for future in list(futures) + list(whole_futures.values()):
        future.add_done_callback(done.put)
    whole_of = {f: name for name, f in whole_futures.items()}
    batches = ResultBatches(writer)
    finished = 0
    remaining = len(futures) + len(whole_futures)
    try:
        while remaining:
            if handoff.stop.is_set():
                out.interrupted = True
                break
            try:
                future = done.get(timeout=POLL_SECONDS)
            except queue.Empty:
                batches.flush_if_due()  # results reach the store in a lull too
                continue
            remaining -= 1
            if future in whole_of:
                out.wholes[whole_of[future]] = _whole_result(future)
                clock.add("whole model", time.monotonic() - started)
                continue
            result = _op_result(future, futures[future])
            out.results[result.signature] = result
            finished += 1
            if finished == len(futures):
                clock.add("fan-out", time.monotonic() - started)
            if batches.add(result):
                update_progress_artifact(progress, progress=100.0 * finished / max(1, len(futures)))
    finally:  # whatever stops the loop, what was analysed is kept: a re-run of the id resumes
        if remaining:  # the run is stopping: the work in flight is cancelled and stopped
            logger.warning("stopping the run's work on the cluster: %s", gate.close())
        batches.flush()
        clock.add("store", batches.writing_seconds)
    if not out.interrupted:
        update_progress_artifact(progress, progress=100.0)


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


def _summary(run_id: str, prepared: Prepared, out: FanOut) -> RunSummary:
    results = out.results
    failures = Counter(r.failed_stage.value for r in results.values() if r.failed_stage is not None)
    return RunSummary(run_id=run_id, models=list(prepared.graphs), ops_total=len(prepared.records),
                      ops_unique=len(prepared.unique), reused=sum(1 for r in results.values() if r.reused_from),
                      statuses=dict(Counter(r.status.value for r in results.values())), failures=dict(failures),
                      model_errors=prepared.errors, whole={m: w.status.value for m, w in out.wholes.items()},
                      error=out.error)


def _artifacts(summary: RunSummary, prepared: Prepared, results: dict[str, OpResult]) -> None:
    rows = []
    for name, split in prepared.splits.items():
        statuses = Counter(results[r.signature].status.value for r in split.ops if r.signature in results)
        rows.append({"model": name, "ops": len(split.ops), "unique": len({r.signature for r in split.ops}),
                     **{s.value: statuses.get(s.value, 0) for s in Status},
                     "whole model": summary.whole.get(name, "-")})
    rows += [{"model": name, "ops": 0, "unique": 0, "error": error} for name, error in summary.model_errors.items()]
    create_table_artifact(table=rows, key="run-summary", description=summary.line())
