"""Staged compilation through the real tt-mlir (jax-tt-plugin, compile-only), in worker processes."""

from __future__ import annotations

import pytest

from core_fixtures import DATA, file_ops
from opbyop.compiler.flatbuf import read_root
from opbyop.compiler.builds import installed
from opbyop.compiler.system_desc import plugin_schema_hash, resolve
from opbyop.config import CompilerOptions
from opbyop.device.arch import DeviceSpec
from opbyop.errors import SystemDescError
from opbyop.ir.dedupe import dedupe
from opbyop.ir.split import split_module
from opbyop.records import Stage, Status
from opbyop.worker.process import OpWorker, RunStopped


def test_the_project_makes_its_own_p150_descriptor(p150):
    assert p150.source == "mock"  # written by the plugin in tt-metal's mock mode (shipped for its version, or made here)
    data = p150.path.read_bytes()
    assert read_root(data).identifier == "TTSY"
    assert plugin_schema_hash(installed()) == p150.schema_hash


@pytest.mark.slow
def test_zoo_ops_compile_through_every_stage(worker, compile_only, mlp_ops, workspace):
    for op in mlp_ops:
        result = worker.analyze(op, compile_only, timeout=60)
        assert result.signature == op.signature
        assert result.compile.reached is Stage.FLATBUFFER, result.message
        assert set(result.compile.stage_seconds) == {Stage.STABLEHLO, Stage.TTIR, Stage.TTNN, Stage.FLATBUFFER}
        flatbuffer = workspace.artifacts.read(result.compile.artifacts["flatbuffer"])
        assert read_root(flatbuffer).identifier == "TTNN"
        assert "ttnn." in workspace.artifacts.read_text(result.compile.artifacts["ttnn_runtime"])


def test_cholesky_stops_before_ttir_with_the_compilers_words(worker, compile_only):
    (op,) = file_ops("cholesky.mlir")
    result = worker.analyze(op, compile_only, timeout=60)
    assert result.status is Status.COMPILE_FAILED
    assert result.depth is Stage.STABLEHLO and result.failed_stage is Stage.TTIR
    assert "failed to legalize operation 'stablehlo.cholesky'" in result.message
    assert any("error: failed to legalize" in d and "loc(" in d for d in result.compile.diagnostics)
    assert set(result.compile.artifacts) == {"shlo"}  # what it did produce is kept


def test_a_torch_mlir_module_with_arith_constants_compiles(worker, compile_only, cnn_graph):
    assert "arith.constant" in cnn_graph.module_text  # torch-mlir emits them
    records = split_module(cnn_graph.module_text, "cnn").ops
    epsilon = [op for op in dedupe(records) if op.op_name == "stablehlo.convert" and "f64" in op.module_text]
    assert epsilon
    result = worker.analyze(epsilon[0], compile_only, timeout=60)
    assert result.compile.reached is Stage.FLATBUFFER, result.message


def test_the_same_module_with_arith_constant_is_refused_without_the_rewrite(worker, compile_only):
    (op,) = [o for o in file_ops("cholesky.mlir")]
    raw = op.model_copy(update={"module_text": (DATA / "arith_constant.mlir").read_text(), "signature": "raw" * 8})
    result = worker.analyze(raw, compile_only, timeout=60)
    assert result.depth is Stage.SPLIT and result.failed_stage is Stage.STABLEHLO
    assert "found unstable op: arith.constant" in result.message


@pytest.mark.slow
def test_a_compiler_abort_is_a_crash_and_the_next_op_is_fine(p150, tmp_path, compile_only, mlp_ops):
    (crasher,) = file_ops("select_and_scatter_arg_init.mlir")
    with OpWorker(p150.path, tmp_path, chip="p150", name="crash") as worker:
        first_pid = worker.pid
        crashed = worker.analyze(crasher, compile_only, timeout=60)
        after = worker.analyze(mlp_ops[-1], compile_only, timeout=60)
    assert crashed.status is Status.CRASHED
    assert "SIGABRT" in crashed.message and "initValue_ must be a stablehlo.constant" in crashed.message
    assert crashed.depth is Stage.STABLEHLO and crashed.failed_stage is Stage.TTIR  # read from its dumps
    assert after.signature == mlp_ops[-1].signature and after.compile.reached is Stage.FLATBUFFER
    assert worker.restarts == 1 and first_pid != worker.pid


