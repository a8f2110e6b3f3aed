"""The `analyze` flow: models -> single ops -> one task per unique op on Dask -> the result store.

1. split every model (a model that fails is recorded, the others go on);
2. dedupe across models; reuse results of ops already analysed with the same signature, compiler
   version, chip and options (configurable) and of ops this run id already finished (a re-run
   of an interrupted run completes it);
3. one Prefect task per remaining op, its work on the Dask cluster's warm op workers; results are
   written to the store in batches as they arrive, so an interruption loses only the batch in flight;
4. each model compiled whole and run stitched, beside the op-by-op view;
5. the run is finished in the store; the summary says how many ops failed and why.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from prefect.futures import as_completed
from prefect.states import Completed, Failed
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, Field

from flows.cluster import dask_client
from opbyop import __version__
from opbyop.compiler.system_desc import plugin_version, resolve
from opbyop.config import AnalysisConfig, load_thresholds, load_zoo
from opbyop.jaxenv import prepare_jax
from opbyop.pipeline import Prepared, prepare, summarize
from opbyop.records import OpResult, RunInfo, Stage, Status, UniqueOp, WholeModelResult
from opbyop.worker import dask as on_dask
from opbyop.worker.process import parameter_indices
from opbyop.worker.protocol import AnalysisSettings
from opbyop.workspace import Workspace
from storage.dataset import Store
from tasks.models import split_model, stage_whole_model
from tasks.ops import analyze_op, whole_model
from tasks.store import publish

BATCH_SIZE = 25
BATCH_SECONDS = 10.0
TASK_THREADS = 16  # Prefect task threads: each mostly waits on Dask, a few keep the workers fed


class RunSummary(BaseModel):
    run_id: str
    models: list[str]
    ops_total: int
    ops_unique: int
    reused: int
    statuses: dict[str, int]
    failures: dict[str, int] = Field(default_factory=dict)  # failed stage -> unique ops
    model_errors: dict[str, str] = Field(default_factory=dict)
    whole: dict[str, str] = Field(default_factory=dict)  # model -> whole-model status
    report: str | None = None  # path of the HTML report

    def line(self) -> str:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.statuses.items(), key=lambda kv: -kv[1]))
        failed = "; ".join(f"{n} failed at {s}" for s, n in self.failures.items())
        errors = f"; {len(self.model_errors)} models could not be split" if self.model_errors else ""
        return (f"run {self.run_id}: {self.ops_unique} unique ops of {self.ops_total} ({self.reused} reused): "
                f"{counts}" + (f" ({failed})" if failed else "") + errors)


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def _git_sha() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _prepare(config: AnalysisConfig) -> Prepared:
    """Each model split in its own task (one at a time: torch.export is not thread-safe)."""
    return prepare(config.models, load_zoo(), config.seed,
                   prepare_one=lambda spec, zoo, seed: split_model.submit(spec, zoo, seed).result())


def _label(op: UniqueOp) -> str:
    return f"{op.op_name.removeprefix('stablehlo.')}-{op.signature[:10]}"


@flow(name="analyze", task_runner=ThreadPoolTaskRunner(max_workers=TASK_THREADS), persist_result=False)
def analyze(config: AnalysisConfig = AnalysisConfig(), run_id: str | None = None):
    """Analyse models op by op on a Dask cluster and store every op's result."""
    prepare_jax()  # this process exports JAX models on the CPU; compilers live in the workers
    logger = get_run_logger()
    run_id = run_id or new_run_id()
    workspace = Workspace.default()
    store = Store(workspace.store)
    desc = resolve(config.chip)
    settings = AnalysisSettings(options=config.compiler, thresholds=config.thresholds or load_thresholds(),
                                seed=config.seed)
    run = RunInfo(run_id=run_id, models=config.models, chip=desc.chip, system_desc_sha256=desc.sha256,
                  plugin_version=plugin_version(), opbyop_version=__version__, git_sha=_git_sha(),
                  options_key=config.compiler.key(), config=config.model_dump(mode="json"))

    prepared = _prepare(config)
    for spec, error in prepared.errors.items():
        logger.error("model %s produced no ops: %s", spec, error)
    for op in prepared.unique:
        workspace.ops.put(op)

    with store.writer() as writer:
        run = writer.start(run)
        writer.add_ops(prepared.records)
        results: dict[str, OpResult] = {}
        done = writer.completed_signatures(exclude=(Status.CRASHED, Status.TIMEOUT))
        resumed = {r.signature: r for r in store.results(run_id) if r.signature in done}
        results.update(resumed)
        todo = [op for op in prepared.unique if op.signature not in results]
        if config.reuse_cached and todo:
            cached = store.lookup_cached([op.signature for op in todo], run.plugin_version, run.chip, run.options_key,
                                         exclude_run=run_id)
            reused = [r.model_copy(update={"reused_from": source}) for source, r in
                      (cached[op.signature] for op in todo if op.signature in cached)]
            writer.add_results(reused)
            results.update({r.signature: r for r in reused})
            todo = [op for op in todo if op.signature not in results]
        logger.info("%d unique ops: %d to analyse, %d from this run id, %d reused from earlier runs",
                    len(prepared.unique), len(todo), len(resumed), len(results) - len(resumed))

        wholes: dict[str, WholeModelResult] = {}
        with dask_client(config.cluster) as client:
            client.register_plugin(on_dask.OpWorkerPlugin(str(workspace.root), {desc.chip: desc.path.read_bytes()}))
            client.run(on_dask.warm_up, desc.chip)  # start every worker's compiler before timing ops
            progress = create_progress_artifact(progress=0.0, description=f"run {run_id}: ops analysed")
            futures = {analyze_op.submit(op, _label(op), desc.chip, settings, config.op_timeout_s): op for op in todo}
            whole_futures = {}
            if config.whole_model:
                for name, graph in prepared.graphs.items():
                    module_text, values = stage_whole_model.submit(graph, workspace.scratch).result()
                    whole_futures[name] = whole_model.submit(name, module_text, values, parameter_indices(graph),
                                                             desc.chip, settings, max(600.0, config.op_timeout_s))
            batch: list[OpResult] = []
            flushed = time.monotonic()
            try:
                for i, future in enumerate(as_completed(list(futures)), start=1):
                    result = _op_result(future, futures[future])
                    results[result.signature] = result
                    batch.append(result)
                    if len(batch) >= BATCH_SIZE or time.monotonic() - flushed > BATCH_SECONDS:
                        writer.add_results(batch)
                        batch, flushed = [], time.monotonic()
                        update_progress_artifact(progress, progress=100.0 * i / max(1, len(futures)))
            finally:  # whatever stops the loop, what was analysed is kept: a re-run of the id resumes
                writer.add_results(batch)
            update_progress_artifact(progress, progress=100.0)
            for name, future in whole_futures.items():
                wholes[name] = _whole_result(future)
        models = [summarize(name, prepared, wholes.get(name)) for name in prepared.graphs]
        models += [summarize(spec, prepared) for spec in prepared.errors]
        run = run.model_copy(update={"ended_at": datetime.now(timezone.utc)})
        writer.finish(run, models)

    summary = _summary(run_id, prepared, results, wholes)
    _artifacts(summary, prepared, results)
    summary.report = str(publish(workspace.store, run_id, workspace.root / "reports" / f"{run_id}.html"))
    logger.info(summary.line())
    if prepared.unique or not config.models:
        return Completed(message=summary.line(), data=summary)
    return Failed(message=summary.line(), data=summary)


