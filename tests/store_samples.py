"""Realistic records built with the pydantic models, for tests and demos of the store.

Each result is consistent with its status the way the analyser makes them: a compile failure has a
compile outcome with the stages reached and their times, a device failure a device run, a golden
failure a comparison below threshold; timestamps are distinct per op.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from opbyop.records import (
    AccuracyTrace, TracePoint,
    COMPILE_STAGES, CompileOutcome, CompilerIdentity, DeviceRun, FailedPass, GoldenComparison, ModelSummary, OperandDesc,
    OperandKind,
    OpPlacement, OpRecord, OpResult, PassOutcome, PassTiming, Provenance, RunInfo, RunStatus, SourceFrame, Stage, Status,
    TensorDesc, ValueRef,
    WholeModelResult,
)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def tensor(spec: str) -> TensorDesc:
    """'4x32xf32' -> TensorDesc((4, 32), 'f32'); 'f32' -> a scalar."""
    *dims, dtype = spec.split("x")
    return TensorDesc(shape=tuple(int(d) for d in dims), dtype=dtype)


@dataclass(frozen=True)
class OpSpec:
    """One unique op of the sample zoo."""

    key: str  # short name, e.g. 'add_4x32'
    op_name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    framework_op: str = ""

    @property
    def signature(self) -> str:
        return sha(f"{self.op_name}({','.join(self.inputs)})->{','.join(self.outputs)}")


def record(model: str, position: int, op: OpSpec, module_path: str = "", line: int = 1) -> OpRecord:
    inputs = [tensor(t) for t in op.inputs]
    source = SourceFrame(file=f"/zoo/{model}.py", line=line, col=8)
    return OpRecord(
        model=model, position=position, op_name=op.op_name, signature=op.signature,
        attributes={"note": op.key, "dims": [0, 1]} if "dot" in op.op_name else {},
        operands=[OperandDesc(index=i, kind=OperandKind.ARGUMENT, tensor=t, argument=i) for i, t in enumerate(inputs)],
        inputs=inputs, outputs=[tensor(t) for t in op.outputs],
        input_sources=[ValueRef(position=position - 1 if position else None, result=0,
                                model_argument=0 if position == 0 else None)],
        provenance=Provenance(framework_op=op.framework_op or None, module_path=module_path or None,
                              aten_op=f"aten.{op.key.split('_')[0]}.default", source=source,
                              stack=[source, SourceFrame(file="<torch>/nn/modules/module.py", line=1750)],
                              location=f'loc("{module_path}"("/zoo/{model}.py":{line}:8))'),
        module_text=None,
    )


def split_failure(model: str, position: int, op_name: str, error: str) -> OpRecord:
    return OpRecord(model=model, position=position, op_name=op_name, signature="", split_error=error)


def _compile(reached: Stage | None, failed: Stage | None, message: str | None, sig: str) -> CompileOutcome:
    stages = [s for s in COMPILE_STAGES if reached is not None and s.rank <= reached.rank]
    kinds = {Stage.STABLEHLO: "shlo", Stage.TTIR: "ttir", Stage.TTNN: "ttnn", Stage.FLATBUFFER: "flatbuffer"}
    artifacts = {kinds[s]: sha(f"{sig}/{kinds[s]}") for s in stages}
    if reached is Stage.FLATBUFFER:
        artifacts["ttnn_runtime"] = sha(f"{sig}/runtime")
    return CompileOutcome(
        reached=reached, failed_stage=failed, message=message,
        diagnostics=[f'loc("/zoo/m.py":3:8): error: {message}'] if message else [],
        stage_seconds={s: 0.05 * (s.rank + 1) for s in stages}, seconds=0.05 * (len(stages) + 1) + 0.01,
        artifacts=artifacts,
    )


def _device(cycles: int, message: str | None = None) -> DeviceRun:
    placement = OpPlacement(ttnn_op="ttnn.add", grid=(2, 4), block_tiles=(1, 2), buffer_factor=2,
                            l1_bytes_per_core=16384, cycles=cycles, candidates=12, legal=5,
                            rejected={"L1UsageOverMaxLimit": 4, "IllegalStackForGrid": 3}, t_stream="R2",
                            policy="fewest_cycles")
    return DeviceRun(ttnn_ops=2, not_simulated=[], cycles=cycles, peak_l1_bytes=32768, peak_dram_bytes=1 << 20,
                     placements=[placement], seconds=0.004, message=message)


def result(op: OpSpec, status: Status, failed_stage: Stage | None = None, message: str | None = None,
           started_at: datetime | None = None, worker: str = "w0", reused_from: str | None = None) -> OpResult:
    """A result whose depth, failed stage, compile/device/golden parts all agree with `status`."""
    started = started_at or datetime(2026, 11, 1, 2, 0, tzinfo=timezone.utc)
    sig = op.signature
    compile_ = device = golden = None
    if status is Status.SUCCESS:
        depth, failed_stage = Stage.GOLDEN, None
        compile_ = _compile(Stage.FLATBUFFER, None, None, sig)
        device = _device(1200)
        golden = GoldenComparison(pcc=0.9999, max_abs_error=1e-4, max_rel_error=2e-4, allclose=True, passed=True,
                                  pcc_threshold=0.99, seconds=0.002)
    elif status is Status.SKIPPED:
        depth, failed_stage = Stage.FLATBUFFER, None
        compile_ = _compile(Stage.FLATBUFFER, None, None, sig)
    else:
        failed_stage = failed_stage or {Status.COMPILE_FAILED: Stage.TTIR, Status.RUN_FAILED: Stage.DEVICE_RUN,
                                        Status.GOLDEN_FAILED: Stage.GOLDEN}.get(status, Stage.TTNN)
        order = list(Stage)
        depth = order[order.index(failed_stage) - 1]
        reached = depth if depth in COMPILE_STAGES else (Stage.FLATBUFFER if depth.rank > Stage.FLATBUFFER.rank else None)
        compile_failed = failed_stage in COMPILE_STAGES
        compile_ = _compile(reached, failed_stage if compile_failed else None, message if compile_failed else None, sig)
        if failed_stage.rank >= Stage.DEVICE_RUN.rank:
            device = _device(900, message if failed_stage is Stage.DEVICE_RUN else None)
        if failed_stage is Stage.GOLDEN:
            golden = GoldenComparison(pcc=0.71, max_abs_error=0.5, max_rel_error=3.0, allclose=False, passed=False,
                                      pcc_threshold=0.99, seconds=0.002)
    seconds = 0.2 + int(sig[:4], 16) % 100 / 1000
    failed_pass = _failed_pass(status, failed_stage) if failed_stage in COMPILE_STAGES else None
    return OpResult(signature=sig, op_name=op.op_name, status=status, depth=depth, failed_stage=failed_stage,
                    message=message, compile=compile_, device=device, golden=golden, started_at=started,
                    ended_at=started + timedelta(seconds=seconds), worker=worker, reused_from=reused_from,
                    failed_pass=failed_pass, pass_timing=_pass_timing(op.op_name) if compile_ is not None else None)


def _pass_timing(op_name: str) -> PassTiming:
    """Sample pass times: the conversion passes grow with the op kind's name, so kinds differ."""
    grow = len(op_name) / 1000
    passes = {"Inliner": 0.002, "Canonicalizer": 0.0015, "ConvertStableHLOToTTIR": 0.001 + grow,
              "ConvertTTIRToTTNN": 0.0005 + grow / 2, "TTNNLayout": 0.0004}
    return PassTiming(passes=passes, total_seconds=round(sum(passes.values()) * 2, 6), compile_seconds=0.03, reports=5)


