"""Framework ops torch-mlir refuses, written with ops it lowers before the lowering: complex arithmetic
on real pairs, an unsorted top-k as the sorted one, an empty tensor as zeros (torch-mlir's own
`tensor.empty` is no StableHLO op), torch.export's metadata checks dropped. The
families that need them (DeepSeek-V2's complex rotary embedding, DeepSeek's unsorted routers) export
whole at a tiny size and compute what torch computes. Real torch.export, real torch-mlir, real XLA:CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from opbyop.frontends.experts import EVERY_EXPERT, use_expert_form
from opbyop.frontends.models.hf import FirstOutput
from opbyop.frontends.torch_decompositions import add, complex_, expand, mul, polar, sub, topk, unsqueeze, view
from opbyop.frontends.torch_export import export_torch
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.jaxenv import prepare_jax

TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, num_experts_per_tok=2, first_k_dense_replace=1,
            kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, max_position_embeddings=64,
            attn_implementation="eager")
YARN = dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, beta_fast=32.0, beta_slow=1.0, mscale=0.707,
            mscale_all_dim=0.707, original_max_position_embeddings=64)
FAMILIES = {  # their published routers: DeepSeek-V2-Lite's greedy top-k, DeepSeek-V3's grouped one (both unsorted)
    "DeepseekV2": dict(n_shared_experts=2, n_routed_experts=8, q_lora_rank=None, topk_method="greedy", n_group=1,
                       topk_group=1, rope_parameters=YARN),
    "DeepseekV3": dict(n_shared_experts=1, n_routed_experts=8, q_lora_rank=16, n_group=2, topk_group=1,
                       routed_scaling_factor=2.5, rope_parameters={**YARN, "mscale": 1.0, "mscale_all_dim": 1.0}),
}


def _complex_pair(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.complex(torch.randn(*shape, generator=g), torch.randn(*shape, generator=g))


def test_complex_arithmetic_written_on_real_pairs_equals_torch_s_own():
    g = torch.Generator().manual_seed(0)
    a, b, r = _complex_pair(g, 2, 3, 4), _complex_pair(g, 1, 3, 4), torch.randn(2, 3, 4, generator=g)
    angle = torch.randn(3, 4, generator=g)
    assert torch.allclose(polar(r[0].abs(), angle), torch.polar(r[0].abs(), angle), atol=1e-6)
    assert torch.equal(complex_(r[0], angle), torch.complex(r[0], angle))
    assert torch.allclose(mul(a, b), a * b, atol=1e-6)  # broadcast along the first axis
    assert torch.allclose(mul(a, r), a * r) and torch.allclose(mul(r, a), r * a) and torch.equal(mul(a, 0.5), a * 0.5)
    assert torch.equal(add(a, b, alpha=2), a + 2 * b) and torch.equal(sub(a, b), a - b)
    assert torch.equal(unsqueeze(a, 1), a.unsqueeze(1)) and torch.equal(unsqueeze(a, -1), a.unsqueeze(-1))
    assert torch.equal(view(a, [6, 4]), a.view(6, 4)) and torch.equal(expand(b, [5, 2, 3, 4]), b.expand(5, 2, 3, 4))
    # what the complex forms leave alone: the op itself stays (real operands, complex scalars)
    assert mul(r, r) is NotImplemented and mul(a, 1j) is NotImplemented and unsqueeze(r, 0) is NotImplemented


def test_an_unsorted_top_k_is_the_sorted_one_and_a_sorted_one_is_left_alone():
    x = torch.randn(5, 9, generator=torch.Generator().manual_seed(1))
    values, indices = topk(x, 3, -1, True, False)
    assert torch.equal(values, torch.topk(x, 3).values) and torch.equal(indices, torch.topk(x, 3).indices)
    assert topk(x, 3) is NotImplemented


@pytest.mark.parametrize("family", FAMILIES)
def test_a_tiny_deepseek_exports_with_no_op_cut_out_and_xla_computes_torch_s_logits(family):
    torch.manual_seed(0)
    config = getattr(transformers, f"{family}Config")(**TINY, **FAMILIES[family])
    model = getattr(transformers, f"{family}ForCausalLM")(config).eval()
    for p in model.parameters():
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=0.1)  # weights big enough to route unevenly
    use_expert_form(model, EVERY_EXPERT)
    ids = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(0))
    graph = export_torch(FirstOutput(model, "logits"), [ids], family.lower())
    assert not graph.frontend_failures, [(f.framework_op, f.message) for f in graph.frontend_failures]
    assert "complex" not in graph.module_text
    assert "tensor.empty" not in graph.module_text  # DeepSeek-V2's key states: made empty, written part by part
    prepare_jax()
    (logits,) = XlaCpu().run(graph.module_text, graph.argument_values)
    (want,) = graph.reference_outputs
    assert logits.shape == want.shape
    assert np.max(np.abs(logits - want)) <= 1e-4 * np.max(np.abs(want))


class InversePermutation(torch.nn.Module):
    """transformers' grouped experts restore the tokens' order with an uninitialised tensor they then
    write whole (`inv = torch.empty_like(perm); inv[perm] = arange`): torch-mlir keeps it tensor.empty."""

    def forward(self, perm: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.size(0))
        return x[inverse]


def test_an_empty_tensor_torch_mlir_leaves_is_stablehlo_zeros_said_so_and_xla_computes_torch_s_values():
    inputs = [torch.tensor([3, 0, 2, 1, 5, 4]), torch.randn(6, 8, generator=torch.Generator().manual_seed(0))]
    graph = export_torch(InversePermutation(), inputs, "inverse_permutation")
    assert "tensor.empty" not in graph.module_text and "dense<0> : tensor<6xi64>" in graph.module_text
    assert any("tensor.empty" in note and "zeros" in note for note in graph.notes), graph.notes
    prepare_jax()
    (got,) = XlaCpu().run(graph.module_text, graph.argument_values)
    assert np.array_equal(got, graph.reference_outputs[0])
