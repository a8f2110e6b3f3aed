"""The ttsim device backend: compiled ops run by tt-metal's own kernels on Tenstorrent's simulator.

These tests need ttsim and ttnn's interpreter (`make ttsim`, which `make test` runs first). Where
they are missing, the tests fail with the backend's own message, never skip: a suite that passes
without ttsim would prove nothing about it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from typer.testing import CliRunner

from core_fixtures import DATA
from ttsim_ops import only_op, run_on_ttsim
from opbyop_flows.nightly import Target
from opbyop_storage.dataset import Store
from opbyop_storage.readonly import run_sql
from opbyop.cli.main import build_app
from opbyop.analysis.accuracy_trace import in_brief
from opbyop.compiler.builds import installed, unpack_assets
from opbyop.config import CompilerOptions, DtypeThreshold, Thresholds
from opbyop.device.program import load_program
from opbyop.device.ttsim.agreement import agreement, ulps
from opbyop.device.ttsim.backend import TtsimBackend
from opbyop.device.ttsim.install import TtsimUnavailable, locate
from opbyop.records import Status, TtsimOutcome

ADD_BF16 = """func.func @main(%a: tensor<64x64xbf16>, %b: tensor<64x64xbf16>) -> tensor<64x64xbf16> {
  %0 = stablehlo.add %a, %b : tensor<64x64xbf16>
  return %0 : tensor<64x64xbf16>
}
"""
MATMUL_BF16 = """func.func @main(%a: tensor<64x128xbf16>, %b: tensor<128x64xbf16>) -> tensor<64x64xbf16> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<64x128xbf16>, tensor<128x64xbf16>) -> tensor<64x64xbf16>
  return %0 : tensor<64x64xbf16>
}
"""
# ttsim v1.10.0 does not model the packer's uint8 format conversion tt-metal's concat uses
# (UnimplementedFunctionality: tensix_pacr)
CONCAT_UI8 = """func.func @main(%a: tensor<13xui8>, %b: tensor<13xui8>) -> tensor<26xui8> {
  %0 = stablehlo.concatenate %a, %b, dim = 0 : (tensor<13xui8>, tensor<13xui8>) -> tensor<26xui8>
  return %0 : tensor<26xui8>
}
"""



@pytest.mark.slow
def test_an_op_runs_on_ttsim_and_its_record_names_the_backend(tmp_path, workspace, worker, on_ttsim, ttsim_ready):
    result = worker.analyze(only_op(tmp_path, workspace, ADD_BF16), on_ttsim, timeout=600)
    assert result.status is Status.SUCCESS, result.message
    assert result.device_backend == "ttsim"
    assert result.ttsim is not None and result.ttsim.outcome is TtsimOutcome.RAN
    assert result.golden is not None and result.golden.pcc > 0.999
    assert result.ttsim.agreement in ("bit_equal", "differ")  # how the model agrees is measured, not assumed


@pytest.mark.slow
def test_the_compilers_matmul_runs_on_ttsim_with_its_own_program_config(tmp_path, workspace, worker, on_ttsim,
                                                                       ttsim_ready):
    result = worker.analyze(only_op(tmp_path, workspace, MATMUL_BF16), on_ttsim, timeout=600)
    assert result.status is Status.SUCCESS, result.message
    assert result.ttsim.outcome is TtsimOutcome.RAN and result.golden.pcc > 0.999


@pytest.mark.slow
def test_a_feature_ttsim_does_not_model_costs_only_its_op(tmp_path, workspace, worker, on_ttsim, ttsim_ready):
    limited = worker.analyze(only_op(tmp_path, workspace, CONCAT_UI8, "concat.mlir"), on_ttsim, timeout=600)
    assert limited.status is Status.SIMULATOR_LIMIT, limited.message
    assert "UnimplementedFunctionality: tensix_pacr" in limited.message  # ttsim's words, naming the instruction
    assert not limited.status.is_verdict  # no verdict on the chip: outside pass rates
    assert limited.ttsim.op is not None  # the op ttsim stopped in, from the runner's log
    after = worker.analyze(only_op(tmp_path, workspace, ADD_BF16), on_ttsim, timeout=600)
    assert after.status is Status.SUCCESS and after.ttsim.outcome is TtsimOutcome.RAN


@pytest.mark.slow
def test_a_zoo_model_runs_whole_on_ttsim_and_is_traced_op_by_op_on_ttsims_values(worker, on_ttsim, mlp_graph,
                                                                                  ttsim_ready):
    whole = worker.analyze_whole(mlp_graph, on_ttsim)
    run = whole.ttsim
    assert run is not None and run.outcome is TtsimOutcome.RAN, run.message if run else whole.message
    assert run.pcc is not None and run.pcc >= 0.99  # tt-metal's kernels, stitched, against the framework
    trace = run.accuracy_trace
    assert trace is not None and trace.message is None
    # every op the model's own trace compared is compared on ttsim's values too, against the same XLA:CPU run
    model = whole.accuracy_trace
    assert [p.position for p in trace.points] == [p.position for p in model.points] and len(trace.points) > 20
    assert trace.first_below is None and trace.worst is not None and trace.worst.pcc >= trace.pcc_threshold
    assert any(p.op_name == "stablehlo.maximum" for p in trace.points)  # the relu, on the patched ttsim
    assert in_brief(trace).startswith(f"{len(trace.points)} of {trace.traced_ops} ops compared, worst: ")


@pytest.mark.slow
def test_tt_metal_refusing_a_program_is_a_device_failure_in_its_own_words(tmp_path, workspace, worker, settings,
                                                                        workspace_root, ttsim_ready):
    compile_only = settings.model_copy(update={"run_device": False, "run_golden": False})
    compiled = worker.analyze(only_op(tmp_path, workspace, MATMUL_BF16), compile_only, timeout=600)
    program = load_program(workspace.artifacts.read_text(compiled.compile.artifacts["ttnn_runtime"]))
    (matmul,) = [op for op in program.main.ops if op.name == "ttnn.matmul"]
    matmul.attrs["matmul_program_config"]["in0_block_w"] = 3  # K is 4 tiles: no whole number of K blocks
    inputs = [np.ones((64, 128), ml_dtypes.bfloat16), np.ones((128, 64), ml_dtypes.bfloat16)]
    refused = run_on_ttsim(workspace_root, tmp_path, program, inputs).run
    assert refused.outcome is TtsimOutcome.REJECTED, refused.message
    assert "TT_FATAL" in refused.message or "TT_THROW" in refused.message
    assert refused.op == "ttnn.matmul" and "backtrace" not in refused.message


@pytest.mark.slow
def test_a_p300_all_gather_keeps_the_models_verdict_with_the_reason_its_mesh_did_not_open(tmp_path, workspace_root,
                                                                                           ttsim_ready):
    """ttnn opens ttsim's two-chip build as a 1x2 mesh, but ttsim v1.10 stops in tt-metal's fabric start-up
    (an unaligned read on an Ethernet core), and collectives need the fabric: the reason is on the record
    in ttsim's own words, and the device model's verdict stands (the outcome is no verdict)."""
    program = load_program((DATA / "mesh" / "p300" / "all_gather" / "ttnn_runtime.mlir").read_text())
    assert program.mesh_shape == (1, 2)
    backend = TtsimBackend(workspace_root, tmp_path)
    try:
        run = backend.run(program, [np.ones((32, 64), np.float32)], timeout=600).run
        again = backend.run(program, [np.ones((32, 64), np.float32)], timeout=600).run
    finally:
        backend.close()
    assert run.outcome is TtsimOutcome.UNAVAILABLE, run
    assert run.message.startswith("the ttsim 1x2 mesh (blackhole-bh_x2) did not open: ERROR: NonContractualBehavior")
    assert again.message == run.message  # asked once per backend, not for every op


def test_ttsims_toolchain_is_a_snapshot_out_of_reach_of_the_plugins_next_unpacking(ttsim_ready):
    """Every plugin load unpacks its assets again over the same files: kernel builds use a snapshot."""
    assets = unpack_assets(installed()).resolve()
    assert not ttsim_ready.sfpi.resolve().is_relative_to(assets)
    compiler = ttsim_ready.sfpi / "compiler" / "bin" / "riscv-tt-elf-g++"
    assert compiler.read_bytes()[:4] == b"\x7fELF"


def test_without_a_ttnn_interpreter_the_backend_says_how_to_get_one(tmp_path):
    with pytest.raises(TtsimUnavailable, match="make ttsim"):
        locate("blackhole", tmp_path, python=tmp_path / "no-such-python")


def test_wormhole_on_ttsim_names_the_missing_toolchain(tmp_path):
    with pytest.raises(TtsimUnavailable, match="toolchain"):
        locate("wormhole_b0", tmp_path)


def test_bf16_outputs_agree_only_bit_for_bit():
    a = np.array([1.0, 2.0, 3.0], ml_dtypes.bfloat16)
    b = a.copy()
    assert agreement([a], [b]) == ("bit_equal", None)
    b[1] = 2.015625  # the next bf16 after 2.0
    assert agreement([a], [b])[0] == "differ"


def test_f32_outputs_are_measured_in_units_in_the_last_place():
    a = np.array([1.0, -2.0, 0.0, np.nan], np.float32)
    b = a.copy()
    b[0] = np.nextafter(np.float32(1.0), np.float32(2.0))
    b[1] = np.nextafter(np.float32(-2.0), np.float32(-3.0))
    assert ulps(a, b) == 1.0
    assert agreement([a], [b]) == ("within_ulps", 1.0)
    assert ulps(np.array([np.nan], np.float32), np.array([1.0], np.float32)) == np.inf
    assert ulps(np.array([-0.0], np.float32), np.array([0.0], np.float32)) == 0.0
    assert agreement([a], [a[:2]]) == ("differ", None)


def _run_on_ttsim(tmp_path, workspace_root, *args: str, **env: str) -> subprocess.CompletedProcess:
    path = tmp_path / "add.mlir"
    path.write_text(ADD_BF16)
    environment = {**os.environ, "OPBYOP_HOME": str(workspace_root), "COLUMNS": "200", **env}
    environment.pop("JAX_PLATFORMS", None)  # the command decides for itself
    return subprocess.run([sys.executable, "-m", "opbyop.cli.main", "run", str(path), "--device", "ttsim", *args],
                          capture_output=True, text=True, env=environment, timeout=900)


@pytest.mark.slow
def test_opbyop_run_with_device_ttsim_prints_how_ops_fared_there(tmp_path, workspace_root, ttsim_ready):
    done = _run_on_ttsim(tmp_path, workspace_root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ttsim: 1 ran; the device model against ttsim: 1 " in done.stdout
    assert "whole on ttsim: ran, pcc 1.00000" in done.stdout  # the whole program too, beside the model's
    assert "accuracy trace on ttsim: 1 of 1 ops compared" in done.stdout  # and its ops, on ttsim's values


@pytest.mark.slow
def test_a_whole_model_run_on_ttsim_stores_its_accuracy_trace_on_ttsims_values(workspace_root, ttsim_ready):
    """`opbyop run jax-mlp --device ttsim`: the trace on ttsim's values lands in the models table beside
    the model's own, and view accuracy_traces gives both, each row naming its backend."""
    environment = {**os.environ, "OPBYOP_HOME": str(workspace_root), "COLUMNS": "200"}
    environment.pop("JAX_PLATFORMS", None)
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "run", "jax-mlp", "--device", "ttsim"],
                          capture_output=True, text=True, env=environment, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = re.search(r"stored as run (\S+);", done.stdout).group(1)
    root = workspace_root / "store"
    (stored,) = Store(root).models(run_id)
    whole = stored.summary.whole
    assert whole.ttsim is not None and whole.ttsim.outcome is TtsimOutcome.RAN, whole.ttsim
    trace, model = whole.ttsim.accuracy_trace, whole.accuracy_trace
    assert trace is not None and trace.message is None and len(trace.points) == trace.traced_ops == 5
    assert f"accuracy trace on ttsim: {in_brief(trace)}" in done.stdout  # what was printed is what was stored
    rows = run_sql(f"SELECT backend, position, op_name, pcc FROM accuracy_traces WHERE run_id = '{run_id}' "
                   "ORDER BY backend, position", root).rows
    on = {backend: [r[1:] for r in rows if r[0] == backend] for backend in ("model", "ttsim")}
    assert on["ttsim"] == [(p.position, p.op_name, p.pcc) for p in trace.points]
    assert [r[:2] for r in on["model"]] == [r[:2] for r in on["ttsim"]]  # the same ops, on both backends' values
    assert len(rows) == len(on["model"]) + len(on["ttsim"]) == len(model.points) + len(trace.points)
    only_model = run_sql(f"SELECT position FROM accuracy_trace WHERE run_id = '{run_id}' ORDER BY position", root)
    assert [r[0] for r in only_model.rows] == [p.position for p in model.points]


