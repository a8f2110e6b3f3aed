"""The records every part of opbyop produces and consumes.

One vocabulary from the splitter to the SQL tables: an op occurrence (where an op came from), a
unique op (what gets compiled), and an op result (how far it got, why it stopped, what it costs).
A result always carries the depth reached AND the stage that failed AND the message.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from opbyop.boards import Topology


def utcnow() -> datetime:
    """Current time; a function (never a default evaluated once at import, which stamps every op with one time)."""
    return datetime.now(timezone.utc)


class Stage(str, Enum):
    """How deep an op got, in pipeline order."""

    SPLIT = "SPLIT"
    STABLEHLO = "STABLEHLO"
    TTIR = "TTIR"
    TTNN = "TTNN"
    FLATBUFFER = "FLATBUFFER"
    DEVICE_RUN = "DEVICE_RUN"
    GOLDEN = "GOLDEN"

    @property
    def rank(self) -> int:
        return _STAGE_RANK[self]

    def next(self) -> Stage | None:
        order = list(Stage)
        i = order.index(self)
        return order[i + 1] if i + 1 < len(order) else None


_STAGE_RANK = {s: i for i, s in enumerate(Stage)}
COMPILE_STAGES = (Stage.STABLEHLO, Stage.TTIR, Stage.TTNN, Stage.FLATBUFFER)


class Fault(str, Enum):
    """Whose fault a status is: only the compiler's and the device's count in pass rates."""

    NONE = "none"  # success, or skipped: no verdict against anyone
    COMPILER = "compiler"  # tt-mlir refused, aborted or hung
    DEVICE = "device"  # the compiled program ran wrong or did not run: a real finding
    OPBYOP = "opbyop"  # opbyop's own gap (simulator) or bug (analyzer)
    INFRA = "infra"  # the cluster, a worker process, the disk
    FRONTEND = "frontend"  # the framework's exporter (torch-mlir) could not lower the op to StableHLO


@dataclass(frozen=True)
class StatusFacts:
    """Everything the rest of opbyop knows about one status: the CLI, the HTML report, the Model
    Explorer overlays and the SQL views all read it from here, so a new status is one enum entry."""

    fault: Fault
    style: str  # the CLI's rich style
    # the report's and the Model Explorer's colour: green is fine, reds the compiler's, oranges the
    # device's, blues and violets opbyop's own, greys the infrastructure's and skips
    colour: str
    description: str
    no_program: bool = False  # it stopped before a program existed: it never reached the device
    retryable: bool = False  # the op itself was never judged: a resumed run analyses it again


class Status(str, Enum):
    """How an op's analysis ended; each member carries its StatusFacts."""

    facts: StatusFacts

    def __new__(cls, value: str, facts: StatusFacts) -> Status:
        member = str.__new__(cls, value)
        member._value_ = value
        member.facts = facts
        return member

    SUCCESS = "success", StatusFacts(Fault.NONE, "green", "#16a34a", "every stage asked for passed")
    COMPILE_FAILED = "compile_failed", StatusFacts(
        Fault.COMPILER, "red", "#dc2626", "a compile stage refused the op", no_program=True)
    CRASHED = "crashed", StatusFacts(
        Fault.COMPILER, "bold red", "#991b1b", "the compiler aborted", no_program=True, retryable=True)
    TIMEOUT = "timeout", StatusFacts(
        Fault.COMPILER, "bold red", "#f43f5e", "the compiler hung past its time limit", no_program=True,
        retryable=True)
    RUN_FAILED = "run_failed", StatusFacts(Fault.DEVICE, "magenta", "#ea580c", "the compiled program did not run")
    GOLDEN_FAILED = "golden_failed", StatusFacts(
        Fault.DEVICE, "yellow", "#f59e0b", "the compiled program ran, its result differs from the golden")
    NOT_SIMULATED = "not_simulated", StatusFacts(
        Fault.OPBYOP, "blue", "#2563eb", "the simulator lacks a TTNN op or feature the program uses")
    ANALYZER_ERROR = "analyzer_error", StatusFacts(
        Fault.OPBYOP, "bold magenta", "#7c3aed", "an exception in opbyop's own code", retryable=True)
    INFRA_ERROR = "infra_error", StatusFacts(
        Fault.INFRA, "bold yellow", "#6b7280", "the cluster, a worker process, the disk or a descriptor failed",
        retryable=True)
    SKIPPED = "skipped", StatusFacts(
        Fault.NONE, "cyan", "#a3a3a3", "not an op of the model (a test-harness check), or a stage not requested")
    FRONTEND_FAILED = "frontend_failed", StatusFacts(
        Fault.FRONTEND, "bold red", "#9f1239", "the frontend could not lower the framework op to StableHLO",
        no_program=True)
    MISCOMPILED = "miscompiled", StatusFacts(
        Fault.COMPILER, "red", "#db2777", "the compiled program computes a wrong value (its exact reading "
        "differs from XLA, or it narrowed a value its dtype cannot hold): the compiler's lowering, a finding")
    SIMULATOR_ERROR = "simulator_error", StatusFacts(
        Fault.OPBYOP, "magenta", "#0891b2", "the program's exact reading matches XLA, the simulator with the "
        "chip's numerics off does not: a bug in opbyop's simulator, never a finding")
    VERDICT_TIMEOUT = "verdict_timeout", StatusFacts(
        Fault.OPBYOP, "bold blue", "#1e40af", "the program compiled, but its device run or golden check took "
        "longer than the op's time limit (the message says which and how long): no verdict in time", retryable=True)
    SIMULATOR_LIMIT = "simulator_limit", StatusFacts(
        Fault.OPBYOP, "blue", "#0e7490", "Tenstorrent's simulator (ttsim) does not model a feature the program "
        "uses: no verdict on the chip")

    @property
    def fault(self) -> Fault:
        return self.facts.fault

    @property
    def style(self) -> str:
        return self.facts.style

    @property
    def colour(self) -> str:
        return self.facts.colour

    @property
    def description(self) -> str:
        return self.facts.description

    @property
    def is_verdict(self) -> bool:
        """True for the outcomes a pass rate counts: success and the compiler's, device's or frontend's failures."""
        return self is Status.SUCCESS or self.fault in (Fault.COMPILER, Fault.DEVICE, Fault.FRONTEND)

    @property
    def is_failure(self) -> bool:
        return self not in (Status.SUCCESS, Status.SKIPPED)


