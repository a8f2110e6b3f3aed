"""The split is lossless: the single-op modules, run in program order on XLA:CPU with each op's
outputs feeding its users, reproduce the framework's own eager output, for every zoo model."""

from __future__ import annotations

import numpy as np
import pytest

from opbyop.config import load_zoo
from opbyop.frontends.loader import load_model
from opbyop.golden.replay import replay
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.ir.split import split_module

ZOO = [m.name for m in load_zoo().small()]


@pytest.fixture(scope="module")
def golden() -> XlaCpu:
    return XlaCpu()


@pytest.mark.parametrize("model", ZOO)
def test_single_ops_reproduce_the_eager_output(model, golden):
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