# The pass a compile stage's failure is blamed on in the samples (the real pipeline's names).
_SAMPLE_PASSES = {Stage.STABLEHLO: ("vhlo-legalize-to-stablehlo", "VhloLegalizeToStablehloPass", 2),
                  Stage.TTIR: ("convert-stablehlo-to-ttir", "ConvertStableHLOToTTIR", 47),
                  Stage.TTNN: ("convert-ttir-to-ttnn", "ConvertTTIRToTTNN", 88),
                  Stage.FLATBUFFER: ("ttnn-deallocate", "TTNNDeallocate", 120)}


def _failed_pass(status: Status, stage: Stage) -> FailedPass | None:
    outcome = {Status.COMPILE_FAILED: PassOutcome.FAILED, Status.CRASHED: PassOutcome.DIED,
               Status.TIMEOUT: PassOutcome.HUNG}.get(status)
    if outcome is None:
        return None
    argument, name, position = _SAMPLE_PASSES[stage]
    return FailedPass(outcome=outcome, argument=argument, name=name, anchor="builtin.module", position=position,
                      passes_started=position, last_succeeded="canonicalize", ir_before=sha(argument), seconds=0.05)


def _trace() -> AccuracyTrace:
    """A sample trace: PCC falls from the third op (a dot_general) on; the threshold is crossed at op 4."""
    pccs = [1.0, 0.99999, 0.9991, 0.9990, 0.985, 0.98]
    names = ["stablehlo.add", "stablehlo.tanh", "stablehlo.dot_general", "stablehlo.add", "stablehlo.dot_general",
             "stablehlo.tanh"]
    points = [TracePoint(position=i, op_name=n, ttnn_op="ttnn." + n.split(".")[1], pcc=p, max_abs_error=(1 - p) * 10,
                         added_loss=max(0.0, (pccs[i - 1] if i else 1.0) - p), below_threshold=p < 0.99)
              for i, (n, p) in enumerate(zip(names, pccs))]
    return AccuracyTrace(points=points, pcc_threshold=0.99, first_below=4, first_below_op="stablehlo.dot_general",
                         most_added=[4, 5, 2], traced_ops=6, seconds=0.4)


