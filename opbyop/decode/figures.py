"""What a decode run on the simulated device measured: per step, per mode, and the comparison."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, Field

from opbyop.records import Stage, Status


class Mode(str, Enum):
    STITCHED = "stitched"  # outputs stay on the device and feed the next program (to_layout where needed)
    ROUND_TRIP = "round_trip"  # every output brought back with to_host and pushed again


class StepFigures(BaseModel):
    """One program run: prefill (step 0) or one decode step."""

    step: int
    program: str  # prefill | decode
    token: int | None = None  # the token it chose (None if it failed)
    to_device_tensors: int = 0
    to_device_bytes: int = 0
    to_host_tensors: int = 0
    to_host_bytes: int = 0
    to_layouts: int = 0  # on-device layout conversions of its inputs (an output's layout != the input's)
    l1_evicted_bytes: int = 0  # L1 tensors submit moved to DRAM before it ran
    peak_dram_bytes: int = 0
    peak_l1_bytes: int = 0  # per core
    cycles: int = 0
    seconds: float = 0.0


class DecodeRun(BaseModel):
    """Prefill then N decode steps in one mode, weights pushed once."""

    mode: Mode
    status: Status = Status.SUCCESS
    failed_stage: Stage | None = None
    message: str | None = None
    weight_tensors: int = 0
    weight_bytes: int = 0  # pushed once, before prefill
    weight_pushes_repeated: int = 0  # to_device transfers that carried a weight's data again (must be 0)
    weight_to_layouts: int = 0  # weights converted on the device for a program that wants another layout
    steps: list[StepFigures] = Field(default_factory=list)
    tokens: list[int] = Field(default_factory=list)
    tokens_matched: int = 0  # leading tokens equal to the framework's greedy generation
    cache_pcc: float | None = None  # the final key/value cache against torch running the same programs
    cache_max_abs_error: float | None = None
    leaked_bytes: int = 0  # device memory still allocated after everything was deallocated
    seconds: float = 0.0

    @property
    def activation_bytes(self) -> int:
        return sum(s.to_device_bytes + s.to_host_bytes for s in self.steps)


class ProgramCompile(BaseModel):
    program: str  # prefill | decode
    status: Status
    depth: Stage
    failed_stage: Stage | None = None
    message: str | None = None
    seconds: float = 0.0
    ttnn_ops: int = 0


class DecodeReport(BaseModel):
    model: str
    chip: str
    prompt: list[int]
    steps: int
    cache_length: int
    framework_tokens: list[int]  # transformers' own greedy generation
    torch_tokens: list[int]  # the exported prefill/decode modules run by torch (must equal the above)
    compiles: list[ProgramCompile] = Field(default_factory=list)
    runs: list[DecodeRun] = Field(default_factory=list)
    export_seconds: float = 0.0

    @property
    def compiled(self) -> bool:
        return len(self.compiles) == 2 and all(c.status is not Status.COMPILE_FAILED and c.failed_stage is None
                                               for c in self.compiles)

    def run(self, mode: Mode) -> DecodeRun | None:
        return next((r for r in self.runs if r.mode is mode), None)

    @property
    def ok(self) -> bool:
        return self.compiled and len(self.runs) == 2 and all(
            r.status is Status.SUCCESS and r.tokens == self.framework_tokens for r in self.runs)