# Statuses worth analysing again when a run is resumed: the op itself was never judged.
RETRYABLE = frozenset(s for s in Status if s.facts.retryable)

# Results written before opbyop's own gaps and bugs had statuses of their own (schema version 1)
# said so only in their message: (the status written, the message's opening words, today's status).
LEGACY_RECLASSIFICATION: tuple[tuple[Status, str, Status], ...] = (
    (Status.RUN_FAILED, "not simulated:", Status.NOT_SIMULATED),
    (Status.RUN_FAILED, "simulator error", Status.ANALYZER_ERROR),
    (Status.CRASHED, "opbyop failed during", Status.ANALYZER_ERROR),
)


def legacy_status(status: Status | str, message: str | None) -> Status:
    """Today's status of a result stored as `status` with `message` (older rows reclassified)."""
    status = Status(status)
    for written, opening, today in LEGACY_RECLASSIFICATION:
        if status is written and (message or "").startswith(opening):
            return today
    return status


class TensorDesc(BaseModel):
    """A tensor's shape and element type (MLIR spelling: f32, bf16, i64, i1 ...)."""

    model_config = ConfigDict(frozen=True)

    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return "x".join(str(d) for d in self.shape) + ("x" if self.shape else "") + self.dtype


class SourceFrame(BaseModel):
    model_config = ConfigDict(frozen=True)

    file: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class Provenance(BaseModel):
    """Where an op came from in the framework: the only link back from IR to the user's model."""

    framework_op: str | None = None  # e.g. torch.conv2d
    module_path: str | None = None  # e.g. layer1.0.conv1
    aten_op: str | None = None  # e.g. aten.convolution.default
    source: SourceFrame | None = None  # the innermost frame in the user's own code
    stack: list[SourceFrame] = Field(default_factory=list)  # innermost first
    location: str = ""  # the MLIR location, verbatim


