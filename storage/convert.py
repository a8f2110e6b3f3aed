"""Records <-> Arrow rows: the only place that knows how a pydantic record maps onto table columns.

Writing builds rows and hands them to pyarrow with the explicit schema (no type inference); reading
rebuilds the records from the rows. Values keep their types end to end: no value is stringified to
be parsed back, except `attributes` and `config`, which are free-form JSON objects.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, Field

from opbyop.records import (
    AccuracyTrace, TracePoint,
    COMPILE_STAGES, CollectiveRun, CompilerIdentity, CompileOutcome, DeviceRun, FailedPass, GoldenComparison, PassTiming, ModelSummary,
    OperandDesc, OpPlacement,
    OpRecord, OpResult, Provenance, RunInfo, SourceFrame, Stage, Status, TensorDesc, TtsimRun, ValueRef,
    WholeModelResult, legacy_status,
)
from opbyop.shrink.result import ShrinkResult
from opbyop_storage import schema as S


def utc(dt: datetime | None) -> datetime | None:
    """Aware UTC datetime; a naive one is taken to be UTC already."""
    if dt is None:
        return None
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _tensor(t: TensorDesc) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": t.dtype}


def _enum(value: Any) -> str | None:
    return None if value is None else value.value


# ----------------------------------------------------------------------------- records -> rows

def run_row(run: RunInfo) -> dict[str, Any]:
    return {
        "run_id": run.run_id, "started_at": utc(run.started_at), "ended_at": utc(run.ended_at),
        "status": run.status.value, "models": list(run.models), "chip": run.chip,
        "system_desc_sha256": run.system_desc_sha256, "plugin_version": run.plugin_version,
        "opbyop_version": run.opbyop_version, "git_sha": run.git_sha, "options_key": run.options_key,
        "config": _json(run.config),
        "phases": [{"phase": k, "seconds": v} for k, v in run.phases.items()],
        "mesh": run.mesh, "topology": run.topology,
        **{f"compiler_{name}": getattr(run.compiler, name) for name in S.COMPILER_FIELDS},
        "group_id": run.group_id, "verdict_code": run.verdict_code,
    }


def op_row(run_id: str, rec: OpRecord) -> dict[str, Any]:
    p = rec.provenance
    return {
        "run_id": run_id, "model": rec.model, "position": rec.position, "op_name": rec.op_name,
        "signature": rec.signature, "framework_op": p.framework_op, "module_path": p.module_path,
        "aten_op": p.aten_op,
        "source_file": p.source.file if p.source else None,
        "source_line": p.source.line if p.source else None,
        "source_col": p.source.col if p.source else None,
        "stack": [f.model_dump() for f in p.stack], "location": p.location,
        "inputs": [_tensor(t) for t in rec.inputs], "outputs": [_tensor(t) for t in rec.outputs],
        "operands": [{"index": o.index, "kind": o.kind.value, "shape": list(o.tensor.shape),
                      "dtype": o.tensor.dtype, "argument": o.argument} for o in rec.operands],
        "input_sources": [s.model_dump() for s in rec.input_sources],
        "attributes": _json(rec.attributes), "split_error": rec.split_error,
        "mesh": rec.mesh, "operand_shardings": list(rec.operand_shardings),
        "result_shardings": list(rec.result_shardings),
    }


def _compile_columns(c: CompileOutcome | None, prefix: str = "") -> dict[str, Any]:
    if c is None:
        return {f.name: None for f in S.compile_fields(prefix)}
    known = {k: v for k, v in c.artifacts.items() if k in S.ARTIFACT_KINDS}
    out = {
        f"{prefix}compile_reached": _enum(c.reached), f"{prefix}compile_failed_stage": _enum(c.failed_stage),
        f"{prefix}compile_message": c.message, f"{prefix}compile_diagnostics": list(c.diagnostics),
        f"{prefix}compile_s": c.seconds,
        f"{prefix}artifacts": {kind: known.get(kind) for kind in S.ARTIFACT_KINDS},
        f"{prefix}artifacts_extra": [{"kind": k, "sha256": v} for k, v in sorted(c.artifacts.items())
                                     if k not in S.ARTIFACT_KINDS],
    }
    for stage, column in zip(COMPILE_STAGES, S.COMPILE_STAGE_COLUMNS):
        out[f"{prefix}{column}"] = c.stage_seconds.get(stage)
    return out


def _placement(p: OpPlacement) -> dict[str, Any]:
    row = p.model_dump()
    row["grid"], row["block_tiles"] = list(p.grid), list(p.block_tiles)
    row["rejected"] = [{"reason": k, "count": v} for k, v in sorted(p.rejected.items())]
    return row


def _device_columns(d: DeviceRun | None, prefix: str = "") -> dict[str, Any]:
    if d is None:
        return {f.name: None for f in S.device_fields(prefix)}
    return {
        f"{prefix}ttnn_ops": d.ttnn_ops, f"{prefix}not_simulated": list(d.not_simulated),
        f"{prefix}cycles": d.cycles, f"{prefix}peak_l1_bytes": d.peak_l1_bytes,
        f"{prefix}peak_dram_bytes": d.peak_dram_bytes,
        f"{prefix}placements": [_placement(p) for p in d.placements],
        f"{prefix}device_s": d.seconds, f"{prefix}device_message": d.message,
        f"{prefix}device_mesh_shape": list(d.mesh_shape), f"{prefix}device_topology": d.topology,
        f"{prefix}chip_peak_l1_bytes": list(d.chip_peak_l1_bytes),
        f"{prefix}chip_peak_dram_bytes": list(d.chip_peak_dram_bytes),
        f"{prefix}collectives": [c.model_dump() for c in d.collectives],
        f"{prefix}collective_bytes": d.collective_bytes, f"{prefix}collective_cycles": d.collective_cycles,
        f"{prefix}collective_s": d.collective_seconds,
    }


def _golden_columns(g: GoldenComparison | None) -> dict[str, Any]:
    if g is None:
        return {"pcc": None, "max_abs_error": None, "max_rel_error": None, "allclose": None,
                "golden_passed": None, "pcc_threshold": None, "golden_method": None, "golden_s": None}
    return {"pcc": g.pcc, "max_abs_error": g.max_abs_error, "max_rel_error": g.max_rel_error,
            "allclose": g.allclose, "golden_passed": g.passed, "pcc_threshold": g.pcc_threshold,
            "golden_method": g.method, "golden_s": g.seconds}


def result_row(run_id: str, r: OpResult) -> dict[str, Any]:
    return {
        "run_id": run_id, "signature": r.signature, "op_name": r.op_name, "status": r.status.value,
        "fault": r.status.fault.value, "depth": r.depth.value, "failed_stage": _enum(r.failed_stage),
        "message": r.message, "narrowing": r.narrowing,
        **_compile_columns(r.compile), **_device_columns(r.device), **_golden_columns(r.golden),
        "started_at": utc(r.started_at), "ended_at": utc(r.ended_at), "worker": r.worker,
        "reused_from": r.reused_from, "compiler": r.compiler, "mesh": r.mesh, "topology": r.topology,
        "real_inputs": list(r.real_inputs), "synthetic_inputs": list(r.synthetic_inputs),
        **_failed_pass_columns(r.failed_pass), **_pass_timing_columns(r.pass_timing),
        "device_backend": r.device_backend, **_ttsim_columns(r.ttsim),
    }


def _ttsim_columns(t: TtsimRun | None, prefix: str = "") -> dict[str, Any]:
    values = {name: getattr(t, name) for name in S.TTSIM_COLUMNS} if t is not None else {}
    values["outcome"] = t.outcome.value if t is not None else None
    return {f"{prefix}ttsim_{column}": values.get(name) for name, (column, _) in S.TTSIM_COLUMNS.items()}


def _ttsim_from(row: dict[str, Any], prefix: str = "") -> TtsimRun | None:
    if row.get(f"{prefix}ttsim_outcome") is None:
        return None
    values = {name: row.get(f"{prefix}ttsim_{column}") for name, (column, _) in S.TTSIM_COLUMNS.items()}
    return TtsimRun(**{name: value for name, value in values.items() if value is not None})


def _pass_timing_columns(t: PassTiming | None) -> dict[str, Any]:
    if t is None:
        return {f.name: None for f in S.PASS_TIMING_FIELDS}
    slowest = sorted(t.passes.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"pass_timing": [{"pass": k, "seconds": v} for k, v in slowest], "pass_timing_total_s": t.total_seconds,
            "pass_timing_compile_s": t.compile_seconds, "pass_timing_reports": t.reports}


def _pass_timing_from(row: dict[str, Any]) -> PassTiming | None:
    if row.get("pass_timing_reports") is None:
        return None
    return PassTiming(passes={p["pass"]: p["seconds"] for p in row["pass_timing"] or []},
                      total_seconds=row["pass_timing_total_s"] or 0.0,
                      compile_seconds=row["pass_timing_compile_s"] or 0.0, reports=row["pass_timing_reports"])


def _failed_pass_columns(p: FailedPass | None) -> dict[str, Any]:
    if p is None:
        return {f.name: None for f in S.FAILED_PASS_FIELDS}
    return {"failed_pass_outcome": p.outcome.value, "failed_pass": p.argument, "failed_pass_name": p.name,
            "failed_pass_anchor": p.anchor, "failed_pass_position": p.position, "passes_started": p.passes_started,
            "last_good_pass": p.last_succeeded, "failed_pass_ir": p.ir_before, "failed_pass_reason": p.reason,
            "failed_pass_s": p.seconds}


def _failed_pass_from(row: dict[str, Any]) -> FailedPass | None:
    if row.get("failed_pass_outcome") is None:
        return None
    return FailedPass(outcome=row["failed_pass_outcome"], argument=row["failed_pass"], name=row["failed_pass_name"],
                      anchor=row["failed_pass_anchor"], position=row["failed_pass_position"],
                      passes_started=row["passes_started"] or 0, last_succeeded=row["last_good_pass"],
                      ir_before=row["failed_pass_ir"], reason=row["failed_pass_reason"],
                      seconds=row["failed_pass_s"] or 0.0)


class ModelCounts(BaseModel):
    """Occurrences of one model's ops by the depth / status their unique op's result reached."""

    by_depth: dict[Stage, int] = Field(default_factory=dict)
    by_status: dict[Status, int] = Field(default_factory=dict)
    without_result: int = 0


def model_row(run_id: str, m: ModelSummary, counts: ModelCounts) -> dict[str, Any]:
    w = m.whole
    row: dict[str, Any] = {
        "run_id": run_id, "model": m.model, "frontend": m.frontend, "ops_total": m.ops_total,
        "ops_unique": m.ops_unique, "split_failures": m.split_failures, "export_s": m.export_seconds,
        "export_reused": m.export_reused, "whole_key": m.whole_key,
        "error": m.error, "ops_without_result": counts.without_result,
        "whole_status": _enum(w.status) if w else None, "whole_depth": _enum(w.depth) if w else None,
        "whole_failed_stage": _enum(w.failed_stage) if w else None, "whole_message": w.message if w else None,
        **_compile_columns(w.compile if w else None, "whole_"),
        **_device_columns(w.device if w else None, "whole_"),
        "whole_pcc": w.pcc if w else None, "whole_reference": w.reference if w else None, "whole_max_abs_error": w.max_abs_error if w else None,
        "whole_iterations": w.iterations if w else None, "whole_s": w.seconds if w else None,
        "whole_reused_from": w.reused_from if w else None,
        **_whole_ttsim_columns(w.ttsim if w else None),
        "module_artifact": m.module_artifact,
        **_trace_columns(w.accuracy_trace if w else None, S.TRACE_PREFIXES["model"]),
    }
    for stage, column in zip(Stage, S.DEPTH_COUNT_COLUMNS):
        row[column] = counts.by_depth.get(stage, 0)
    for status in Status:
        row[f"status_{status.value}"] = counts.by_status.get(status, 0)
    return row


def _trace_columns(t: AccuracyTrace | None, prefix: str) -> dict[str, Any]:
    """An accuracy trace as schema.trace_fields(prefix): the model's own ("whole_") or ttsim's ("whole_ttsim_")."""
    if t is None:
        return {f.name: None for f in S.trace_fields(prefix)}
    return {f"{prefix}trace": [p.model_dump() for p in t.points], f"{prefix}trace_threshold": t.pcc_threshold,
            f"{prefix}trace_first_below": t.first_below, f"{prefix}trace_first_below_op": t.first_below_op,
            f"{prefix}trace_most_added": list(t.most_added), f"{prefix}trace_ops": t.traced_ops,
            f"{prefix}trace_s": t.seconds, f"{prefix}trace_message": t.message}


def _trace_from(row: dict[str, Any], prefix: str) -> AccuracyTrace | None:
    if row.get(f"{prefix}trace_ops") is None:  # none, or a file from before the columns
        return None
    return AccuracyTrace(points=[TracePoint(**p) for p in row[f"{prefix}trace"] or []],
                         pcc_threshold=row[f"{prefix}trace_threshold"],
                         first_below=row[f"{prefix}trace_first_below"],
                         first_below_op=row[f"{prefix}trace_first_below_op"],
                         most_added=row[f"{prefix}trace_most_added"] or [], traced_ops=row[f"{prefix}trace_ops"],
                         seconds=row[f"{prefix}trace_s"] or 0.0, message=row[f"{prefix}trace_message"])


def _whole_ttsim_columns(t: TtsimRun | None) -> dict[str, Any]:
    """A whole model's run on ttsim: TTSIM_COLUMNS, and its accuracy trace (TTSIM_STORED_APART)."""
    return {**_ttsim_columns(t, "whole_"),
            **_trace_columns(t.accuracy_trace if t is not None else None, S.TRACE_PREFIXES["ttsim"])}