def compiler(version: str = "0.1.3") -> CompilerIdentity:
    """A release's identity, its library digest made up from its version."""
    return CompilerIdentity(spec=f"jax-tt-plugin=={version}", package="jax-tt-plugin", version=version,
                            library_sha256=sha(f"libtt-{version}"), jax="0.10.2")


def run_info(run_id: str, started_at: datetime, models: list[str], chip: str = "p150", options_key: str = "opts-a",
             plugin_version: str = "0.1.3") -> RunInfo:
    return RunInfo(run_id=run_id, started_at=started_at, ended_at=started_at + timedelta(minutes=30),
                   status=RunStatus.COMPLETED, models=models, chip=chip, system_desc_sha256=sha(chip),
                   plugin_version=plugin_version, compiler=compiler(plugin_version), opbyop_version="0.1.0", git_sha="abc1234", options_key=options_key,
                   verdict_code=CODE, config={"chip": chip, "seed": 0, "compiler": {"optimization_level": 0}})


def summary(model: str, ops: list[OpRecord], frontend: str = "torch", whole: WholeModelResult | None = None) -> ModelSummary:
    ok = [o for o in ops if o.model == model and o.ok]
    return ModelSummary(model=model, frontend=frontend, ops_total=sum(1 for o in ops if o.model == model),
                        ops_unique=len({o.signature for o in ok}), split_failures=sum(1 for o in ops
                                                                                      if o.model == model and not o.ok),
                        export_seconds=1.5, whole=whole)


@dataclass
class SampleRun:
    run: RunInfo
    ops: list[OpRecord]
    results: list[OpResult]
    models: list[ModelSummary] = field(default_factory=list)


def results_for(ops_by_key: dict[str, OpSpec], outcomes: dict[str, tuple[Status, Stage | None, str | None]],
                start: datetime) -> list[OpResult]:
    """One result per op key, each started 7 s after the previous (distinct, real-looking times)."""
    return [result(ops_by_key[key], status, stage, message, start + timedelta(seconds=7 * i), worker=f"w{i % 2}")
            for i, (key, (status, stage, message)) in enumerate(sorted(outcomes.items()))]


# ----------------------------------------------------------------------------- a small history
CODE = "verdict-code-a"  # the opbyop code the sample runs were made by (opbyop.run.verdict_code)

ADD = OpSpec("add", "stablehlo.add", ("4x32xf32", "4x32xf32"), ("4x32xf32",), "torch.add")
DOT = OpSpec("dot", "stablehlo.dot_general", ("4x32xf32", "32x32xf32"), ("4x32xf32",), "torch.matmul")
TANH = OpSpec("tanh", "stablehlo.tanh", ("4x32xf32",), ("4x32xf32",), "torch.tanh")
CONV = OpSpec("conv", "stablehlo.convolution", ("1x3x32x32xf32", "8x3x3x3xf32"), ("1x8x30x30xf32",), "torch.conv2d")
REDUCE = OpSpec("reduce", "stablehlo.reduce", ("1x8x30x30xf32", "f32"), ("1x8xf32",), "torch.mean")
SORT = OpSpec("sort", "stablehlo.sort", ("8x16xi32",), ("8x16xi32",), "torch.sort")
GATHER = OpSpec("gather", "stablehlo.gather", ("8x16xf32", "4x1xi64"), ("4x16xf32",), "torch.index_select")
SAMPLE_OPS = {o.key: o for o in (ADD, DOT, TANH, CONV, REDUCE, SORT, GATHER)}

# mlp: dot add tanh dot add add -> dot x2, add x3, tanh x1
MLP = [(DOT, "fc1"), (ADD, "fc1"), (TANH, "act"), (DOT, "fc2"), (ADD, "fc2"), (ADD, "")]


def _zoo(night: int) -> list[OpRecord]:
    """cnn: conv add reduce conv sort (night 2: gather instead of sort), and a while loop that fails to split."""
    cnn = [(CONV, "conv1"), (ADD, "bn1"), (REDUCE, "pool"), (CONV, "conv2"), (SORT if night < 2 else GATHER, "topk")]
    ops = [record("mlp", i, op, path, line=10 + i) for i, (op, path) in enumerate(MLP)]
    ops += [record("cnn", i, op, path, line=20 + i) for i, (op, path) in enumerate(cnn)]
    ops.append(split_failure("cnn", len(cnn), "stablehlo.while", "region captures a value defined in another region"))
    return ops


