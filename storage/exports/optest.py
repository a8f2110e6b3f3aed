"""OpTest JSON export: the record the tt-github-actions dashboards ingest (pydantic_models.py).

One OpTest per (unique op, model it occurs in), each with its own op's real start and end time,
`status` always filled for ops that were attempted (crashed / timeout are mapped by the stage that
failed and keep their real status in `config`), the failing stage in `config`, and `message` the
compiler's / device's words verbatim (never a stage prefix in it). A framework op the frontend
could not lower (frontend_failed) never compiled: compile_failed, its real status in `config`. Ops without a verdict of the
compiler or the device (skipped; not_simulated, simulator_error, analyzer_error, infra_error: opbyop's or the
infrastructure's) are skipped=True, success=False, status None, their fault in `config` (never
reported as passing, never counted as the compiler's failure). Split failures have no compiled op and no
timing of their own and are left out (they are counted in the models table).
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from opbyop.atomic import write_text
from opbyop.records import COMPILE_STAGES, DeviceRun, OpRecord, OpResult, RunInfo, Stage, Status, TensorDesc
from opbyop_storage.dataset import Store

BACKEND = "tt-mlir"
# What the runtime does with a tensor unless a program asks otherwise (to_device default: DRAM
# interleaved, tile layout); the records do not carry a per-tensor layout.
BUFFER_TYPE = "dram"
LAYOUT = "tile"


class TestStatus(str, Enum):
    __test__ = False  # not a pytest test class

    COMPILE_FAILED = "compile_failed"
    RUN_FAILED = "run_failed"
    GOLDEN_FAILED = "golden_failed"
    SUCCESS = "success"


class OpTestTensor(BaseModel):
    """TensorDesc of tt-github-actions."""

    shape: list[int]
    data_type: str
    buffer_type: str
    layout: str
    grid_shape: list[int]


class OpTest(BaseModel):
    github_job_id: int
    full_test_name: str
    test_start_ts: datetime
    test_end_ts: datetime | None
    test_duration: timedelta | None
    test_case_name: str
    filepath: str
    success: bool
    skipped: bool
    message: str | None
    config: dict[str, Any] | None
    frontend: str
    model_name: str
    op_kind: str
    op_name: str
    framework_op_name: str
    inputs: list[OpTestTensor] | None
    outputs: list[OpTestTensor] | None
    op_params: dict[str, Any] | None
    git_sha: str
    status: TestStatus | None
    card_type: str
    backend: str


def optest_status(result: OpResult) -> TestStatus | None:
    """success / the failure kinds as they are; crashed and timeout by the stage that failed."""
    direct = {Status.SUCCESS: TestStatus.SUCCESS, Status.COMPILE_FAILED: TestStatus.COMPILE_FAILED,
              Status.RUN_FAILED: TestStatus.RUN_FAILED, Status.GOLDEN_FAILED: TestStatus.GOLDEN_FAILED,
              Status.MISCOMPILED: TestStatus.GOLDEN_FAILED}  # the compiled program computes a wrong value
    if result.status in direct:
        return direct[result.status]
    if not result.status.is_verdict:  # skipped, or opbyop's / the infrastructure's: no verdict on the op
        return None
    stage = result.failed_stage
    if stage is Stage.GOLDEN:
        return TestStatus.GOLDEN_FAILED
    if stage is Stage.DEVICE_RUN:
        return TestStatus.RUN_FAILED
    return TestStatus.COMPILE_FAILED  # a compile stage, SPLIT, the frontend, or unknown: it never got to run


def _tensors(tensors: list[TensorDesc], grid: list[int]) -> list[OpTestTensor]:
    return [OpTestTensor(shape=list(t.shape), data_type=t.dtype, buffer_type=BUFFER_TYPE, layout=LAYOUT,
                         grid_shape=grid) for t in tensors]


def _grid(result: OpResult) -> list[int]:
    """The core grid the device model chose for the op's first compute op ([] if it never ran)."""
    if result.device and result.device.placements:
        return list(result.device.placements[0].grid)
    return []