def _whole_ttsim_from(row: dict[str, Any]) -> TtsimRun | None:
    run = _ttsim_from(row, "whole_")
    if run is not None:
        run.accuracy_trace = _trace_from(row, S.TRACE_PREFIXES["ttsim"])
    return run


def to_table(table: str, rows: list[dict[str, Any]]) -> pa.Table:
    """Rows -> an Arrow table with the table's explicit schema (pyarrow infers nothing)."""
    return pa.Table.from_pylist(rows, schema=S.schema_of(table))


# ----------------------------------------------------------------------------- rows -> records

def _stage(value: str | None) -> Stage | None:
    return None if value is None else Stage(value)


def _tensors(values: list[dict[str, Any]] | None) -> list[TensorDesc]:
    return [TensorDesc(shape=tuple(v["shape"]), dtype=v["dtype"]) for v in values or []]


def run_from_row(row: dict[str, Any]) -> RunInfo:
    return RunInfo(
        run_id=row["run_id"], started_at=row["started_at"], ended_at=row["ended_at"], status=row["status"],
        models=row["models"] or [], chip=row["chip"] or "", system_desc_sha256=row["system_desc_sha256"] or "",
        plugin_version=row["plugin_version"] or "", opbyop_version=row["opbyop_version"] or "",
        git_sha=row["git_sha"] or "", options_key=row["options_key"] or "",
        config=json.loads(row["config"]) if row["config"] else {},
        phases={p["phase"]: p["seconds"] for p in row.get("phases") or []},
        mesh=row.get("mesh") or "1x1", topology=row.get("topology") or "single",
        compiler=CompilerIdentity(**{name: row.get(f"compiler_{name}") or "" for name in S.COMPILER_FIELDS
                                     if name != "key"}),
        group_id=row.get("group_id") or "", verdict_code=row.get("verdict_code") or "",
    )


