"""One unique op through the whole pipeline: compile -> simulated device run -> golden check.

Runs inside a worker process (opbyop.worker) that keeps the compiler, XLA:CPU and the device warm.
The result always says how deep the op got, which stage failed, and the message.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from opbyop.analysis.accuracy_trace import (TaggedModule, TraceObserver, finish_trace, references_by_op, trace_plan,
                                           traced)
from opbyop.artifacts import ArtifactStore
from opbyop.analysis.attribution import judge
from opbyop.analysis.steps import STEPS, Ending, finish
from opbyop.boards import Topology
from opbyop.compiler.plugin import TTCompiler
from opbyop.config import AnalysisSettings
from opbyop.device.placement import Policy
from opbyop.device.runtime import Binary, as_host_type
from opbyop.device.simulator import DeviceSimulator, SimulationError
from opbyop.device.stitch import run_stitched
from opbyop.device.ttsim.agreement import agreement, as_model_dtype, difference
from opbyop.device.ttsim.backend import TtsimBackend, TtsimResult
from opbyop.frontends.values import read_values
from opbyop.golden import upstream
from opbyop.golden.blocked import golden_outputs
from opbyop.golden.compare import compare, verdict
from opbyop.dtypes import mlir_dtype
from opbyop.golden.inputs import make_inputs
from opbyop.golden.narrowing import narrowed_type, narrowing
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.ir.constants import wide_constants
from opbyop.ir.harness import not_a_model_op
from opbyop.ir.mesh import MeshMismatchError
from opbyop.op_memory import op_memory_message, over_budget
from opbyop.records import (AccuracyTrace, CompileOutcome, OpResult, Stage, Status, TtsimOutcome, TtsimRun, UniqueOp,
                            WholeModelResult, utcnow)
from opbyop.stage_call import OUT_OF_MEMORY, StageCall

ProgressFn = Callable[[str], None]
RANDOM_OPS = frozenset({"stablehlo.rng", "stablehlo.rng_bit_generator"})
# What a ttsim outcome means for the op when ttsim gave a verdict (others leave the model's standing)
TTSIM_VERDICTS = {TtsimOutcome.REJECTED: Status.RUN_FAILED, TtsimOutcome.LIMIT: Status.SIMULATOR_LIMIT,
                  TtsimOutcome.UNMAPPED: Status.NOT_SIMULATED, TtsimOutcome.MAPPING: Status.ANALYZER_ERROR}
DeviceFailure = tuple[Status, str]


@dataclass
class Attempt:
    """One op's analysis as it goes: what each step hands to the next."""

    op: UniqueOp
    settings: AnalysisSettings
    request_id: str
    result: OpResult
    outcome: CompileOutcome | None = None  # the compile's
    inputs: list | None = None  # the op's input values (the device's and the golden's)
    binary: Binary | None = None  # its program, loaded on the device model
    outputs: list[np.ndarray] | None = None  # the device's outputs


