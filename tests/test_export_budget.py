"""A model's export runs in a child process with a memory and time budget: a model past it is that
model's error (or, bisected, its op's frontend_failed), and every other model goes on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from opbyop.config import ExportBudget, load_zoo
from opbyop.frontends.torch_export import export_torch
from opbyop.pipeline import prepare

pytestmark = pytest.mark.slow

FACTORIES = '''
import numpy as np
import torch

KEPT = []


def greedy():
    """Holds ever more memory while it builds its model (up to 4 GB, far past the test's budget)."""
    for _ in range(40):
        KEPT.append(np.ones(100_000_000 // 8))
    return torch.nn.Linear(4, 4), [torch.ones(1, 4)]


def small():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()), [torch.ones(2, 4)]


def slow():
    import time
    time.sleep(60)
    return torch.nn.Linear(4, 4), [torch.ones(1, 4)]
'''


@pytest.fixture
def factories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "budget_factories.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "budget_factories"


def test_a_model_whose_export_goes_past_its_memory_budget_is_its_error_and_the_next_model_runs(factories):
    budget = ExportBudget(memory_bytes=int(2e9), timeout_s=120)
    prepared = prepare([f"{factories}:greedy", f"{factories}:small"], load_zoo(), budget=budget)
    (name, error), = prepared.errors.items()
    assert name.endswith("greedy")
    assert "memory budget of 2.00 GB" in error and "--export-memory" in error
    (graph,) = prepared.graphs.values()
    assert graph.name.endswith("small") and "stablehlo.dot_general" in graph.module_text


def test_a_model_whose_export_goes_past_its_time_budget_is_its_error(factories):
    prepared = prepare([f"{factories}:slow"], load_zoo(), budget=ExportBudget(timeout_s=3))
    (error,) = prepared.errors.values()
    assert "time budget of 3 s" in error and "--export-timeout" in error


class FillHalves(nn.Module):
    """Two copies into the halves of a new_empty tensor (what DeepSeek-V2's expand_kv does): torch-mlir's
    StableHLO lowering of the slice_scatter grows without end, and its words name no op."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = a.new_empty(1, 2, 4, 16)
        out[..., :8].copy_(a)
        out[..., 8:].copy_(b)
        return torch.tanh(out)


def test_a_lowering_past_its_budget_is_bisected_to_its_op_and_the_rest_is_lowered():
    budget = ExportBudget(memory_bytes=int(1.5e9), lowering_timeout_s=60)
    graph = export_torch(FillHalves(), [torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)], "fill", budget=budget)
    assert graph.frontend_failures, "the blow-up was not cut out"
    for failure in graph.frontend_failures:
        assert failure.aten_op == "aten.slice_scatter.default"
        assert "memory budget" in failure.message and "test_export_budget.py:" in (failure.source or "")
    assert "stablehlo.tanh" in graph.module_text
