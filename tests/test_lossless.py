"""The split is lossless: the single-op modules, run in program order on XLA:CPU with each op's
outputs feeding its users, reproduce the framework's own eager output, for every kind of zoo model."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from opbyop.config import load_zoo
from opbyop.frontends.loader import load_model
from opbyop.golden.replay import replay_error, worst_error
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.ir.split import split_module

pytestmark = pytest.mark.slow

# One model of each kind the zoo holds: an MLP, convolutions with batch norm, attention encoders and
# decoders, a vision transformer, a JAX model, tensor-parallel on a 1D and on a 2D mesh, data-parallel.
# Every small zoo model, larger sizes and meshes included: benchmarks/bench_lossless.py.
KINDS = ["mlp", "cnn", "resnet18", "bert-small", "gpt2", "llama", "vit", "jax-mlp", "llama-tp-1x2", "llama-tp-2x4",
         "cnn-dp-1x2"]
# A sharded model's ops run on a host mesh: XLA:CPU's device count is fixed when JAX starts, so in a
# process of their own
SHARDED = {m.name: m.sharding.shape()[0] * m.sharding.shape()[1] for m in load_zoo().models if m.sharding}


@pytest.fixture(scope="module")
def golden() -> XlaCpu:
    return XlaCpu()


def test_the_kinds_tested_are_zoo_models():
    assert set(KINDS) <= {m.name for m in load_zoo().small()}


@pytest.mark.parametrize("model", KINDS)
def test_single_ops_reproduce_the_eager_output(model, golden):
    if model in SHARDED:
        error = _on_host_mesh(model, SHARDED[model])
    else:
        graph = load_model(model)
        error = replay_error(graph, split_module(graph.module_text, graph.name), golden)
    assert error <= 1e-4, f"{model}: max abs error {error:.3g} of the output's scale"


def test_a_replayed_output_far_from_the_eager_one_is_a_large_error():
    want = [np.array([1.0, -4.0]), np.array([[2.0]])]
    assert worst_error(want, want) == 0.0
    assert worst_error([want[0] + 0.4, want[1]], want) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="shape"):
        worst_error([want[1], want[0]], want)


def _on_host_mesh(model: str, devices: int) -> float:
    """replay_error of a sharded model, its single ops (shardings and all) on `devices` XLA:CPU devices."""
    script = textwrap.dedent(f"""
        from opbyop.jaxenv import prepare_jax
        prepare_jax()
        from opbyop.frontends.loader import load_model
        from opbyop.golden.replay import replay_error
        from opbyop.golden.xla_cpu import XlaCpu
        from opbyop.ir.split import split_module
        graph = load_model({model!r})
        split = split_module(graph.module_text, graph.name)
        assert all(r.mesh for r in split.ops)
        print(replay_error(graph, split, XlaCpu()))
    """)
    env = {**os.environ, "OPBYOP_HOST_DEVICES": str(devices), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return float(proc.stdout.split()[-1])