class OperandKind(str, Enum):
    ARGUMENT = "argument"  # fed through an argument of the single-op module
    CONSTANT = "constant"  # a constant, or formed from constants (iota, broadcast ...): kept inside the module
    COMPUTED = "computed"  # computed from constants by upstream ops: an argument fed its real value
    CAPTURED = "captured"  # used inside the op's regions from outside: an extra argument


class OperandDesc(BaseModel):
    index: int  # operand index in the op (captured values follow the op's own operands)
    kind: OperandKind
    tensor: TensorDesc
    argument: int | None = None  # which argument of the single-op module feeds it


class ValueRef(BaseModel):
    """A value of a model's @main: an argument of @main, or result `result` of the op at `position`."""

    model_config = ConfigDict(frozen=True)

    position: int | None = None
    result: int = 0
    model_argument: int | None = None


class OpRecord(BaseModel):
    """One occurrence of one op in one model, wrapped in its own module."""

    model: str
    position: int  # index among @main's ops, program order (after inlining calls)
    op_name: str  # e.g. stablehlo.convolution
    signature: str = ""  # sha256 of the canonical module text; empty when the split failed
    attributes: dict[str, Any] = Field(default_factory=dict)
    operands: list[OperandDesc] = Field(default_factory=list)
    inputs: list[TensorDesc] = Field(default_factory=list)  # the single-op module's arguments
    input_sources: list[ValueRef] = Field(default_factory=list)  # where each argument comes from
    outputs: list[TensorDesc] = Field(default_factory=list)
    provenance: Provenance = Field(default_factory=Provenance)
    module_text: str | None = None  # with locations; None when the split failed
    split_error: str | None = None
    # A sharded model's op: its module's mesh ("x=2,y=4") and, after Shardy's propagation, the
    # sharding of each module argument and result (Shardy's text, "" when it has none)
    mesh: str | None = None
    operand_shardings: list[str] = Field(default_factory=list)
    result_shardings: list[str] = Field(default_factory=list)
    # The frontend's words when it could not lower this framework op (op_name is then the aten op):
    # the op is recorded as frontend_failed, with no module of its own.
    frontend_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.split_error is None


