"""The stage table of one op's analysis: every stage is some step's, and an op a step ends gets its
depth and failed stage from that step's row."""

from __future__ import annotations

from opbyop.analysis.analyzer import OpAnalyzer
from opbyop.analysis.steps import STEPS, Ending
from opbyop.records import OpResult, Stage, Status


def test_the_steps_cover_every_stage_after_the_split_in_order_without_a_gap() -> None:
    covered = [stage for step in STEPS for stage in Stage if step.first.rank <= stage.rank <= step.last.rank]
    assert covered == list(Stage)[1:]
    assert all(callable(getattr(OpAnalyzer, step.method)) for step in STEPS)


def test_a_step_that_fails_records_the_stage_before_it_as_the_depth_and_its_first_as_failed() -> None:
    compile_, device, golden = STEPS
    ended = device.finish(OpResult(signature="s", op_name="x", status=Status.SUCCESS, depth=Stage.SPLIT),
                          Ending(Status.RUN_FAILED, "out of L1"))
    assert (ended.status, ended.depth, ended.failed_stage, ended.message) == \
        (Status.RUN_FAILED, Stage.FLATBUFFER, Stage.DEVICE_RUN, "out of L1")
    assert golden.finish(ended, Ending(Status.ANALYZER_ERROR, "XLA")).depth is Stage.DEVICE_RUN
    # a compile knows how far it got: its dumps
    partial = compile_.finish(ended, Ending(Status.COMPILE_FAILED, "legalize", reached=Stage.TTIR, failed=Stage.TTNN))
    assert (partial.depth, partial.failed_stage) == (Stage.TTIR, Stage.TTNN)
    # a stop that judges nothing: no failed stage, the depth so far
    skipped = golden.finish(ended, Ending(Status.SKIPPED, "golden check not requested", skipped=True))
    assert (skipped.depth, skipped.failed_stage) == (Stage.DEVICE_RUN, None)
