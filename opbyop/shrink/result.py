"""What a shrink found: every variant tried, and per dimension and dtype where failing starts."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, Field

from opbyop.records import Stage, Status, TensorDesc


class Outcome(str, Enum):
    PASS = "pass"  # success (or, compile only, a flatbuffer)
    FAIL = "fail"  # a failing verdict: the compiler's or the device's
    NO_VERDICT = "no_verdict"  # not simulated, analyzer error, infra error: tells nothing either way
    REJECTED = "rejected"  # the variant does not verify: never compiled


def outcome_of(status: Status, depth: Stage) -> Outcome:
    if status is Status.SUCCESS or status is Status.SKIPPED and depth.rank >= Stage.FLATBUFFER.rank:
        return Outcome.PASS
    if status.is_verdict:
        return Outcome.FAIL
    return Outcome.NO_VERDICT


class ShrinkVariant(BaseModel):
    dimension: str  # the dimension changed ("" for the op's own shape)
    dtype: str
    size: int | None = None  # the dimension's size in this variant
    signature: str = ""  # of the variant's single-op module ("" when rejected)
    inputs: list[TensorDesc] = Field(default_factory=list)
    outcome: Outcome
    status: Status | None = None
    failed_stage: Stage | None = None
    message: str | None = None
    seconds: float = 0.0
    module_artifact: str | None = None  # ArtifactStore digest of the variant's module (its repro)


class ShrinkBoundary(BaseModel):
    """One dimension in one dtype: the largest size that passed and the smallest that failed."""

    dimension: str
    dtype: str
    size: int  # in the op as found
    largest_passing: int | None = None
    largest_passing_signature: str | None = None
    smallest_failing: int | None = None
    smallest_failing_signature: str | None = None
    tried: list[int] = Field(default_factory=list)

    def sentence(self) -> str:
        lp, sf, what = self.largest_passing, self.smallest_failing, self.dimension
        if lp is not None and sf is not None:
            if lp < sf:
                return f"fails above {lp} {what} (passes at {lp}, fails at {sf}; {self.size} as found)"
            return f"{what}: fails at {sf} but passes at {lp} (not monotonic; {self.size} as found)"
        span = f"{min(self.tried)}..{max(self.tried)}" if self.tried else str(self.size)
        if sf is not None:
            return f"fails at every {what} tried ({span})"
        if lp is not None:
            return f"passes at every {what} tried ({span})"
        return f"{what}: no verdict at any size tried ({span})"


class ShrinkResult(BaseModel):
    signature: str
    op_name: str
    inputs: list[TensorDesc]
    dtype: str  # the op's element type
    baseline: Outcome
    baseline_status: Status
    baseline_stage: Stage | None = None
    baseline_message: str | None = None
    dtypes: dict[str, Outcome] = Field(default_factory=dict)  # at the op's own shape
    dtype_signatures: dict[str, str] = Field(default_factory=dict)
    boundaries: list[ShrinkBoundary] = Field(default_factory=list)
    variants: list[ShrinkVariant] = Field(default_factory=list)
    rejected: int = 0  # variants that did not verify (never compiled)
    seconds: float = 0.0
    budget_s: float = 0.0
    complete: bool = True  # False: the time budget ran out first
    note: str | None = None

    @property
    def analysed(self) -> int:
        return sum(1 for v in self.variants if v.outcome is not Outcome.REJECTED)

    def summary(self) -> list[str]:
        """Sentences: the dtypes at the op's shape, then each dimension's boundary."""
        shape = " ".join(str(t) for t in self.inputs)
        verb = {Outcome.PASS: "passes", Outcome.FAIL: "fails"}.get(self.baseline, "has no verdict")
        lines = [f"{self.op_name} ({shape}) {verb} as found ({self.baseline_status.value})"]
        if self.dtypes:
            parts = [f"{'passes' if o is Outcome.PASS else 'fails' if o is Outcome.FAIL else o.value} in {t}"
                     + (" (the op's)" if t == self.dtype else "") for t, o in self.dtypes.items()]
            lines.append(", ".join(parts))
        for b in self.boundaries:
            lines.append(f"{b.dtype}: {b.sentence()}")
        if not self.complete:
            lines.append(f"stopped at the {self.budget_s:g} s budget: some dimensions were not searched to the end")
        if self.note:
            lines.append(self.note)
        return lines