@pytest.mark.slow
def test_fault_injection_aborts_and_hangs_only_the_chosen_ops(p150, tmp_path, compile_only, mlp_ops):
    abort, hang, bug, fine = mlp_ops[1], mlp_ops[2], mlp_ops[4], mlp_ops[3]
    env = {"OPBYOP_FAULT_INJECT": f"abort:{abort.signature[:12]};hang:{hang.signature[:12]};raise:{bug.signature[:12]}"}
    with OpWorker(p150.path, tmp_path, chip="p150", name="faults", env=env) as worker:
        results = [worker.analyze(op, compile_only, timeout=15) for op in (abort, hang, bug, fine)]
    assert [r.status for r in results] == [Status.CRASHED, Status.TIMEOUT, Status.ANALYZER_ERROR, Status.SKIPPED]
    assert [r.signature for r in results] == [abort.signature, hang.signature, bug.signature, fine.signature]
    assert "no result within 15 s during compile" in results[1].message
    assert "opbyop failed during compile (not the compiler)" in results[2].message
    assert results[3].compile.reached is Stage.FLATBUFFER
    assert not list((tmp_path / "scratch").glob("child-*/*"))  # lost requests leave no scratch behind


@pytest.mark.slow
def test_a_stopped_run_s_op_frees_its_worker_and_its_late_ops_are_refused(p150, tmp_path, compile_only, mlp_ops):
    """abort(tag): the op of a stopped run hanging in the worker ends at once (not at its timeout),
    and the run's ops that reach the worker afterwards (a cluster cannot unstart a task) are refused;
    another run's ops go through."""
    import threading
    import time

    hang, fine = mlp_ops[2], mlp_ops[3]
    env = {"OPBYOP_FAULT_INJECT": f"hang:{hang.signature[:12]}"}
    with OpWorker(p150.path, tmp_path, chip="p150", name="aborts", env=env) as worker:
        box: dict[str, object] = {}

        def hanging() -> None:
            try:
                box["result"] = worker.analyze(hang, compile_only, timeout=600, tag="run-a")
            except RunStopped as e:  # the abort came before the request was sent
                box["result"] = e

        thread = threading.Thread(target=hanging)
        thread.start()
        deadline = time.monotonic() + 120
        while thread.is_alive() and time.monotonic() < deadline:
            worker.abort("run-a")
            thread.join(0.5)
        assert not thread.is_alive(), "the stopped run's op still holds the worker"
        late = pytest.raises(RunStopped, worker.analyze, fine, compile_only, timeout=60, tag="run-a")
        other = worker.analyze(fine, compile_only, timeout=60, tag="run-b")
    assert isinstance(box["result"], RunStopped) or box["result"].status is Status.CRASHED
    assert "was stopped" in str(late.value)
    assert other.compile.reached is Stage.FLATBUFFER


def test_a_descriptor_of_another_schema_is_refused_up_front(p150, tmp_path):
    data = bytearray(p150.path.read_bytes())
    at = data.find(p150.schema_hash.encode())
    data[at] = ord("0") if data[at] != ord("0") else ord("1")
    other = tmp_path / "other-schema.ttsys"
    other.write_bytes(bytes(data))
    with pytest.raises(SystemDescError) as e:
        resolve(str(other))
    assert "schema" in e.value.problem and "opbyop system-desc p150" in e.value.fix
    garbage = tmp_path / "garbage.ttsys"
    garbage.write_bytes(b"\x00" * 100)
    with pytest.raises(SystemDescError, match="not a system descriptor"):
        resolve(str(garbage))


@pytest.mark.slow
def test_n150_targets_a_wormhole_8x8_grid(tmp_path, compile_only, mlp_ops, workspace):
    n150 = resolve("n150")
    with OpWorker(n150.path, workspace.root, chip="n150", name="n150") as worker:
        matmul = next(op for op in mlp_ops if op.op_name == "stablehlo.dot_general")
        result = worker.analyze(matmul, compile_only, timeout=60)
    spec = DeviceSpec.from_system_desc(workspace.artifacts.read_text(result.compile.artifacts["ttnn_runtime"]))
    assert (spec.arch, spec.grid_y, spec.grid_x, spec.num_dram_channels) == ("wormhole_b0", 8, 8, 12)


def test_compiler_options_reach_the_program_and_the_cache_key(worker, compile_only, mlp_ops, workspace):
    lofi = CompilerOptions(math_fidelity="lofi", fp32_dest_acc_en=False)
    assert lofi.key() != CompilerOptions().key()
    matmul = next(op for op in mlp_ops if op.op_name == "stablehlo.dot_general")
    result = worker.analyze(matmul, compile_only.model_copy(update={"options": lofi}), timeout=60)
    assert result.compile.reached is Stage.FLATBUFFER, result.message
    program = workspace.artifacts.read_text(result.compile.artifacts["ttnn_runtime"])
    assert "math_fidelity = lofi" in program and "fp32_dest_acc_en = false" in program


def test_the_whole_model_is_compiled_beside_its_ops(worker, settings, mlp_graph):
    whole = worker.analyze_whole(mlp_graph, settings)
    assert whole.compile.reached is Stage.FLATBUFFER
    assert whole.status is Status.SUCCESS and whole.depth is Stage.GOLDEN
    assert whole.device.ttnn_ops > 0 and whole.iterations == 2