def test_a_run_asked_for_ttsim_on_a_wormhole_chip_is_refused_before_any_op(tmp_path, workspace_root):
    done = _run_on_ttsim(tmp_path, workspace_root, "--chip", "n150")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no RISC-V toolchain for wormhole_b0 kernels" in done.stderr and "use a Blackhole target" in done.stderr
    assert "analysed" not in done.stdout and "unavailable" not in done.stdout  # nothing compiled or run


def test_opbyop_ttnn_python_points_the_backend_at_another_interpreter_and_a_wrong_one_stops_the_run(
        tmp_path, workspace_root):
    done = _run_on_ttsim(tmp_path, workspace_root, "--no-whole", OPBYOP_TTNN_PYTHON=str(tmp_path / "no-such-python"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"no Python interpreter with ttnn at {tmp_path / 'no-such-python'}" in done.stderr
    assert "make ttsim" in done.stderr  # the fix


@pytest.mark.slow
def test_opbyop_corpus_run_with_device_ttsim_records_ttsim_and_its_memory_per_op(workspace_root, ttsim_ready,
                                                                                 monkeypatch):
    """One corpus case (add, bf16) on p150 through `opbyop corpus run --device ttsim`: its stored record
    says it ran on ttsim with what tt-metal allocated, and `opbyop coverage` counts it per TTNN op."""
    monkeypatch.setenv("OPBYOP_HOME", str(workspace_root))
    cli = CliRunner()
    ran = cli.invoke(build_app(), ["corpus", "run", "--chip", "p150", "--op", "add", "--dtype", "bf16",
                           "--file", "add-bf16-2x32x64-args.mlir", "--device", "ttsim", "--run-id", "ttsim-add"])
    assert ran.exit_code == 0 and "1 unique ops: 1 analysed" in ran.output, ran.output
    (result,) = Store(workspace_root / "store").results("ttsim-add")
    assert result.status is Status.SUCCESS and result.device_backend == "ttsim", result.message
    run = result.ttsim
    assert run.outcome is TtsimOutcome.RAN
    # tt-metal's own figures beside the model's: the add's three circular buffers of two bf16 tiles each
    # (double-buffered), and its DRAM tensors (two inputs and the output at least)
    assert run.peak_cb_bytes == 3 * 2 * 32 * 32 * 2 and run.peak_l1_bytes >= run.peak_cb_bytes
    assert run.peak_dram_bytes >= 3 * 2 * 32 * 64 * 2 and result.device.peak_l1_bytes > 0
    table = cli.invoke(build_app(), ["coverage", "--run", "ttsim-add"])
    assert table.exit_code == 0, table.output
    assert "on ttsim: 1 of 1 programs ran" in table.output
    report = json.loads(cli.invoke(build_app(), ["coverage", "--run", "ttsim-add", "-f", "json"]).output)
    ops = {o["ttnn_op"]: o for o in report["ops"]}
    assert ops["ttnn.add"]["ttsim"] == {"ran": 1}


def test_a_nightly_target_names_its_device_by_name():
    target = Target.model_validate({"chip": "p150", "device": "ttsim"})
    assert target.device.backend == "ttsim" and target.title.endswith("on ttsim")
    assert Target.model_validate({"chip": "p150"}).device.backend == "model"


@pytest.mark.slow
def test_a_wrong_number_on_ttsim_is_judged_without_opbyops_simulator(tmp_path, workspace, worker, on_ttsim, ttsim_ready):
    """A LoFi f32 matmul at tight tolerances: the program's exact reading matches XLA, so what remains
    is the chip's numerics as tt-metal's kernels compute them (never opbyop's simulator's fault)."""
    tight = Thresholds(default=DtypeThreshold(pcc=0.99, atol=1e-4, rtol=1e-4, require_allclose=True))
    lofi = on_ttsim.model_copy(update={"thresholds": tight, "options": CompilerOptions(math_fidelity="lofi")})
    result = worker.analyze(only_op(tmp_path, workspace, (DATA / "dot_f32_lofi.mlir").read_text()), lofi, timeout=600)
    assert result.device_backend == "ttsim" and result.ttsim.outcome is TtsimOutcome.RAN
    assert result.status is Status.GOLDEN_FAILED, result.message
    assert "as tt-metal's kernels compute them on ttsim" in result.message and "lofi" in result.message
