"""An op whose worker child was lost: while compiling it is the compiler's crash or hang; after the
compile (the device run, the golden check) it is opbyop's, and a run slower than the op's time limit
says so with its own status, never as an exception in opbyop's code."""

from __future__ import annotations

from opbyop.records import RETRYABLE, Fault, Status
from opbyop.worker.process import _lost_status


def test_a_child_lost_while_compiling_is_the_compilers_crash_or_hang():
    assert _lost_status("compile", Status.TIMEOUT, Status.VERDICT_TIMEOUT) is Status.TIMEOUT
    assert _lost_status("compile", Status.CRASHED, Status.ANALYZER_ERROR) is Status.CRASHED


def test_a_verdict_slower_than_the_time_limit_is_a_verdict_timeout_not_an_analyzer_error():
    lost = _lost_status("device_run", Status.TIMEOUT, Status.VERDICT_TIMEOUT)
    assert lost is Status.VERDICT_TIMEOUT and lost.fault is Fault.OPBYOP and lost in RETRYABLE
    assert lost.fault is not Status.TIMEOUT.fault  # never counted against the compiler
    assert _lost_status("golden", Status.CRASHED, Status.ANALYZER_ERROR) is Status.ANALYZER_ERROR