class OpAnalyzer:
    """Everything one op needs, kept warm across ops."""

    def __init__(self, compiler: TTCompiler, golden: XlaCpu, device: DeviceSimulator,
                 artifacts: ArtifactStore, scratch: Path, ttsim: TtsimBackend | None = None):
        self.compiler = compiler
        self.golden = golden
        self.device = device
        self.artifacts = artifacts
        self.scratch = scratch
        self.ttsim = ttsim  # tt-metal's kernels on ttsim, for runs that ask for that backend

    def configure_device(self, settings: AnalysisSettings) -> None:
        """The simulator set up as `settings` say: harvested rows, placement policy, the target's topology."""
        self.device.configure(settings.device.harvesting_mask, Policy(settings.device.placement_policy),
                              Topology(settings.topology))

    def analyze(self, op: UniqueOp, settings: AnalysisSettings, request_id: str,
                progress: ProgressFn = lambda stage: None) -> OpResult:
        """The op through STEPS, in order, until one ends it; its depth and failed stage come from the
        step that ended it (a step's table row), never paired by hand."""
        attempt = Attempt(op, settings, request_id, OpResult(
            signature=op.signature, op_name=op.op_name, status=Status.SUCCESS, depth=Stage.SPLIT,
            started_at=utcnow(), mesh=settings.mesh, topology=settings.topology))
        for step in STEPS:
            progress(step.name)
            # the worker's memory limit: this op's fault of size, never the worker's end
            call = StageCall.of(lambda: getattr(self, step.method)(attempt), step.first, catch=OUT_OF_MEMORY)
            ending = call.value if call.ok else Ending(
                Status.INFRA_ERROR, op_memory_message(op, f"MemoryError during {step.first.value}"))
            if ending is not None:
                return step.finish(attempt.result, ending)
        return finish(attempt.result, Status.SUCCESS, STEPS[-1].last, None, None)

    def _compile(self, attempt: Attempt) -> Ending | None:
        op, settings = attempt.op, attempt.settings
        if op.frontend_error is not None:  # the framework's exporter could not lower it: nothing to compile
            return Ending(Status.FRONTEND_FAILED, op.frontend_error)
        reason = not_a_model_op(op.op_name, op.attributes)
        if reason is not None:  # a test-harness check: nothing of the model to compile
            return Ending(Status.SKIPPED, reason, skipped=True)
        try:
            outcome = self.compiler.compile(op.module_text, settings.options, self.scratch / attempt.request_id,
                                            self.artifacts)
        except MeshMismatchError as e:  # the target has too few chips for the op's mesh: never the compiler's fault
            return Ending(Status.INFRA_ERROR, str(e))
        attempt.result.compile = attempt.outcome = outcome
        if not outcome.ok:  # it stopped inside the compile: the dumps say how far it got
            return Ending(Status.COMPILE_FAILED, outcome.message, reached=outcome.reached or Stage.SPLIT,
                          failed=outcome.failed_stage)
        return None

    def _run_on_device(self, attempt: Attempt) -> Ending | None:
        op, settings, result = attempt.op, attempt.settings, attempt.result
        if not settings.run_device:
            return Ending(Status.SKIPPED, "device run not requested", skipped=True)
        refused = over_budget(op, settings.memory_budget_bytes)
        if refused is not None:
            return Ending(Status.INFRA_ERROR, refused)
        self.configure_device(settings)
        result.real_inputs, result.synthetic_inputs = input_kinds(op)
        failure: DeviceFailure | None = None
        outputs: list[np.ndarray] | None = None
        loaded = StageCall.of(lambda: self._load(op, settings, attempt.outcome), Stage.DEVICE_RUN,
                              reraise=OUT_OF_MEMORY)
        if not loaded.ok:  # a bug in opbyop's reading of the op or its program
            return Ending(Status.ANALYZER_ERROR, f"simulator error: {loaded.described}")
        attempt.inputs, attempt.binary, result.narrowing = loaded.value
        result.device_backend = "model"
        ran = StageCall.of(lambda: self.device.run_binary(attempt.binary, attempt.inputs, stablehlo=op.module_text),
                           Stage.DEVICE_RUN, reraise=OUT_OF_MEMORY)
        if ran.ok:
            outputs, result.device = ran.value
        elif isinstance(ran.error, SimulationError):
            result.device, failure = ran.error.run, (ran.error.status, str(ran.error))
        else:  # a bug in opbyop's simulator, named as such
            failure = (Status.ANALYZER_ERROR, f"simulator error: {ran.described}")
        if settings.device.backend == "ttsim":
            outputs, failure = self._on_ttsim(result, attempt.binary, attempt.inputs, outputs, failure,
                                              settings.device.ttsim_timeout_s, settings.device.ttsim_report)
        if failure is not None:
            return Ending(*failure)
        attempt.outputs = outputs
        return None

    def _check_golden(self, attempt: Attempt) -> Ending | None:
        op, settings, result = attempt.op, attempt.settings, attempt.result
        if not settings.run_golden:
            return Ending(Status.SKIPPED, "golden check not requested", skipped=True)
        if op.op_name in RANDOM_OPS:  # the device's draw is its own: nothing to compare it with
            return Ending(Status.SKIPPED, f"no golden reference for {op.op_name}: it draws random values", skipped=True)
        start = time.perf_counter()
        golden = StageCall.of(lambda: golden_outputs(self.golden, op, attempt.inputs), Stage.GOLDEN,
                              reraise=OUT_OF_MEMORY)
        if not golden.ok:  # XLA:CPU cannot run the op: no reference, opbyop's gap, not the device's
            return Ending(Status.ANALYZER_ERROR, f"golden reference unavailable: XLA:CPU failed: {golden.brief}")
        expected = golden.value
        comparison = compare(attempt.outputs, expected, [o.dtype for o in op.outputs], settings.thresholds)
        comparison.seconds = time.perf_counter() - start
        result.golden = comparison
        if not comparison.passed:  # whose fault: the lowering, the simulator, or the chip's numerics
            judgment = judge(attempt.binary, attempt.inputs, expected, [o.dtype for o in op.outputs],
                             settings.thresholds, self.device, verdict(comparison), result.narrowing,
                             stablehlo=op.module_text, on_ttsim=result.device_backend == "ttsim")
            comparison.seconds = time.perf_counter() - start
            return Ending(judgment.status, judgment.message)
        return None

    def _load(self, op: UniqueOp, settings: AnalysisSettings, outcome: CompileOutcome) -> tuple[list, Binary, str | None]:
        """The op's inputs, its program loaded on the device model, and a dtype the program narrowed."""
        inputs = make_inputs(op.op_name, op.inputs, op.operands, op.attributes, op.signature, settings.seed,
                             known=upstream.load(op, self.artifacts))
        binary = self.device.load(self.artifacts.read_text(outcome.artifacts["ttnn_runtime"]))
        return inputs, binary, _narrowing(op, binary, inputs)

    def _on_ttsim(self, result: OpResult, binary: Binary, inputs: list, outputs: list[np.ndarray] | None,
                  failure: DeviceFailure | None, timeout: float, report: bool = False,
                  ) -> tuple[list[np.ndarray] | None, DeviceFailure | None]:
        """The same program on ttsim: its outputs (or its refusal) become the device's verdict; where
        ttsim gives none (out of time, unavailable, crashed) the model's stands, marked unconfirmed."""
        ttsim = self.ttsim.run(binary.program, inputs, timeout, report) if self.ttsim is not None else \
            TtsimResult(TtsimRun(outcome=TtsimOutcome.UNAVAILABLE, message="this analyzer has no ttsim backend"))
        result.ttsim = run = ttsim.run
        if ttsim.report is not None:
            run.report = self.artifacts.put(ttsim.report, ".tar.gz")
        if run.outcome is TtsimOutcome.RAN:
            result.device_backend = "ttsim"
            converted = ttsim_host_outputs(binary, ttsim.outputs, outputs)
            if failure is None and outputs is not None:
                run.agreement, run.max_ulps = agreement(outputs, converted)
                run.max_error, run.difference = difference(outputs, converted)
            else:
                run.agreement = "model_failed"
            return converted, None
        if run.outcome in TTSIM_VERDICTS:
            result.device_backend = "ttsim"
            return None, (TTSIM_VERDICTS[run.outcome], f"ttsim: {run.message}")
        return outputs, failure

    def analyze_whole(self, model: WholeModel, settings: AnalysisSettings, request_id: str,
                      progress: ProgressFn = lambda stage: None) -> WholeModelResult:
        """The whole module compiled at once, then run stitched against the framework's output (or,
        for a StableHLO file, which has none, against XLA:CPU running the same module)."""
        started = time.perf_counter()
        progress("compile")
        plan, trace_note = trace_plan(model.module_text, model.name, settings.accuracy_trace)
        compiled_text = plan.text if plan is not None else model.module_text  # the same program, ops tagged
        outcome = self.compiler.compile(compiled_text, settings.options, self.scratch / request_id, self.artifacts)
        if not outcome.ok:
            return WholeModelResult(status=Status.COMPILE_FAILED, depth=outcome.reached or Stage.SPLIT,
                                    failed_stage=outcome.failed_stage, message=outcome.message, compile=outcome,
                                    seconds=time.perf_counter() - started)
        if not settings.run_device:
            return WholeModelResult(status=Status.SKIPPED, depth=Stage.FLATBUFFER, compile=outcome,
                                    message="device run not requested", seconds=time.perf_counter() - started)
        progress("device_run")
        self.configure_device(settings)
        values, references = model.load_values(settings.seed)
        threshold = settings.thresholds.for_dtype("f32").pcc
        # XLA:CPU's run with every intermediate, beside the device's (it leaves the GIL): with a core
        # free the run waits only for what is left of it when the device is done
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="trace-golden") as pool:
            golden = pool.submit(_timed, self.golden.run, plan.all_outputs_text, values, plan.key) if plan else None
            binary = Binary.load(self.artifacts.read_text(outcome.artifacts["ttnn_runtime"]))
            device = self.device.device_for(binary.program.spec)
            device.memory.reset_peaks()
            observer = TraceObserver(plan, {}, threshold, binary.program.mesh_shape) if plan else None
            try:
                stitched = StageCall.of(lambda: run_stitched(
                    device, binary, values, model.parameters, model.iterations, stablehlo=model.module_text,
                    observer=observer, topology=self.device.topology), Stage.DEVICE_RUN)
            finally:
                device.release_constants()
            if not stitched.ok:
                return whole_run_failure(stitched, outcome, time.perf_counter() - started)
            run = stitched.value
            observer, xla_outputs, trace_note = trace_references(golden, observer, plan, trace_note)
        # a mesh run has its chips' peaks; on one chip the allocator's peaks cover the whole run (const-eval
        # included), and L1's peak is the larger of resident tensors and an op's circular buffers beside them
        steady = run.steady if run.steady.mesh_shape else run.steady.model_copy(update={
            "peak_dram_bytes": device.memory.peak_dram,
            "peak_l1_bytes": max(device.memory.peak_l1_per_core, run.steady.peak_l1_bytes)})
        result = WholeModelResult(status=Status.SUCCESS, depth=Stage.DEVICE_RUN, compile=outcome, device=steady,
                                  iterations=run.iterations)
        progress("golden")
        result.accuracy_trace = finish_trace(plan, observer, trace_note, threshold)
        result.seconds = time.perf_counter() - started  # the trace's comparisons included
        if not references and xla_outputs is not None:  # XLA:CPU already ran the module, for the trace
            references, result.reference = xla_outputs, "XLA:CPU"
        if not references:  # a StableHLO file: XLA:CPU runs the same module on the same values
            xla = StageCall.of(lambda: self.golden.run(model.module_text, values), Stage.GOLDEN)
            if not xla.ok:
                return result.model_copy(update={
                    "status": Status.SKIPPED,
                    "message": f"no framework output, and XLA:CPU could not run the module: {xla.brief}"})
            references, result.reference = xla.value, "XLA:CPU"
        dtypes = [mlir_dtype(r.dtype) for r in references]
        if settings.device.backend == "ttsim":
            result.ttsim = self._whole_on_ttsim(binary, values, references, dtypes, settings,
                                                observer.references if observer is not None else None, plan)
        comparison = compare(run.outputs, references, dtypes, settings.thresholds)
        result.pcc, result.max_abs_error = comparison.pcc, comparison.max_abs_error
        if comparison.passed:
            result.depth = Stage.GOLDEN
        else:
            result.status, result.failed_stage = Status.GOLDEN_FAILED, Stage.GOLDEN
            result.message = f"output differs from the {result.reference}'s: {verdict(comparison)}"
        return result

    def _whole_on_ttsim(self, binary: Binary, values: list[np.ndarray], references: list[np.ndarray],
                        dtypes: list[str], settings: AnalysisSettings, by_op: dict[int, np.ndarray] | None = None,
                        plan: TaggedModule | None = None) -> TtsimRun:
        """The whole program run once on ttsim, its outputs held against the model's reference; with
        XLA:CPU's value of each op (`by_op`, the model's accuracy trace's), the trace on ttsim's values."""
        if self.ttsim is None:
            return TtsimRun(outcome=TtsimOutcome.UNAVAILABLE, message="this analyzer has no ttsim backend")
        ttsim = self.ttsim.run(binary.program, values, settings.device.whole_ttsim_timeout_s,
                               observe=traced if plan is not None and by_op else None)
        if ttsim.run.outcome is TtsimOutcome.RAN:
            outputs = ttsim_host_outputs(binary, ttsim.outputs)
            ttsim.run.pcc = compare(outputs, references, dtypes, settings.thresholds).pcc
            if plan is not None and by_op:
                ttsim.run.accuracy_trace = ttsim_trace(plan, by_op, settings.thresholds.for_dtype("f32").pcc,
                                                       binary, ttsim.observed)
        return ttsim.run


