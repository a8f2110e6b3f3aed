"""The compiler pass a failed compile stopped in: read from the real compiler's verbose IR printing."""

from __future__ import annotations

import pytest
from core_fixtures import file_ops

from opbyop.compiler.passes import find_failed_pass
from opbyop.records import PassOutcome, Stage, Status

_IR = "module {\n  func.func @main() {\n    return\n  }\n}\n"


def _banner(when: str, name: str, arg: str, failed: bool = False) -> str:
    return f"// -----// IR Dump {when} {name}{' Failed' if failed else ''} ({arg}) ('builtin.module' operation) //----- //"


def _log(*banners: str) -> str:
    return "\n".join(f"{b}\n{_IR}\n" for b in banners)


def test_a_pass_that_runs_twice_is_blamed_on_the_run_that_failed_with_the_pass_before_it():
    log = _log(_banner("Before", "Inliner", "inline"), _banner("Before", "ConvertA", "convert-a"),
               _banner("After", "ConvertA", "convert-a"), _banner("Before", "Wrap", "wrap"),
               _banner("Before", "ConvertA", "convert-a"), _banner("After", "ConvertA", "convert-a", failed=True))
    found = find_failed_pass(log, PassOutcome.FAILED).failed_pass
    assert (found.outcome, found.argument, found.name) == (PassOutcome.FAILED, "convert-a", "ConvertA")
    assert (found.position, found.passes_started, found.last_succeeded) == (4, 4, "wrap")


def test_a_compiler_that_died_is_blamed_on_the_last_pass_it_started_and_a_log_without_passes_says_why():
    log = _log(_banner("Before", "Inliner", "inline"), _banner("Before", "Lower", "lower")) + "LLVM ERROR: boom\n"
    trace = find_failed_pass(log, PassOutcome.DIED)
    assert (trace.failed_pass.argument, trace.failed_pass.position, trace.failed_pass.last_succeeded) == ("lower", 2, "inline")
    assert trace.ir_before.strip() == _IR.strip() and "LLVM ERROR" not in trace.ir_before
    nothing = find_failed_pass("INTERNAL: could not serialise\n", PassOutcome.FAILED).failed_pass
    assert nothing.outcome is PassOutcome.NONE and "before its first pass" in nothing.reason
    succeeded = find_failed_pass(log, PassOutcome.NONE).failed_pass
    assert succeeded.outcome is PassOutcome.NONE and "did not reproduce" in succeeded.reason


def test_cholesky_fails_in_the_device_module_s_convert_stablehlo_to_ttir_with_its_ir_kept(worker, workspace, settings):
    (op,) = file_ops("cholesky.mlir")
    result = worker.analyze(op, settings)
    assert result.status is Status.COMPILE_FAILED and result.failed_stage is Stage.TTIR
    found = result.failed_pass
    assert found.outcome is PassOutcome.FAILED and found.argument == "convert-stablehlo-to-ttir"
    assert found.name == "ConvertStableHLOToTTIR" and found.last_succeeded == "cpu-hoist-non-lowerable-shlo-ops"
    assert 1 < found.position == found.passes_started
    ir = workspace.artifacts.read_text(found.ir_before)
    assert "ttcore.device_module" in ir and "stablehlo.cholesky" in ir  # the second run, inside the device module


@pytest.mark.slow
def test_a_compiler_abort_names_the_pass_it_died_in_and_a_passing_op_gets_no_second_compile(worker, workspace,
                                                                                             compile_only, mlp_ops):
    (op,) = [o for o in file_ops("select_and_scatter_arg_init.mlir") if o.op_name == "stablehlo.select_and_scatter"]
    crashed = worker.analyze(op, compile_only)
    assert crashed.status is Status.CRASHED
    found = crashed.failed_pass
    assert found.outcome is PassOutcome.DIED and found.argument == "convert-stablehlo-to-ttir" and found.position > 1
    assert "stablehlo.select_and_scatter" in workspace.artifacts.read_text(found.ir_before)
    fine = worker.analyze(mlp_ops[0], compile_only)
    assert fine.compile.reached is Stage.FLATBUFFER and fine.failed_pass is None


