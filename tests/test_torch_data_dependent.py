"""Models whose graph depends on their values (a branch on a mask, split sizes from `.tolist()`, indexing
by a boolean mask) export whole with real weights, specialised to their example inputs, and XLA:CPU
computes what torch computes. Real torch.export, real torch-mlir, real XLA:CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from opbyop.config import ExportBudget
from opbyop.errors import ExportError
from opbyop.frontends.torch_export import export_torch
from opbyop.frontends.torch_unbacked import static_nonzero
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.jaxenv import prepare_jax


class PaddingBranch(nn.Module):
    """fsmt's `if not padding_mask.any():` — a Python branch on a value: torch.export cannot guard on it."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if not (ids == 1).any():
            x = x * 2
        return self.linear(x)


class SplitByCounts(nn.Module):
    """jetmoe's experts: rows (grouped by expert) split by sizes a router's counts give (`.tolist()`)."""

    def __init__(self) -> None:
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        counts = torch.bincount(ids, minlength=3).tolist()
        parts = torch.split(x, counts)
        return torch.cat([expert(part) for expert, part in zip(self.experts, parts)])


class MaskedWrites(nn.Module):
    """vits' spline: values read and written through a boolean mask, and the mask's own coordinates."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.linear(x)
        inside = y > 0
        out = torch.zeros_like(y)
        out[inside] = y[inside] * 3
        return out, torch.nonzero(inside)


class ReassignedBuffer(nn.Module):
    """ctrl's `self.pos_encoding = self.pos_encoding.to(...)` in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.randn(8, 4), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.table = self.table.to(dtype=x.dtype)
        return x + self.table


class CutOnAMasksElements(nn.Module):
    """An op torch-mlir cannot lower (a stable argsort) on a boolean mask's elements, a size only the
    values decide: jetmoe's experts were lost whole when the cut op's result was described with a
    symbolic size."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argsort(x[x > 0], stable=True) * 2


def _xla_matches_torch(model: nn.Module, inputs: list[torch.Tensor]) -> list[str]:
    graph = export_torch(model, inputs, type(model).__name__)
    assert not graph.frontend_failures, [(f.framework_op, f.message) for f in graph.frontend_failures]
    prepare_jax()
    outputs = XlaCpu().run(graph.module_text, graph.argument_values)
    for got, want in zip(outputs, graph.reference_outputs, strict=True):
        assert got.shape == want.shape
        assert np.allclose(got, want, atol=1e-5)
    return graph.notes


def test_a_branch_on_a_value_takes_the_example_inputs_way_and_says_so():
    torch.manual_seed(0)
    notes = _xla_matches_torch(PaddingBranch(), [torch.tensor([2, 3, 4]), torch.randn(3, 8)])
    assert any("real-tensor propagation" in n and "Eq(" in n for n in notes)


def test_split_sizes_from_the_values_become_static_sizes():
    torch.manual_seed(0)
    notes = _xla_matches_torch(SplitByCounts(), [torch.tensor([0, 0, 1, 2, 2, 2]), torch.randn(6, 8)])
    assert any("made static" in n for n in notes)


def test_reads_and_writes_through_a_boolean_mask_are_written_in_static_shapes():
    torch.manual_seed(0)
    notes = _xla_matches_torch(MaskedWrites(), [torch.randn(3, 4)])
    assert any("boolean masks" in n for n in notes)


def test_a_buffer_forward_reassigns_still_lowers():
    _xla_matches_torch(ReassignedBuffer(), [torch.randn(8, 4)])


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_static_nonzero_is_torch_s_nonzero(shape):
    g = torch.Generator().manual_seed(len(shape))
    for density in (0.0, 0.3, 1.0):
        mask = torch.rand(shape, generator=g) < density
        want = torch.nonzero(mask)
        assert torch.equal(static_nonzero(mask, len(want)), want)


def test_a_branch_on_values_with_meta_weights_is_an_export_error_naming_the_fix():
    with torch.device("meta"):
        model = PaddingBranch()
    with pytest.raises(ExportError) as caught:
        export_torch(model, [torch.tensor([2, 3, 4]), torch.randn(3, 8)], "branch")
    assert "data-dependent" in caught.value.problem and "real weights" in caught.value.fix


def test_an_op_cut_out_on_a_data_dependent_size_is_the_op_s_failure_with_a_static_shape_not_a_lost_model():
    x = torch.tensor([[0.5, -1.0, 2.0], [-0.1, 0.3, -4.0]])
    graph = export_torch(CutOnAMasksElements(), [x], "cut_on_mask")
    failures = {f.framework_op: f for f in graph.frontend_failures}
    assert [o.shape for o in failures["torch.argsort"].outputs] == [(3,)], list(failures)
    assert all(isinstance(size, int) for f in graph.frontend_failures for o in f.inputs + f.outputs for size in o.shape)
    assert any("made static" in n for n in graph.notes)


@pytest.mark.slow
def test_a_budgeted_lowering_after_the_models_eager_run_does_not_hang_in_openmp():
    """Longformer's export runs the model on real values (its padding branch), which wakes torch's
    OpenMP team; the torch-mlir lowering then runs in a child forked from that process, where GNU
    OpenMP waited for ever for threads that did not come along (until the lowering's budget)."""
    from transformers import AutoConfig, AutoModel  # transformers: only this test builds from it

    config = AutoConfig.for_model("longformer", hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                  intermediate_size=64, vocab_size=128)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = AutoModel.from_config(config).eval()
    graph = export_torch(model, [torch.randint(0, 128, (1, 8))], "longformer",
                         budget=ExportBudget(timeout_s=240, lowering_timeout_s=60))
    assert not graph.frontend_failures and "stablehlo" in graph.module_text
    assert any("real-tensor propagation" in n for n in graph.notes)