class Occurrence(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    position: int


class UniqueOp(BaseModel):
    """An op to analyse once, with every place it came from (never one model's name only)."""

    signature: str
    op_name: str
    module_text: str
    attributes: dict[str, Any] = Field(default_factory=dict)
    inputs: list[TensorDesc]
    outputs: list[TensorDesc]
    operands: list[OperandDesc] = Field(default_factory=list)
    provenance: Provenance  # of the first occurrence
    occurrences: list[Occurrence]
    # argument index -> artifact digest (.npy) of its real value, for COMPUTED operands whose value
    # was computed from the model's constants (golden.upstream); other arguments are drawn from the seed
    input_values: dict[int, str] = Field(default_factory=dict)
    mesh: str | None = None  # the module's mesh ("x=2"); None on one device
    operand_shardings: list[str] = Field(default_factory=list)
    result_shardings: list[str] = Field(default_factory=list)
    # argument index -> why an argument whose value matters (an index, a mask, a divisor ...) still gets
    # deterministic data: it depends on the weights, or an upstream op could not be replayed
    synthetic_reasons: dict[int, str] = Field(default_factory=dict)
    frontend_error: str | None = None  # as OpRecord.frontend_error

    @property
    def models(self) -> list[str]:
        return sorted({o.model for o in self.occurrences})


class CompileOutcome(BaseModel):
    """What tt-mlir did with one module."""

    reached: Stage | None = None  # deepest compile stage whose output exists
    failed_stage: Stage | None = None
    message: str | None = None  # the compiler's words, verbatim
    diagnostics: list[str] = Field(default_factory=list)  # the compiler's 'error:' lines, with locations
    stage_seconds: dict[Stage, float] = Field(default_factory=dict)
    seconds: float = 0.0
    artifacts: dict[str, str] = Field(default_factory=dict)  # kind (ttir, ttnn, flatbuffer ...) -> sha256

    @property
    def ok(self) -> bool:
        return self.reached is Stage.FLATBUFFER and self.failed_stage is None


class OpPlacement(BaseModel):
    """The op model chosen for one TTNN compute op (grid, blocks, cost) and how it was chosen."""

    ttnn_op: str
    grid: tuple[int, int]
    block_tiles: tuple[int, int]
    buffer_factor: int
    l1_bytes_per_core: int
    cycles: int
    candidates: int
    legal: int
    rejected: dict[str, int] = Field(default_factory=dict)  # failure reason -> count
    fixed_by_compiler: bool = False
    t_stream: str = ""  # the chosen t-streaming: "" none, "R4" four slices of rows, "C2" two of columns, "R4C4" both
    policy: str = ""  # the balancer policy that chose it (fewest_cycles | fewest_cores | nlp)


class CollectiveRun(BaseModel):
    """One collective of a mesh program: what it moved over the chips' Ethernet links and its cost."""

    op: str  # ttnn.all_reduce, ttnn.all_gather ...
    cluster_axis: int | None = None  # the mesh axis it joins chips along (None: every chip)
    group_size: int = 1  # chips in each group it joins
    payload_bytes: int = 0  # bytes the chips sent, each send once
    link_bytes: int = 0  # bytes summed over every directed link crossed
    hops: int = 0  # the longest route, in links
    cycles: int = 0  # busiest link's bytes over its bandwidth, plus hops x per-hop latency


class DeviceRun(BaseModel):
    """One simulated run of a compiled TTNN program."""

    ttnn_ops: int = 0
    not_simulated: list[str] = Field(default_factory=list)
    cycles: int = 0
    peak_l1_bytes: int = 0  # per core
    peak_dram_bytes: int = 0
    placements: list[OpPlacement] = Field(default_factory=list)
    seconds: float = 0.0
    message: str | None = None
    # a mesh program (several chips): empty / None / 0 for one chip
    mesh_shape: list[int] = Field(default_factory=list)  # rows, columns
    topology: str | None = None  # linear | ring | 2d | torus (opbyop.boards.Topology)
    chip_peak_l1_bytes: list[int] = Field(default_factory=list)  # per chip (row-major), per core
    chip_peak_dram_bytes: list[int] = Field(default_factory=list)  # per chip
    collectives: list[CollectiveRun] = Field(default_factory=list)
    collective_bytes: int = 0  # payload bytes of every collective
    collective_cycles: int = 0  # summed over collectives (those on disjoint chips overlap in `cycles`)
    collective_seconds: float = 0.0  # of `seconds`, the wall time the simulator spent in collectives

    @field_validator("topology")
    @classmethod
    def _current_spelling(cls, value: str | None) -> str | None:
        """Runs stored before there was one Topology spell a 2D mesh 'mesh2d': read as today's '2d'."""
        return None if value is None else Topology(value).value


class TtsimOutcome(str, Enum):
    """How an op's TTNN program fared on ttsim (tt-metal's kernels on Tenstorrent's simulator)."""

    RAN = "ran"  # it ran: its outputs are the device's
    REJECTED = "rejected"  # tt-metal refused it (TT_FATAL, validation, allocator, a kernel that did not build)
    LIMIT = "limit"  # ttsim does not model a feature it uses (UnsupportedFunctionality): no verdict
    UNMAPPED = "unmapped"  # a TTNN op kind opbyop's ttsim runner has no ttnn call for
    MAPPING = "mapping"  # the runner built a call ttnn does not accept: opbyop's bug
    TIMEOUT = "timeout"  # no result within its time: the device model's verdict stands, unconfirmed
    CRASHED = "crashed"  # the runner process died without ttsim's words
    UNAVAILABLE = "unavailable"  # no ttsim for this target here (the message says why and how to get one)


class TtsimRun(BaseModel):
    """An op's program run on ttsim beside opbyop's device model, and how the two agree."""

    model_config = ConfigDict(ser_json_inf_nan="constants")

    outcome: TtsimOutcome
    message: str | None = None  # tt-metal's or ttsim's own words, verbatim
    op: str | None = None  # the TTNN op it stopped at
    seconds: float = 0.0  # wall time, plan and transfers included
    runner_seconds: float = 0.0  # of that, inside ttnn (kernels JIT-compiled on their first use)
    # the device model's outputs against ttsim's, where both ran: "bit_equal", "within_ulps" (float
    # outputs within `max_ulps` units in the last place), "differ", or "model_failed" (only ttsim ran)
    agreement: str | None = None
    max_ulps: float | None = None
    # the largest difference relative to its output's scale (its largest magnitude on ttsim), and its
    # kind: "rounding" (within 2**-10 of the scale), "sign", "magnitude", "nonfinite", "shape"
    # (opbyop.device.ttsim.agreement.difference); None where the model did not run
    max_error: float | None = None
    difference: str | None = None
    pcc: float | None = None  # a whole model's outputs on ttsim against its reference
    # a whole model's accuracy trace on ttsim's values: each op's output on ttsim against XLA:CPU's value
    accuracy_trace: AccuracyTrace | None = None
    # what tt-metal allocated, as its allocator and graph capture report it (None: not run): L1 per
    # core (resident tensors plus the op's own buffers), circular and dataflow buffers per core, DRAM
    # bytes over all banks; each the peak over the program's ops, beside the model's DeviceRun figures
    peak_l1_bytes: int | None = None
    peak_cb_bytes: int | None = None
    peak_dram_bytes: int | None = None
    # ttnn's own TT-NN Visualizer report of the run (db.sqlite ...), when asked for: the artifact digest
    # of its folder as a .tar.gz (opbyop_storage.exports.visualizer unpacks it beside opbyop's report)
    report: str | None = None
    report_error: str | None = None  # why it was asked for and not written (ttnn's words)
    # which ttsim ran it: its version and the patch set opbyop applied ("v1.10.0+opbyop.3"); None: not known
    simulator: str | None = None


class GoldenComparison(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="constants")  # an infinite error is a result, not a null

    pcc: float | None
    max_abs_error: float
    max_rel_error: float
    allclose: bool
    passed: bool
    pcc_threshold: float
    method: str = "pcc"  # how the verdict was reached: pcc | exact (integers, booleans) | allclose
    #   (scalars, constant outputs) | shape (the output's shape differs for real)
    message: str | None = None  # why the outputs could not be compared value by value
    seconds: float = 0.0
    # NaN/infinity where XLA's output has none, or the reverse, by count ("3 NaN where XLA has none")
    nonfinite: str | None = None


class PassOutcome(str, Enum):
    """How the pass named by a FailedPass ended."""

    FAILED = "failed"  # the pass reported failure (MLIR's 'IR Dump After <Pass> Failed')
    DIED = "died"  # the compiler process died while the pass ran (abort, LLVM fatal error)
    HUNG = "hung"  # the pass was still running when the time limit ended the compile
    NONE = "none"  # no pass could be named: `reason` says why


class FailedPass(BaseModel):
    """The compiler pass a failed compile stopped in, found by re-compiling with the plugin's IR
    printing on (TTXLA_LOGGER_LEVEL=VERBOSE): its name, pipeline position, the last pass that
    succeeded, and the IR it was given (an artifact)."""

    outcome: PassOutcome
    argument: str | None = None  # the pass's command-line name, e.g. convert-stablehlo-to-ttir
    name: str | None = None  # its class name, e.g. ConvertStableHLOToTTIR
    anchor: str | None = None  # the operation it ran on, e.g. builtin.module, func.func @main
    position: int | None = None  # 1-based among the passes the compile started, in order
    passes_started: int = 0
    last_succeeded: str | None = None  # argument of the pass before it in the pipeline
    ir_before: str | None = None  # artifact sha256 of the IR the pass was given
    reason: str | None = None  # why no pass could be named (outcome none)
    seconds: float = 0.0  # the verbose re-compile's wall time


class PassTiming(BaseModel):
    """Where one compile of an op spent its time, pass by pass (MLIR's pass timing reports)."""

    passes: dict[str, float] = Field(default_factory=dict)  # pass (class name) -> seconds, over all its runs
    total_seconds: float = 0.0  # the reports' total execution times, summed (every pass manager)
    compile_seconds: float = 0.0  # the timed compile's wall time
    reports: int = 0  # pass managers that reported


class OpResult(BaseModel):
    """One unique op's attempt in one run."""

    signature: str
    op_name: str
    status: Status
    depth: Stage  # deepest stage completed
    failed_stage: Stage | None = None  # None only on success / skip, or when unknowable (a Dask worker died)
    message: str | None = None
    compile: CompileOutcome | None = None
    device: DeviceRun | None = None
    golden: GoldenComparison | None = None
    started_at: datetime = Field(default_factory=utcnow)
    ended_at: datetime = Field(default_factory=utcnow)
    worker: str | None = None
    reused_from: str | None = None  # run id whose result was reused (cache hit)
    compiler: str | None = None  # the key of the compiler that compiled it (CompilerIdentity.key)
    # A dtype the compiled program changed, by name: "compiled as si32: value ... not representable"
    narrowing: str | None = None
    mesh: str | None = None  # the target's mesh of chips, ROWSxCOLS ("1x2"); None in older records
    topology: str | None = None  # single | linear | ring | 2d | unknown (opbyop.boards.Topology)
    # The single-op module's arguments (arg0 ..) whose values were the model's own (computed from
    # producers that do not depend on weights), and those drawn from the seed instead
    real_inputs: list[str] = Field(default_factory=list)
    synthetic_inputs: list[str] = Field(default_factory=list)
    failed_pass: FailedPass | None = None  # compile_failed / crashed / timeout: the pass it stopped in
    pass_timing: PassTiming | None = None  # each pass's time in a compile of the op, when asked for
    device_backend: str | None = None  # whose run gave the device verdict: "model" (opbyop's) or "ttsim"
    ttsim: TtsimRun | None = None  # the run on ttsim, when the run asked for it

    @property
    def seconds(self) -> float:
        return (self.ended_at - self.started_at).total_seconds()

    @classmethod
    def failure(cls, signature: str, op_name: str, status: Status, message: str, *, depth: Stage = Stage.SPLIT,
                failed_stage: Stage | None = None, **fields: Any) -> OpResult:
        """The one constructor of an op's failure: its status and message, the deepest stage it
        completed (`depth`) and the one it failed in (None when unknowable, a Dask worker that died)."""
        return cls(signature=signature, op_name=op_name, status=status, depth=depth, failed_stage=failed_stage,
                   message=message, **fields)


class TracePoint(BaseModel):
    """One StableHLO op of a whole model: its value on the device against XLA:CPU's."""

    model_config = ConfigDict(ser_json_inf_nan="constants")

    position: int  # index among @main's ops: the model's depth
    op_name: str
    ttnn_op: str  # the TTNN op whose output was its value on the device
    pcc: float | None
    max_abs_error: float
    location: str = ""
    added_loss: float = 0.0  # PCC lost at this op beyond the worst of its inputs'
    below_threshold: bool = False


class AccuracyTrace(BaseModel):
    """Where a whole model loses accuracy, op by op along its depth."""

    points: list[TracePoint] = Field(default_factory=list)
    pcc_threshold: float = 0.99
    first_below: int | None = None  # position of the first op whose PCC drops below the threshold
    first_below_op: str | None = None
    most_added: list[int] = Field(default_factory=list)  # positions of the ops that lose most PCC themselves
    traced_ops: int = 0  # ops XLA:CPU gave a value for (points: those the device's program showed)
    seconds: float = 0.0  # what the trace added to the whole-model run
    message: str | None = None  # why there is no trace

    @property
    def worst(self) -> TracePoint | None:
        """The op whose value is furthest from XLA:CPU's (lowest PCC; an op with none counts as worst)."""
        return min(self.points, key=lambda p: p.pcc if p.pcc is not None else -2.0, default=None)


class WholeModelResult(BaseModel):
    """The whole module compiled at once and run stitched on the device: the other view."""

    model_config = ConfigDict(ser_json_inf_nan="constants")

    status: Status
    depth: Stage
    failed_stage: Stage | None = None
    message: str | None = None
    compile: CompileOutcome | None = None
    device: DeviceRun | None = None
    pcc: float | None = None  # device output against the reference: the framework's own output
    reference: str = "framework"  # ... or XLA:CPU running the module (a StableHLO file has no framework)
    max_abs_error: float | None = None
    iterations: int = 0
    seconds: float = 0.0
    accuracy_trace: AccuracyTrace | None = None  # each op's value on the device against XLA:CPU's
    ttsim: TtsimRun | None = None  # the same program run once on ttsim, beside the device model's stitched run
    reused_from: str | None = None  # the run it was taken from (the same graph, compiler build, chip, options)


class ModelSummary(BaseModel):
    """One model in one run."""

    model: str
    frontend: str
    ops_total: int
    ops_unique: int
    split_failures: int = 0
    export_seconds: float = 0.0
    error: str | None = None  # the model could not be loaded, exported or split at all
    whole: WholeModelResult | None = None
    module_artifact: str | None = None  # sha256 of the model's StableHLO module (with locations) in the artifacts
    export_reused: bool = False  # its export kept from an earlier run: nothing the export read had changed
    whole_key: str | None = None  # what its whole-model result depends on (opbyop.run.wholes.whole_key)


class CompilerIdentity(BaseModel):
    """Which compiler produced a result: a build of the TT PJRT plugin (tt-xla with tt-mlir and
    tt-metal inside), told apart by its library's digest, never by a version string alone (a
    local build may say the version of a release). `key` is part of every cache key."""

    model_config = ConfigDict(frozen=True)

    spec: str = "installed"  # what was asked for: installed, jax-tt-plugin==0.1.2, newest, a wheel or library path
    package: str = ""  # the distribution that ships it (jax-tt-plugin); "" for a library a user built
    version: str = ""  # that distribution's version; "" when nothing says it
    library_sha256: str = ""  # the PJRT library that was loaded
    tt_metal_commit: str = ""  # as the library says it ("" when it does not)
    tt_mlir_commit: str = ""  # as its system descriptors say it ("" when they do not)
    ttsim_version: str = ""  # the ttsim release its tt-metal names as its match
    jax: str = ""  # the jax that drives it: opbyop's own, or the one of its own environment

    @property
    def key(self) -> str:
        """The compiler's part of a cache key: its library and the jax that drives it."""
        if not self.library_sha256:
            return ""
        return hashlib.sha256(f"{self.library_sha256}|{self.jax}".encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        """How a person names it: package and version, or the library's digest."""
        name = f"{self.package} {self.version}".strip() if self.package or self.version else "PJRT library"
        return f"{name} ({self.library_sha256[:12]})" if self.library_sha256 else name


class RunStatus(str, Enum):
    """How an analysis run stands: still running, or how it ended."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"  # it stopped early: interrupted, no op worker could start, nothing could be split


class RunInfo(BaseModel):
    """One analysis run: what was analysed, with what, and how it ended."""

    run_id: str
    started_at: datetime = Field(default_factory=utcnow)
    ended_at: datetime | None = None
    status: RunStatus = RunStatus.RUNNING
    models: list[str] = Field(default_factory=list)
    chip: str = ""
    system_desc_sha256: str = ""
    plugin_version: str = ""
    opbyop_version: str = ""
    git_sha: str = ""
    options_key: str = ""
    # the digest of opbyop's code that made its verdicts (opbyop.run.verdict_code): results are reused
    # only from runs made by the same code ("" before it was recorded: never reused by a run that records it)
    verdict_code: str = ""
    config: dict[str, Any] = Field(default_factory=dict)  # the AnalysisConfig, as JSON
    phases: dict[str, float] = Field(default_factory=dict)  # phase (export, split, cluster ...) -> seconds
    mesh: str = "1x1"  # the target's mesh of chips, ROWSxCOLS
    topology: str = "single"  # how its chips are linked: single | linear | ring | 2d | unknown
    compiler: CompilerIdentity = Field(default_factory=CompilerIdentity)
    # runs started together to be compared (one per compiler of `opbyop analyze --compiler A --compiler B`)
    group_id: str = ""