def _verbose_children() -> list:
    import psutil

    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.environ().get("TTXLA_LOGGER_LEVEL") == "VERBOSE":
                found.append(p)
        except psutil.Error:
            pass
    return found


@pytest.mark.slow
def test_the_verbose_compile_child_starts_at_the_first_failed_compile_not_with_the_first_op(p150, tmp_path,
                                                                                              compile_only, mlp_ops):
    from opbyop.worker.process import OpWorker

    def mine() -> set[int]:  # this worker's (its workspace is tmp_path): other workers' children come and go
        return {p.pid for p in _verbose_children() if str(tmp_path) in " ".join(p.cmdline())}

    with OpWorker(p150.path, tmp_path, chip="p150", name="lazy") as w:
        fine = w.analyze(mlp_ops[0], compile_only)
        assert fine.compile.reached is Stage.FLATBUFFER
        assert mine() == set()  # nothing failed: no 0.3 GB child idling
        (op,) = file_ops("cholesky.mlir")
        failed = w.analyze(op, compile_only)
        assert failed.failed_pass.argument == "convert-stablehlo-to-ttir"
        assert len(mine()) == 1
        w.close_passes()


def test_the_failed_pass_search_can_be_turned_off(worker, settings):
    (op,) = file_ops("cholesky.mlir")
    result = worker.analyze(op, settings.model_copy(update={"failed_pass": False}))
    assert result.status is Status.COMPILE_FAILED and result.failed_pass is None


_REPORT = """===-------------------------------------------------------------------------===
                         ... Execution time report ...
===-------------------------------------------------------------------------===
  Total Execution Time: 0.0030 seconds

  ----Wall Time----  ----Name----
    0.0010 ( 33.3%)  Inliner
    0.0001 (  3.3%)    (A) CallGraph
    0.0008 ( 26.7%)  'func.func' Pipeline
    0.0008 ( 26.7%)    Canonicalizer
    0.0004 ( 13.3%)  Canonicalizer
    0.0008 ( 26.7%)  Rest
    0.0030 (100.0%)  Total
loc("-":4:10): error: failed to legalize operation 'stablehlo.cholesky'
"""


def test_pass_timing_reports_sum_each_pass_over_its_runs_and_leave_pipelines_and_analyses_out():
    from opbyop.compiler.pass_timing import pass_timing

    timing = pass_timing(_REPORT + _REPORT.replace("Inliner", "ConvertStableHLOToTTIR"), 0.05)
    assert timing.reports == 2 and timing.total_seconds == pytest.approx(0.006)
    assert timing.passes == pytest.approx({"Inliner": 0.001, "ConvertStableHLOToTTIR": 0.001, "Canonicalizer": 0.0024})
    assert pass_timing("no report here\n") is None


@pytest.mark.slow
def test_an_op_asked_for_is_timed_pass_by_pass_by_the_real_compiler(worker, compile_only, mlp_ops):
    from opbyop.worker.passes import timed_by_sample

    dot = next(o for o in mlp_ops if o.op_name == "stablehlo.dot_general")
    timed = worker.analyze(dot, compile_only.model_copy(update={"pass_timing": 1.0}))
    t = timed.pass_timing
    assert timed.compile.reached is Stage.FLATBUFFER and t is not None and t.reports >= 3
    assert {"ConvertStableHLOToTTIR", "Inliner"} <= set(t.passes) and 0 < sum(t.passes.values()) <= t.total_seconds
    assert worker.analyze(dot, compile_only).pass_timing is None  # not asked for: not timed
    share = [timed_by_sample(o.signature, 0.5) for o in mlp_ops]
    assert share == [timed_by_sample(o.signature, 0.5) for o in mlp_ops] and any(share) and not all(share)
