"""LLM decode on the simulated device: prefill and decode-step programs really compiled by tt-mlir,
the key/value cache left on the device between submits, against transformers' greedy generation."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from opbyop.cli.main import build_app
from opbyop.decode import DecodeSettings, Mode, decode_model, plan_decode
from opbyop.decode.loop import repeated_weight_pushes
from opbyop.device.arch import BLACKHOLE_P150
from opbyop.device.layout import Layout
from opbyop.device.runtime import close_device, open_device, to_device, to_host
from opbyop.errors import OpbyopError
from opbyop.records import Status

STEPS = 6


@pytest.fixture(scope="module")
def reports(worker, compile_only, workspace):
    """gpt2 and llama (the zoo's 2-layer configs) decoded both ways; the compiler in the session's worker."""
    settings = DecodeSettings(steps=STEPS)
    compile_program = lambda graph: worker.analyze_whole(graph, compile_only, timeout=600)  # noqa: E731
    return {name: decode_model(plan_decode(name, settings), compile_program, workspace.artifacts, "p150")
            for name in ("gpt2", "llama")}


def test_transfers_are_counted_each_way_and_data_pushed_twice_is_found():
    device = open_device(BLACKHOLE_P150)
    weight = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    tiled = Layout(tiled=True, dtype="bf16")
    try:
        with device.transfers.recording() as log:
            first = to_device(weight, device, tiled, name="w")
            to_device(weight.copy(), device, name="another name, same data")
            to_host(first)
        assert device.transfers.totals.to_device_tensors == 2 and device.transfers.totals.to_host_tensors == 1
        # bytes as the device holds them: two bf16 tiles, then the f32 row-major copy
        assert device.transfers.totals.to_device_bytes == 2 * 32 * 32 * 2 + weight.nbytes
        assert device.transfers.totals.to_host_bytes == 2 * 32 * 32 * 2
        assert repeated_weight_pushes(log, [weight]) == 1
        assert repeated_weight_pushes(log[:1], [weight]) == 0
        to_device(weight, device)  # outside the recording: counted, not logged
        assert len(log) == 3 and device.transfers.totals.to_device_tensors == 3
    finally:
        close_device(device)


def test_a_stitched_whole_model_pushes_its_weights_once_and_only_inputs_per_iteration(worker, compile_only, mlp_graph,
                                                                                     workspace):
    from opbyop.device.runtime import Binary
    from opbyop.device.stitch import run_stitched

    whole = worker.analyze_whole(mlp_graph, compile_only)
    binary = Binary.load(workspace.artifacts.read_text(whole.compile.artifacts["ttnn_runtime"]))
    parameters = [i for i, a in enumerate(mlp_graph.arguments) if a.kind.value == "parameter"]
    device = open_device(binary.program.spec)
    try:
        run = run_stitched(device, binary, mlp_graph.argument_values, parameters, iterations=3)
    finally:
        close_device(device)
    inputs = len(mlp_graph.arguments) - len(parameters)
    assert run.weight_transfers.to_device_tensors == len(parameters) and run.weight_transfers.to_host_tensors == 0
    assert run.weight_transfers.to_device_bytes >= sum(mlp_graph.argument_values[i].nbytes for i in parameters)
    assert [t.to_device_tensors for t in run.iteration_transfers] == [inputs] * 3
    assert [t.to_host_tensors for t in run.iteration_transfers] == [0, 0, len(run.outputs)]  # read once, at the end
    assert device.transfers.totals.to_device_tensors == len(parameters) + 3 * inputs


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_decoded_tokens_match_the_frameworks_greedy_generation(reports, model):
    report = reports[model]
    assert report.compiled, report.compiles
    assert len(report.framework_tokens) == STEPS + 1
    assert report.torch_tokens == report.framework_tokens  # the exported modules are the framework's model
    for mode in Mode:
        run = report.run(mode)
        assert run.status is Status.SUCCESS, run.message
        assert run.tokens == report.framework_tokens and run.tokens_matched == STEPS + 1
        assert run.cache_pcc > 0.999  # the whole key/value cache after the last step, against torch's
        assert run.leaked_bytes == 0
    assert report.ok


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_no_weight_crosses_twice_and_the_stitched_cache_never_leaves_the_device(reports, model):
    report = reports[model]
    stitched, round_trip = report.run(Mode.STITCHED), report.run(Mode.ROUND_TRIP)
    for run in (stitched, round_trip):
        assert run.weight_pushes_repeated == 0
        assert run.weight_tensors > 0 and run.weight_bytes > 0
        assert [s.program for s in run.steps] == ["prefill"] + ["decode"] * STEPS
    assert stitched.weight_bytes == round_trip.weight_bytes
    prefill = stitched.steps[0]
    assert prefill.to_device_tensors == 1 and prefill.to_device_bytes == len(report.prompt) * 4  # the prompt, si32
    for step in stitched.steps[1:]:  # nothing goes in; only the chosen token comes out
        assert step.to_device_tensors == 0 and step.to_device_bytes == 0
        assert step.to_host_tensors == 1
        assert step.cycles > 0 and step.peak_dram_bytes >= stitched.weight_bytes and step.peak_l1_bytes > 0
    outputs = 2 + 2 * plan_decode(model, DecodeSettings(steps=STEPS)).lm.layers  # token, position, key and value per layer
    assert round_trip.steps[0].to_host_tensors == outputs
    for step in round_trip.steps[1:]:  # every output back to the host, every input pushed again
        assert step.to_device_tensors == outputs and step.to_host_tensors == outputs
        assert step.to_device_bytes > 0 and step.to_layouts == 0
    assert all(s.to_layouts <= outputs for s in stitched.steps)
    for s, r in zip(stitched.steps, round_trip.steps):
        assert s.cycles == r.cycles  # the same programs: what differs is the traffic
    assert round_trip.activation_bytes > 10 * stitched.activation_bytes


def test_a_model_that_is_not_a_causal_lm_or_too_long_a_decode_is_refused_before_compiling():
    with pytest.raises(OpbyopError, match="mlp is not a causal language model"):
        plan_decode("mlp", DecodeSettings(steps=2))
    with pytest.raises(OpbyopError, match="has 256 positions") as e:
        plan_decode("gpt2", DecodeSettings(steps=300))
    assert "at most 256" in e.value.fix
    with pytest.raises(OpbyopError, match="need a cache of 12 positions"):
        plan_decode("llama", DecodeSettings(steps=4, cache_length=10))


@pytest.mark.slow
def test_run_decode_prints_both_runs_side_by_side(tmp_path):
    env = {**os.environ, "OPBYOP_HOME": str(tmp_path), "COLUMNS": "200"}
    env.pop("JAX_PLATFORMS", None)  # the command decides for itself
    proc = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "run", "llama", "--decode", "2"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stitched (cache stays on the device) | host round trip" in proc.stdout
    assert "3/3" in proc.stdout and "round_trip" in proc.stdout


def test_decode_refuses_a_model_that_is_not_a_causal_lm_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path))
    result = CliRunner().invoke(build_app(), ["decode", "mlp", "--steps", "2", "--json"])
    assert result.exit_code == 2, result.output
    assert "error: mlp is not a causal language model" in result.output and "fix:" in result.output
    assert "Traceback" not in result.output and "{" not in result.output  # no report: nothing was compiled