def op_from_row(row: dict[str, Any]) -> OpRecord:
    source = (SourceFrame(file=row["source_file"], line=row["source_line"], col=row["source_col"] or 0)
              if row["source_file"] is not None else None)
    provenance = Provenance(
        framework_op=row["framework_op"], module_path=row["module_path"], aten_op=row["aten_op"],
        source=source, stack=[SourceFrame(**f) for f in row["stack"] or []], location=row["location"] or "",
    )
    operands = [OperandDesc(index=o["index"], kind=o["kind"], argument=o["argument"],
                            tensor=TensorDesc(shape=tuple(o["shape"]), dtype=o["dtype"]))
                for o in row["operands"] or []]
    return OpRecord(
        model=row["model"], position=row["position"], op_name=row["op_name"], signature=row["signature"],
        attributes=json.loads(row["attributes"]) if row["attributes"] else {}, operands=operands,
        inputs=_tensors(row["inputs"]), input_sources=[ValueRef(**v) for v in row["input_sources"] or []],
        outputs=_tensors(row["outputs"]), provenance=provenance, module_text=None,
        split_error=row["split_error"], mesh=row.get("mesh"),
        operand_shardings=row.get("operand_shardings") or [], result_shardings=row.get("result_shardings") or [],
    )


def _compile_from(row: dict[str, Any], prefix: str = "") -> CompileOutcome | None:
    if row[f"{prefix}compile_s"] is None:
        return None
    artifacts = {k: v for k, v in (row[f"{prefix}artifacts"] or {}).items() if v is not None}
    artifacts.update({e["kind"]: e["sha256"] for e in row[f"{prefix}artifacts_extra"] or []})
    stage_seconds = {stage: row[f"{prefix}{column}"] for stage, column in zip(COMPILE_STAGES, S.COMPILE_STAGE_COLUMNS)
                     if row[f"{prefix}{column}"] is not None}
    return CompileOutcome(
        reached=_stage(row[f"{prefix}compile_reached"]), failed_stage=_stage(row[f"{prefix}compile_failed_stage"]),
        message=row[f"{prefix}compile_message"], diagnostics=row[f"{prefix}compile_diagnostics"] or [],
        stage_seconds=stage_seconds, seconds=row[f"{prefix}compile_s"], artifacts=artifacts,
    )


