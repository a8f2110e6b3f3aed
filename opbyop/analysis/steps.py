"""The stage table of one op's analysis: each step's name (the progress a worker's parent hears, and
how it names a worker that dies in it), the stages it does, and the analyzer method that does them.
One loop walks it (opbyop.analysis.analyzer.OpAnalyzer.analyze); the depth and failed stage of an op
that a step ends come from the step's row, never paired by hand."""

from __future__ import annotations

from dataclasses import dataclass

from opbyop.records import OpResult, Stage, Status, utcnow


@dataclass(frozen=True)
class Ending:
    """How a step ends an op's analysis: a failure (recorded at the step's stages, unless the step knows
    how far it got: `reached`, `failed`), or a stop that judges nothing (`skipped`)."""

    status: Status
    message: str | None
    skipped: bool = False
    reached: Stage | None = None
    failed: Stage | None = None


@dataclass(frozen=True)
class Step:
    """One row of the stage table."""

    name: str
    first: Stage  # where a failure of the step is recorded
    last: Stage  # the depth reached when it is done
    method: str  # the OpAnalyzer method that does it: (Attempt) -> Ending | None

    @property
    def before(self) -> Stage:
        """The depth an op has when the step starts: the stage before its first."""
        return list(Stage)[self.first.rank - 1]

    def finish(self, result: OpResult, ending: Ending) -> OpResult:
        """The result as this step's ending leaves it: depth and failed stage from the table."""
        if ending.skipped:
            return finish(result, ending.status, self.before, None, ending.message)
        return finish(result, ending.status, ending.reached or self.before, ending.failed or self.first, ending.message)


STEPS = (
    Step("compile", Stage.STABLEHLO, Stage.FLATBUFFER, "_compile"),
    Step("device_run", Stage.DEVICE_RUN, Stage.DEVICE_RUN, "_run_on_device"),
    Step("golden", Stage.GOLDEN, Stage.GOLDEN, "_check_golden"),
)
STEP_NAMED = {step.name: step for step in STEPS}


def finish(result: OpResult, status: Status, depth: Stage, failed: Stage | None, message: str | None) -> OpResult:
    """`result` ended: its status, the deepest stage it completed, the stage it failed in and why."""
    result.status, result.depth, result.failed_stage, result.message = status, depth, failed, message
    result.ended_at = utcnow()
    return result
