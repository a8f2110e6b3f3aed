"""One unique op through the whole pipeline: compile -> simulated device run -> golden check.

Runs inside a worker process (opbyop.worker) that keeps the compiler, XLA:CPU and the device warm.
The result always says how deep the op got, which stage failed, and the message.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Callable

from opbyop.artifacts import ArtifactStore
from opbyop.compiler.plugin import TTCompiler
from opbyop.device.simulator import DeviceSimulator, SimulationError
from opbyop.golden.compare import compare
from opbyop.golden.inputs import make_inputs
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.records import OpResult, Stage, Status, UniqueOp, utcnow
from opbyop.worker.protocol import AnalysisSettings

ProgressFn = Callable[[str], None]


class OpAnalyzer:
    """Everything one op needs, kept warm across ops."""

    def __init__(self, compiler: TTCompiler, golden: XlaCpu, device: DeviceSimulator,
                 artifacts: ArtifactStore, scratch: Path):
        self.compiler = compiler
        self.golden = golden
        self.device = device
        self.artifacts = artifacts
        self.scratch = scratch

    def analyze(self, op: UniqueOp, settings: AnalysisSettings, request_id: str,
                progress: ProgressFn = lambda stage: None) -> OpResult:
        started = utcnow()
        result = OpResult(signature=op.signature, op_name=op.op_name, status=Status.COMPILE_FAILED,
                          depth=Stage.SPLIT, started_at=started)

        progress("compile")
        outcome = self.compiler.compile(op.module_text, settings.options, self.scratch / request_id, self.artifacts)
        result.compile = outcome
        if not outcome.ok:
            return _finish(result, Status.COMPILE_FAILED, outcome.reached or Stage.SPLIT,
                           outcome.failed_stage, outcome.message)
        if not settings.run_device:
            return _finish(result, Status.SKIPPED, Stage.FLATBUFFER, None, "device run not requested")

        progress("device_run")
        inputs = make_inputs(op.op_name, op.inputs, op.operands, op.attributes, op.signature, settings.seed)
        program = self.artifacts.read_text(outcome.artifacts["ttnn_runtime"])
        try:
            outputs, run = self.device.run(program, inputs)
        except SimulationError as e:
            result.device = e.run
            return _finish(result, Status.RUN_FAILED, Stage.FLATBUFFER, Stage.DEVICE_RUN, str(e))
        result.device = run
        if not settings.run_golden:
            return _finish(result, Status.SKIPPED, Stage.DEVICE_RUN, None, "golden check not requested")

        progress("golden")
        start = time.perf_counter()
        try:
            expected = self.golden.run(op.module_text, inputs, key=op.signature)
            comparison = compare(outputs, expected, [o.dtype for o in op.outputs], settings.thresholds)
        except Exception as e:  # XLA refusing the op is a golden failure with XLA's words
            return _finish(result, Status.GOLDEN_FAILED, Stage.DEVICE_RUN, Stage.GOLDEN,
                           f"golden reference failed: {type(e).__name__}: {e}")
        comparison.seconds = time.perf_counter() - start
        result.golden = comparison
        if not comparison.passed:
            return _finish(result, Status.GOLDEN_FAILED, Stage.DEVICE_RUN, Stage.GOLDEN,
                           f"output mismatch: pcc {comparison.pcc} < {comparison.pcc_threshold}, "
                           f"max abs error {comparison.max_abs_error:.3g}")
        return _finish(result, Status.SUCCESS, Stage.GOLDEN, None, None)


def _finish(result: OpResult, status: Status, depth: Stage, failed: Stage | None, message: str | None) -> OpResult:
    result.status, result.depth, result.failed_stage, result.message = status, depth, failed, message
    result.ended_at = utcnow()
    return result


def describe_exception(e: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(e), e)).strip()