LEGALIZE = "error: failed to legalize {} at {}"
NIGHT1 = {
    "add": (Status.SUCCESS, None, None),
    "dot": (Status.COMPILE_FAILED, Stage.TTNN, LEGALIZE.format("4x32xf32", "0x7f3a")),
    "tanh": (Status.SUCCESS, None, None),
    "conv": (Status.RUN_FAILED, Stage.DEVICE_RUN, "L1 overflow: 1572864 bytes needed on core (2, 3)"),
    "reduce": (Status.GOLDEN_FAILED, Stage.GOLDEN, "output mismatch: pcc 0.71 < 0.99, max abs error 0.5"),
    "sort": (Status.COMPILE_FAILED, Stage.TTNN, LEGALIZE.format("8x16xi32", "0x11ff")),
}
NIGHT2 = {
    "add": (Status.SUCCESS, None, None),
    "dot": (Status.SUCCESS, None, None),  # progression: TTIR -> GOLDEN
    "tanh": (Status.GOLDEN_FAILED, Stage.GOLDEN, "output mismatch: pcc 0.93 < 0.99, max abs error 0.06"),  # regression
    "conv": (Status.TIMEOUT, Stage.DEVICE_RUN, "device run exceeded 120 s"),  # same depth, not reusable
    "reduce": (Status.GOLDEN_FAILED, Stage.GOLDEN, "output mismatch: pcc 0.70 < 0.99, max abs error 0.5"),
    "gather": (Status.COMPILE_FAILED, Stage.TTIR, "error: 'ttir.gather' op unsupported index 4x1xi64"),  # new
}


def night(run_id: str, day: int, outcomes: dict[str, tuple[Status, Stage | None, str | None]],
          chip: str = "p150", zoo_night: int = 1) -> SampleRun:
    start = datetime(2026, 11, day, 2, 0, tzinfo=timezone.utc)
    ops = _zoo(zoo_night)
    results = results_for(SAMPLE_OPS, outcomes, start + timedelta(minutes=1))
    whole_ok = WholeModelResult(status=Status.SUCCESS, depth=Stage.GOLDEN, compile=_compile(Stage.FLATBUFFER, None, None, "mlp"),
                                device=_device(50_000), pcc=0.9995, max_abs_error=0.002, iterations=3, seconds=4.2,
                                accuracy_trace=_trace())
    whole_bad = WholeModelResult(status=Status.COMPILE_FAILED, depth=Stage.STABLEHLO, failed_stage=Stage.TTIR,
                                 message="failed to legalize operation 'stablehlo.while'",
                                 compile=_compile(Stage.STABLEHLO, Stage.TTIR, "failed to legalize operation 'stablehlo.while'",
                                                  "cnn"), seconds=2.0)
    models = [summary("mlp", ops, whole=whole_ok), summary("cnn", ops, whole=whole_bad)]
    return SampleRun(run_info(run_id, start, ["mlp", "cnn"], chip=chip), ops, results, models)


def history() -> list[SampleRun]:
    """Three nights: n0 on another chip (never compared with), n1 and n2 on p150."""
    n0, n1, n2 = night("n0", 1, NIGHT1, chip="n150"), night("n1", 2, NIGHT1), night("n2", 3, NIGHT2, zoo_night=2)
    # n2 reused n1's result for add (cache hit): the result keeps its own times and names its origin
    first = next(r for r in n1.results if r.signature == ADD.signature)
    n2.results = [first.model_copy(update={"reused_from": "n1"}) if r.signature == ADD.signature else r
                  for r in n2.results]
    return [n0, n1, n2]


def compiler_group(group_id: str = "g") -> list[SampleRun]:
    """One night of the zoo under three releases, started together as group `group_id`: NIGHT1's
    outcomes under 0.1.1 and 0.1.3, NIGHT2's under 0.1.2 (dot fails, passes, fails; tanh passes,
    fails, passes)."""
    runs = []
    for step, (version, outcomes) in enumerate((("0.1.1", NIGHT1), ("0.1.2", NIGHT2), ("0.1.3", NIGHT1))):
        run = night(f"{group_id}-c{step + 1}", 10, outcomes, zoo_night=2)
        started = run.run.started_at + timedelta(minutes=5 * step)
        run.run = run.run.model_copy(update={"compiler": compiler(version), "group_id": group_id, "started_at": started,
                                             "plugin_version": version})
        runs.append(run)
    return runs