def _op_result(future, op: UniqueOp) -> OpResult:
    """The task's result; a task that failed for good (the cluster, twice) is that op's crash."""
    try:
        return future.result()
    except Exception as e:
        return OpResult(signature=op.signature, op_name=op.op_name, status=Status.CRASHED, depth=Stage.SPLIT,
                        failed_stage=None, message=f"orchestration failed for this op: {type(e).__name__}: {e}")


def _whole_result(future) -> WholeModelResult:
    try:
        return future.result()
    except Exception as e:
        return WholeModelResult(status=Status.CRASHED, depth=Stage.SPLIT,
                                message=f"orchestration failed for the whole model: {type(e).__name__}: {e}")


def _summary(run_id: str, prepared: Prepared, results: dict[str, OpResult],
             wholes: dict[str, WholeModelResult]) -> RunSummary:
    failures = Counter(r.failed_stage.value for r in results.values() if r.failed_stage is not None)
    return RunSummary(run_id=run_id, models=list(prepared.graphs), ops_total=len(prepared.records),
                      ops_unique=len(prepared.unique), reused=sum(1 for r in results.values() if r.reused_from),
                      statuses=dict(Counter(r.status.value for r in results.values())), failures=dict(failures),
                      model_errors=prepared.errors, whole={m: w.status.value for m, w in wholes.items()})


def _artifacts(summary: RunSummary, prepared: Prepared, results: dict[str, OpResult]) -> None:
    rows = []
    for name, split in prepared.splits.items():
        statuses = Counter(results[r.signature].status.value for r in split.ops if r.signature in results)
        rows.append({"model": name, "ops": len(split.ops), "unique": len({r.signature for r in split.ops}),
                     **{s.value: statuses.get(s.value, 0) for s in Status},
                     "whole model": summary.whole.get(name, "-")})
    create_table_artifact(table=rows, key="run-summary", description=summary.line())