def _placement_from(p: dict[str, Any]) -> OpPlacement:
    p = {k: v for k, v in p.items() if v is not None}  # t_stream and policy are null in older files
    return OpPlacement(**{**p, "grid": tuple(p["grid"]), "block_tiles": tuple(p["block_tiles"]),
                          "rejected": {r["reason"]: r["count"] for r in p["rejected"] or []}})


def _device_from(row: dict[str, Any], prefix: str = "") -> DeviceRun | None:
    if row[f"{prefix}device_s"] is None:
        return None
    return DeviceRun(
        ttnn_ops=row[f"{prefix}ttnn_ops"], not_simulated=row[f"{prefix}not_simulated"] or [],
        cycles=row[f"{prefix}cycles"], peak_l1_bytes=row[f"{prefix}peak_l1_bytes"],
        peak_dram_bytes=row[f"{prefix}peak_dram_bytes"],
        placements=[_placement_from(p) for p in row[f"{prefix}placements"] or []],
        seconds=row[f"{prefix}device_s"], message=row[f"{prefix}device_message"],
        mesh_shape=row.get(f"{prefix}device_mesh_shape") or [], topology=row.get(f"{prefix}device_topology"),
        chip_peak_l1_bytes=row.get(f"{prefix}chip_peak_l1_bytes") or [],
        chip_peak_dram_bytes=row.get(f"{prefix}chip_peak_dram_bytes") or [],
        collectives=[CollectiveRun(**c) for c in row.get(f"{prefix}collectives") or []],
        collective_bytes=row.get(f"{prefix}collective_bytes") or 0,
        collective_cycles=row.get(f"{prefix}collective_cycles") or 0,
        collective_seconds=row.get(f"{prefix}collective_s") or 0.0,
    )