def ttsim_trace(plan: TaggedModule, by_op: dict[int, np.ndarray], threshold: float, binary: Binary,
                observed: dict[tuple[str, int], np.ndarray]) -> AccuracyTrace:
    """The accuracy trace of a whole program's run on ttsim: the outputs ttsim sent back, each held
    against XLA:CPU's value of the model's op it names, as the device model's run is traced. They
    come from every function the run ran (const-eval functions too), in the order it ran them, so the
    observer keeps the same last output of each model op as it keeps on the model's run."""
    observer = TraceObserver(plan, by_op, threshold, binary.program.mesh_shape)
    functions = binary.program.functions
    for (function, index), value in observed.items():
        observer(functions[function].ops[index], [value])
    trace = finish_trace(plan, observer, None, threshold)
    assert trace is not None
    return trace


def whole_run_failure(stitched: StageCall, compiled: CompileOutcome, seconds: float) -> WholeModelResult:
    """A stitched run that raised: a SimulationError is the run's own verdict (a failure or a simulator
    gap), anything else a bug of the analyzer."""
    error = stitched.error
    simulated = isinstance(error, SimulationError)
    return WholeModelResult(status=error.status if simulated else Status.ANALYZER_ERROR, depth=Stage.FLATBUFFER,
                            failed_stage=Stage.DEVICE_RUN, compile=compiled, device=getattr(error, "run", None),
                            message=str(error) if simulated else f"simulator error: {stitched.described}",
                            seconds=seconds)


