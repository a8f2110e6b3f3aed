"""The ttsim device backend: compiled ops run by tt-metal's own kernels on Tenstorrent's simulator.

These tests need ttsim and ttnn's interpreter (`make ttsim`, which `make test` runs first). Where
they are missing, the tests fail with the backend's own message, never skip: a suite that passes
without ttsim would prove nothing about it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from typer.testing import CliRunner

from core_fixtures import DATA
from opbyop_flows.nightly import Target
from opbyop.cli import coverage_cmds  # noqa: F401  (registers the corpus and coverage commands)
from opbyop.cli.app import app
from opbyop.compiler.builds import installed, unpack_assets
from opbyop.config import CompilerOptions, DtypeThreshold, Thresholds
from opbyop.corpus.run import read_results
from opbyop.device.program import load_program
from opbyop.device.ttsim.agreement import agreement, ulps
from opbyop.device.ttsim.backend import TtsimBackend
from opbyop.device.ttsim.install import TtsimUnavailable, locate
from opbyop.pipeline import prepare
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
# ttsim v1.10 does not model the SFPU compare that tt-metal's relu uses (UnsupportedFunctionality)
RELU_F32 = """func.func @main(%a: tensor<32x32xf32>) -> tensor<32x32xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<32x32xf32>
  %0 = stablehlo.maximum %a, %z : tensor<32x32xf32>
  return %0 : tensor<32x32xf32>
}
"""


def only_op(tmp_path, workspace, text: str, name: str = "op.mlir"):
    """The module's one op that is not a constant."""
    path = tmp_path / name
    path.write_text(text)
    run = prepare([str(path)], artifacts=workspace.artifacts)
    assert not run.errors
    (op,) = [u for u in run.unique if u.op_name != "stablehlo.constant"]
    return op


@pytest.fixture(scope="module")
def on_ttsim(settings):
    return settings.model_copy(update={"device": settings.device.model_copy(update={"backend": "ttsim"})})



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
    limited = worker.analyze(only_op(tmp_path, workspace, RELU_F32, "relu.mlir"), on_ttsim, timeout=600)
    assert limited.status is Status.SIMULATOR_LIMIT, limited.message
    assert "UnsupportedFunctionality" in limited.message
    assert not limited.status.is_verdict  # no verdict on the chip: outside pass rates
    assert limited.ttsim.op is not None  # the op ttsim stopped in, from the runner's log
    after = worker.analyze(only_op(tmp_path, workspace, ADD_BF16), on_ttsim, timeout=600)
    assert after.status is Status.SUCCESS and after.ttsim.outcome is TtsimOutcome.RAN


@pytest.mark.slow
def test_tt_metal_refusing_a_program_is_a_device_failure_in_its_own_words(tmp_path, workspace, worker, settings,
                                                                        workspace_root, ttsim_ready):
    compile_only = settings.model_copy(update={"run_device": False, "run_golden": False})
    compiled = worker.analyze(only_op(tmp_path, workspace, MATMUL_BF16), compile_only, timeout=600)
    program = load_program(workspace.artifacts.read_text(compiled.compile.artifacts["ttnn_runtime"]))
    (matmul,) = [op for op in program.main.ops if op.name == "ttnn.matmul"]
    matmul.attrs["matmul_program_config"]["in0_block_w"] = 3  # K is 4 tiles: no whole number of K blocks
    backend = TtsimBackend(workspace_root, tmp_path)
    try:
        inputs = [np.ones((64, 128), ml_dtypes.bfloat16), np.ones((128, 64), ml_dtypes.bfloat16)]
        refused = backend.run(program, inputs, timeout=600).run
    finally:
        backend.close()
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


@pytest.mark.slow
def test_opbyop_run_with_device_ttsim_prints_how_ops_fared_there(tmp_path, workspace_root, ttsim_ready):
    path = tmp_path / "add.mlir"
    path.write_text(ADD_BF16)
    env = {**os.environ, "OPBYOP_HOME": str(workspace_root), "COLUMNS": "200"}
    env.pop("JAX_PLATFORMS", None)  # the command decides for itself
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "run", str(path), "--device", "ttsim"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ttsim: 1 ran; the device model against ttsim: 1 " in done.stdout
    assert "whole on ttsim: ran, pcc 1.00000" in done.stdout  # the whole program too, beside the model's


@pytest.mark.slow
def test_opbyop_ttnn_python_points_the_backend_at_another_interpreter(tmp_path, workspace_root):
    path = tmp_path / "add.mlir"
    path.write_text(ADD_BF16)
    env = {**os.environ, "OPBYOP_HOME": str(workspace_root), "COLUMNS": "200",
           "OPBYOP_TTNN_PYTHON": str(tmp_path / "no-such-python")}
    env.pop("JAX_PLATFORMS", None)
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "run", str(path), "--device", "ttsim", "--no-whole"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ttsim: 1 unavailable" in done.stdout and "success: 1" in done.stdout  # the model's verdict stands


@pytest.mark.slow
def test_opbyop_corpus_run_with_device_ttsim_records_ttsim_and_its_memory_per_op(tmp_path, workspace_root,
                                                                                 ttsim_ready, monkeypatch):
    """One corpus file (add, bf16) on p150 through `opbyop corpus run --device ttsim`: its record says
    it ran on ttsim with what tt-metal allocated, and `opbyop coverage` counts it per TTNN op."""
    monkeypatch.setenv("OPBYOP_HOME", str(workspace_root))
    cli = CliRunner()
    made = cli.invoke(app, ["corpus", "generate", str(tmp_path / "corpus"), "--op", "add", "--dtype", "bf16"])
    assert made.exit_code == 0, made.output
    ran = cli.invoke(app, ["corpus", "run", str(tmp_path / "corpus"), "--out", str(tmp_path / "out"), "--chip", "p150",
                           "--file", "add-bf16-2x32x64-args.mlir", "--device", "ttsim"])
    assert ran.exit_code == 0 and ran.output.startswith("1 analysed"), ran.output
    (record,) = read_results(tmp_path / "out")
    assert record.result.status is Status.SUCCESS and record.result.device_backend == "ttsim", record.result.message
    run = record.result.ttsim
    assert run.outcome is TtsimOutcome.RAN
    # tt-metal's own figures beside the model's: the add's three circular buffers of two bf16 tiles each
    # (double-buffered), and its DRAM tensors (two inputs and the output at least)
    assert run.peak_cb_bytes == 3 * 2 * 32 * 32 * 2 and run.peak_l1_bytes >= run.peak_cb_bytes
    assert run.peak_dram_bytes >= 3 * 2 * 32 * 64 * 2 and record.result.device.peak_l1_bytes > 0
    table = cli.invoke(app, ["coverage", str(tmp_path / "out")])
    assert table.exit_code == 0, table.output
    assert "on ttsim: 1 of 1 programs ran" in table.output
    ops = {o["ttnn_op"]: o for o in json.loads(cli.invoke(app, ["coverage", str(tmp_path / "out"), "-f", "json"]).output)["ops"]}
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