def _golden_from(row: dict[str, Any]) -> GoldenComparison | None:
    if row["golden_s"] is None:
        return None
    return GoldenComparison(pcc=row["pcc"], max_abs_error=row["max_abs_error"], max_rel_error=row["max_rel_error"],
                            allclose=row["allclose"], passed=row["golden_passed"],
                            pcc_threshold=row["pcc_threshold"], method=row.get("golden_method") or "pcc",
                            seconds=row["golden_s"])


def result_from_row(row: dict[str, Any]) -> OpResult:
    return OpResult(
        signature=row["signature"], op_name=row["op_name"], status=legacy_status(row["status"], row["message"]),
        depth=Stage(row["depth"]), narrowing=row.get("narrowing"),
        failed_stage=_stage(row["failed_stage"]), message=row["message"], compile=_compile_from(row),
        device=_device_from(row), golden=_golden_from(row), started_at=row["started_at"],
        ended_at=row["ended_at"], worker=row["worker"], reused_from=row["reused_from"],
        compiler=row.get("compiler"), mesh=row.get("mesh"), topology=row.get("topology"),
        real_inputs=list(row.get("real_inputs") or []), synthetic_inputs=list(row.get("synthetic_inputs") or []),
        failed_pass=_failed_pass_from(row), pass_timing=_pass_timing_from(row),
        device_backend=row.get("device_backend"), ttsim=_ttsim_from(row),
    )