def ttsim_host_outputs(binary: Binary, outputs: list[np.ndarray], model: list[np.ndarray] | None = None,
                       ) -> list[np.ndarray]:
    """ttsim's outputs as the runtime hands them to the framework (as the model's run does): in the
    model's element type where it ran (ttsim reads bf16 back as f32), else the program's."""
    main = binary.program.main
    hosts, types = main.host_return_types, main.return_types
    return [as_host_type(as_model_dtype(x, model[i] if model and i < len(model) else None,
                                        types[i].dtype if i < len(types) and types[i] is not None else ""),
                         hosts[i] if i < len(hosts) else None)
            for i, x in enumerate(outputs)]


def trace_references(golden: Future | None, observer: TraceObserver | None, plan: TaggedModule | None,
                     note: str | None) -> tuple[TraceObserver | None, list[np.ndarray] | None, str | None]:
    """The observer given XLA:CPU's value of every op of the model (`golden`'s run, waited for), and
    the module's own outputs from that run; no observer when XLA:CPU failed (the note says why).
    The run's seconds count as the trace's, overlapped or not: on a busy machine they are CPU the
    device's run did not get."""
    if golden is None or observer is None or plan is None:
        return None, None, note
    try:
        everything, seconds = golden.result()
    except Exception as e:  # no trace, the whole-model run goes on
        return None, None, f"XLA:CPU could not run the model with every intermediate: {type(e).__name__}: {e}"
    observer.references = references_by_op(plan, everything)
    observer.seconds = seconds
    return observer, everything[:plan.outputs], None


