"""The split is lossless: the single-op modules, run in program order on XLA:CPU with each op's
outputs feeding its users, reproduce the framework's own eager output, for every zoo model."""

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
from opbyop.golden.replay import replay
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.ir.split import split_module

pytestmark = pytest.mark.slow

ZOO = [m.name for m in load_zoo().small()]
# A sharded model's ops run on a host mesh: XLA:CPU's device count is fixed when JAX starts, so in a
# process of their own
SHARDED = {m.name: m.sharding.shape()[0] * m.sharding.shape()[1] for m in load_zoo().models if m.sharding}


@pytest.fixture(scope="module")
def golden() -> XlaCpu:
    return XlaCpu()


@pytest.mark.parametrize("model", ZOO)
def test_single_ops_reproduce_the_eager_output(model, golden):
    if model in SHARDED:
        _on_host_mesh(model, SHARDED[model])
        return
    graph = load_model(model)
    split = split_module(graph.module_text, graph.name)
    assert split.ops and not split.failed
    outputs = replay(split, graph.argument_values, golden)
    assert len(outputs) == len(graph.reference_outputs)
    for got, want in zip(outputs, graph.reference_outputs):
        assert got.shape == want.shape
        scale = float(np.max(np.abs(want)))
        error = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
        assert error <= 1e-4 * scale, f"{model}: max abs error {error:.3g} at output scale {scale:.3g}"


def _on_host_mesh(model: str, devices: int) -> None:
    """The same check for a sharded model, its single ops (shardings and all) on `devices` XLA:CPU devices."""
    script = textwrap.dedent(f"""
        import numpy as np
        from opbyop.jaxenv import prepare_jax
        prepare_jax()
        from opbyop.frontends.loader import load_model
        from opbyop.golden.replay import replay
        from opbyop.golden.xla_cpu import XlaCpu
        from opbyop.ir.split import split_module
        graph = load_model({model!r})
        split = split_module(graph.module_text, graph.name)
        assert split.ops and not split.failed and all(r.mesh for r in split.ops)
        outputs = replay(split, graph.argument_values, XlaCpu())
        for got, want in zip(outputs, graph.reference_outputs, strict=True):
            assert got.shape == want.shape, (got.shape, want.shape)
            print(float(np.max(np.abs(got.astype(np.float64) - want))) / float(np.max(np.abs(want))))
    """)
    env = {**os.environ, "OPBYOP_HOST_DEVICES": str(devices), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    worst = max(float(line) for line in proc.stdout.split())
    assert worst <= 1e-4, f"{model} on {devices} host devices: max abs error {worst:.3g} of the output's scale"