class StoredModel(BaseModel):
    """A models-table row: the ModelSummary as written, plus the counts computed at write time."""

    run_id: str
    summary: ModelSummary
    counts: ModelCounts


def model_from_row(row: dict[str, Any]) -> StoredModel:
    whole = None
    if row["whole_status"] is not None:
        whole = WholeModelResult(
            status=legacy_status(row["whole_status"], row["whole_message"]), depth=Stage(row["whole_depth"]),
            failed_stage=_stage(row["whole_failed_stage"]), message=row["whole_message"],
            compile=_compile_from(row, "whole_"), device=_device_from(row, "whole_"), pcc=row["whole_pcc"],
            max_abs_error=row["whole_max_abs_error"], reference=row.get("whole_reference") or "framework", iterations=row["whole_iterations"] or 0,
            seconds=row["whole_s"] or 0.0, accuracy_trace=_trace_from(row, S.TRACE_PREFIXES["model"]),
            ttsim=_whole_ttsim_from(row), reused_from=row.get("whole_reused_from"),
        )
    summary = ModelSummary(model=row["model"], frontend=row["frontend"] or "", ops_total=row["ops_total"] or 0,
                           ops_unique=row["ops_unique"] or 0, split_failures=row["split_failures"] or 0,
                           export_seconds=row["export_s"] or 0.0, error=row["error"], whole=whole,
                           module_artifact=row.get("module_artifact"), export_reused=bool(row.get("export_reused")),
                           whole_key=row.get("whole_key"))
    counts = ModelCounts(
        by_depth={stage: row[c] for stage, c in zip(Stage, S.DEPTH_COUNT_COLUMNS) if row[c]},
        by_status={status: row[f"status_{status.value}"] for status in Status if row.get(f"status_{status.value}")},
        without_result=row["ops_without_result"] or 0,
    )
    return StoredModel(run_id=row["run_id"], summary=summary, counts=counts)




def shrink_rows(run_id: str, result: ShrinkResult) -> list[dict[str, Any]]:
    """One row per variant of a shrink (opbyop.shrink.result.ShrinkResult), boundaries marked."""
    marks: dict[tuple[str, str, int | None], str] = {}
    for b in result.boundaries:
        if b.largest_passing is not None:
            marks[(b.dimension, b.dtype, b.largest_passing)] = "largest_passing"
        if b.smallest_failing is not None:
            marks[(b.dimension, b.dtype, b.smallest_failing)] = "smallest_failing"
    sizes = {b.dimension: b.size for b in result.boundaries}
    summary = "\n".join(result.summary())
    return [{
        "run_id": run_id, "signature": result.signature, "op_name": result.op_name, "op_dtype": result.dtype,
        "op_inputs": [_tensor(t) for t in result.inputs], "baseline_status": _enum(result.baseline_status),
        "dimension": v.dimension, "dtype": v.dtype, "size": v.size, "size_as_found": sizes.get(v.dimension),
        "variant_signature": v.signature or None, "inputs": [_tensor(t) for t in v.inputs],
        "outcome": _enum(v.outcome), "status": _enum(v.status), "failed_stage": _enum(v.failed_stage),
        "message": v.message, "seconds": v.seconds, "module_artifact": v.module_artifact,
        "boundary": marks.get((v.dimension, v.dtype, v.size)) if v.outcome.value in ("pass", "fail") else None,
        "shrink_s": result.seconds, "shrink_budget_s": result.budget_s, "shrink_complete": result.complete,
        "summary": summary,
    } for v in result.variants]