def _timed(run: Callable[..., list[np.ndarray]], *args: object) -> tuple[list[np.ndarray], float]:
    started = time.perf_counter()
    return run(*args), time.perf_counter() - started


@dataclass(frozen=True)
class WholeModel:
    """A whole model to compile and run stitched: its rewritten module (ir.rewrite), and an npz of its argument
    values (arg0..) and of the framework's outputs (ref0.., none for a StableHLO file)."""

    name: str
    module_text: str
    values_path: str
    parameters: list[int]  # argument indices that are weights (pushed to the device once)
    iterations: int = 2

    def load_values(self, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Arguments without a value (weights known by shape and dtype) are drawn here, in the worker."""
        return read_values(self.values_path, self.name, seed)


def input_kinds(op: UniqueOp) -> tuple[list[str], list[str]]:
    """(real, synthetic) arguments of the op's module by name: real ones have the model's own values."""
    names = [f"arg{i}" for i in range(len(op.inputs))]
    return ([n for i, n in enumerate(names) if i in op.input_values],
            [n for i, n in enumerate(names) if i not in op.input_values])


def _narrowing(op: UniqueOp, binary: Binary, inputs: list) -> str | None:
    """The element types the compiled program changed against the op's own (f64 -> f32, i64 -> si32 ...)."""
    main = binary.program.main
    constants = [(narrowed, value) for value in wide_constants(op) if (narrowed := narrowed_type(mlir_dtype(value.dtype)))]
    return narrowing(op.inputs, main.argument_types, op.outputs, main.return_types, inputs, constants)




