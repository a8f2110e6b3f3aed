"""StageCall: the one place a stage's exception becomes a typed outcome; OpResult.failure: the one
constructor of a failed op."""

from __future__ import annotations

import pytest

from opbyop.records import OpResult, Stage, Status
from opbyop.stage_call import OUT_OF_MEMORY, StageCall


def _raise(error: BaseException):
    raise error


def test_a_stage_that_raises_becomes_an_outcome_naming_the_stage_the_error_and_its_duration():
    call = StageCall.of(lambda: _raise(ValueError("bad shape")), Stage.GOLDEN)
    assert not call.ok and call.value is None and call.stage is Stage.GOLDEN
    assert call.brief == "ValueError: bad shape" and call.described == "ValueError: bad shape"
    assert call.seconds >= 0 and call.started_at.tzinfo is not None


def test_a_stage_that_returns_gives_its_value():
    call = StageCall.of(lambda: 42, Stage.DEVICE_RUN)
    assert call.ok and call.value == 42 and call.error is None and call.brief == ""


def test_what_the_caller_reraises_and_what_it_does_not_catch_propagate():
    with pytest.raises(MemoryError):
        StageCall.of(lambda: _raise(MemoryError()), reraise=OUT_OF_MEMORY)
    with pytest.raises(KeyError):
        StageCall.of(lambda: _raise(KeyError("x")), catch=(ValueError,))
    with pytest.raises(KeyboardInterrupt):  # never an outcome: not an Exception
        StageCall.of(lambda: _raise(KeyboardInterrupt()))
    assert StageCall.of(lambda: _raise(MemoryError()), catch=OUT_OF_MEMORY).error is not None


def test_a_failed_op_is_built_by_one_constructor_with_split_depth_and_an_unknown_stage_by_default():
    r = OpResult.failure("abc", "stablehlo.add", Status.CRASHED, "killed twice", worker="w")
    assert (r.status, r.depth, r.failed_stage, r.message, r.worker) == (Status.CRASHED, Stage.SPLIT, None,
                                                                          "killed twice", "w")