def _mesh_config(device: DeviceRun) -> dict:
    """A mesh run's shape, topology, per-chip peaks and collectives (bytes and cycles)."""
    return {"mesh_shape": list(device.mesh_shape), "device_topology": device.topology,
            "chip_peak_dram_bytes": list(device.chip_peak_dram_bytes),
            "chip_peak_l1_bytes": list(device.chip_peak_l1_bytes),
            "collectives": [c.model_dump() for c in device.collectives],
            "collective_bytes": device.collective_bytes, "collective_cycles": device.collective_cycles}


def _failed_pass(result: OpResult) -> dict[str, Any] | None:
    """The compiler pass a failed compile stopped in, as OpTest's free-form op_params hold it."""
    p = result.failed_pass
    if p is None:
        return None
    return {"pass": p.argument, "name": p.name, "outcome": p.outcome.value, "position": p.position,
            "passes_started": p.passes_started, "last_succeeded": p.last_succeeded, "ir_before": p.ir_before,
            "reason": p.reason}


def optest(run: RunInfo, result: OpResult, occurrences: list[OpRecord], frontend: str,
           github_job_id: int = 0) -> OpTest:
    first = min(occurrences, key=lambda o: o.position)
    model = first.model
    p = first.provenance
    short = result.signature[:16]
    config = {
        "run_id": run.run_id, "signature": result.signature, "status": result.status.value,
        "fault": result.status.fault.value, "narrowing": result.narrowing,
        "depth": result.depth.value, "failed_stage": result.failed_stage.value if result.failed_stage else None,
        "compile_stage_reached": (result.compile.reached.value if result.compile and result.compile.reached
                                  else None),
        "positions": sorted(o.position for o in occurrences), "occurrences": len(occurrences),
        "module_paths": sorted({o.provenance.module_path for o in occurrences if o.provenance.module_path}),
        "location": p.location, "chip": run.chip, "options_key": run.options_key,
        "mesh": run.mesh, "topology": run.topology, "module_mesh": first.mesh,
        "operand_shardings": first.operand_shardings, "result_shardings": first.result_shardings,
        "plugin_version": run.plugin_version, "worker": result.worker, "reused_from": result.reused_from,
        "pcc": result.golden.pcc if result.golden else None,
        "cycles": result.device.cycles if result.device else None,
        **(_mesh_config(result.device) if result.device and result.device.mesh_shape else {}),
        "compile_seconds": {s.value: result.compile.stage_seconds[s] for s in COMPILE_STAGES
                            if result.compile and s in result.compile.stage_seconds},
    }
    return OpTest(
        github_job_id=github_job_id,
        full_test_name=f"{model}::{result.op_name}::{short}",
        test_start_ts=result.started_at, test_end_ts=result.ended_at,
        test_duration=result.ended_at - result.started_at,
        test_case_name=f"{result.op_name}[{short}]",
        filepath=(p.source.file if p.source else model),
        success=result.status is Status.SUCCESS, skipped=not result.status.is_verdict,
        message=result.message, config=config, frontend=frontend, model_name=model,
        op_kind=result.op_name.split(".", 1)[-1], op_name=result.op_name,
        framework_op_name=p.framework_op or p.aten_op or "",
        inputs=_tensors(first.inputs, _grid(result)), outputs=_tensors(first.outputs, _grid(result)),
        op_params={"attributes": first.attributes, "failed_stage": config["failed_stage"],
                   "failed_pass": _failed_pass(result)},
        git_sha=run.git_sha, status=optest_status(result), card_type=run.chip, backend=BACKEND,
    )


def optests_for_run(store: Store, run_id: str, github_job_id: int = 0) -> list[OpTest]:
    run = store.run(run_id)
    results = {r.signature: r for r in store.results(run_id)}
    frontends = {m.summary.model: m.summary.frontend for m in store.models(run_id)}
    by_pair: dict[tuple[str, str], list[OpRecord]] = defaultdict(list)
    for op in store.ops(run_id):
        if op.ok and op.signature in results:
            by_pair[(op.model, op.signature)].append(op)
    return [optest(run, results[sig], occ, frontends.get(model, ""), github_job_id)
            for (model, sig), occ in sorted(by_pair.items())]


def export_optest(store: Store, run_id: str, out: Path, github_job_id: int = 0) -> int:
    """Write the run's OpTests as a JSON array to `out` (atomically); returns how many."""
    tests = optests_for_run(store, run_id, github_job_id)
    write_text(out, json.dumps([t.model_dump(mode="json") for t in tests], indent=1))
    return len(tests)
