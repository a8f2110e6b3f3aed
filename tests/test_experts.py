"""Mixture-of-experts layers exported every expert over each token, in chunks of experts, or through
expert slots of a static capacity: the same numbers as transformers' own forms, a graph without
routing ops torch-mlir cannot lower, and expert ops that get verdicts. Tiny configurations here; real
sizes are benchmarks. Real transformers, real torch-mlir, real compiler, real XLA:CPU."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import transformers

from opbyop.config import REAL_SIZE, InputSpec, Zoo, ZooEntry
from opbyop.frontends.experts import CAPACITY, CHUNK_BYTES, EVERY_EXPERT, GROUPED, chunk_size, dispatch_slots, \
    expert_form, expert_modules, use_expert_form
from opbyop.frontends.models.hf import FirstOutput, meta_model, real_size
from opbyop.frontends.torch_export import export_torch
from opbyop.golden.replay import replay
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.pipeline import prepare, split_graph
from opbyop.records import OpRecord, Status

TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            attn_implementation="eager", experts_implementation="grouped_mm")
FAMILIES = {
    "Qwen3Moe": dict(num_key_value_heads=2, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16),
    "GptOss": dict(num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2, head_dim=8,
                   layer_types=["full_attention"] * 2),
    "DeepseekV3": dict(num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
                       first_k_dense_replace=1, n_group=2, topk_group=1, kv_lora_rank=16, q_lora_rank=16,
                       qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8),
    "Mixtral": dict(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_expert_in_chunks_computes_the_logits_of_transformers_grouped_form(family):
    model, ids = _tiny(family)
    with torch.no_grad():
        grouped = model(ids).logits
        per_expert = max(w[0].numel() * w.element_size() for n, w in model.named_parameters() if "experts" in n)
        assert use_expert_form(model, EVERY_EXPERT, budget=2 * per_expert) == EVERY_EXPERT
        chunked = model(ids).logits
    assert all(len(m.opbyop_chunks) == m.num_experts // 2 for m in expert_modules(model))  # chunks of two
    assert not any(n.endswith("experts.gate_up_proj") for n, _ in model.named_parameters())
    torch.testing.assert_close(chunked, grouped, rtol=1e-5, atol=1e-5)


def test_a_chunk_of_experts_holds_at_most_its_budget_and_divides_the_experts():
    model = real_size("qwen3-30b-a3b", layers=1, experts=GROUPED)  # 128 experts, gate_up 1536x2048 bf16
    (experts,) = expert_modules(model)
    assert chunk_size(experts) == 16 and 16 * 1536 * 2048 * 2 <= CHUNK_BYTES < 32 * 1536 * 2048 * 2
    mixtral = expert_modules(real_size("mixtral-8x7b", layers=1, experts=GROUPED))[0]
    assert chunk_size(mixtral) == 1  # one expert's gate_up is 224 MB: a chunk of one all the same


def test_a_form_chosen_for_a_model_is_kept_and_transformers_default_is_replaced():
    model = real_size("qwen3-30b-a3b", layers=1, experts=GROUPED)
    assert use_expert_form(model, EVERY_EXPERT, keep_chosen=True) == GROUPED
    config = transformers.Qwen3MoeConfig(**{**TINY, **FAMILIES["Qwen3Moe"]})
    default = transformers.Qwen3MoeForCausalLM(config)
    assert expert_form(default) == "grouped_mm"
    assert use_expert_form(default, EVERY_EXPERT, keep_chosen=True) == EVERY_EXPERT
    with pytest.raises(ValueError, match="unknown experts form 'ragged': one of every-expert, grouped-dense"):
        use_expert_form(default, "ragged")


def test_every_moe_model_of_the_real_size_zoo_is_tagged_with_the_form_it_is_built_in(zoo):
    moe = [m for m in zoo.tagged("moe") if REAL_SIZE in m.tags]
    assert {m.name for m in moe} >= {"qwen3-30b-a3b", "gpt-oss-20b", "deepseek-v2-lite", "deepseek-v3",
                                     "mixtral-8x7b"}
    for entry in moe:
        kwargs = {**entry.kwargs, "layers": 2}
        model = real_size(**kwargs)
        assert f"experts:{expert_form(model)}" in entry.tags, entry.name


@pytest.fixture(scope="module")
def tiny_moe():
    entry = ZooEntry(name="tiny-qwen3-moe", frontend="torch", factory="opbyop.frontends.models.hf:meta_model",
                     kwargs={"arch": "qwen3_moe", "dtype": "float32", "experts": EVERY_EXPERT,
                             **{k: v for k, v in TINY.items() if not k.endswith("implementation")},
                             **FAMILIES["Qwen3Moe"]},
                     inputs=[InputSpec(name="input_ids", shape=[1, 8], dtype="int64", high=64)])
    return prepare([entry.name], zoo=Zoo(models=[entry]))


def test_a_tiny_moe_exported_every_expert_has_no_routing_op_cut_out_and_its_expert_ops_succeed(tiny_moe, worker,
                                                                                               settings):
    run = tiny_moe
    assert not run.errors and not [r for r in run.records if r.frontend_error or r.split_error]
    experts = {r.signature for r in run.records if ".experts" in (r.provenance.module_path or "")}
    expert_ops = [op for op in run.unique if op.signature in experts]
    matmuls = [op for op in expert_ops if op.op_name == "stablehlo.dot_general"]
    # chunks of 8 experts x (2x16) x 32 by 32 x 8 tokens: the routed form's sort, gather and histc are gone
    assert matmuls and not any(op.op_name in ("stablehlo.sort", "stablehlo.gather") for op in expert_ops)
    results = [worker.analyze(op, settings) for op in expert_ops]
    assert all(r.status is Status.SUCCESS for r in results), [(r.op_name, r.status, r.message) for r in results]


ARCHS = {"Qwen3Moe": "qwen3_moe", "GptOss": "gpt_oss"}  # a family with weights (E, out, in), one (E, in, out)


def _tiny(family: str) -> tuple[torch.nn.Module, torch.Tensor]:
    """A tiny model of `family` with random weights, and 8 tokens of input."""
    torch.manual_seed(0)
    config = getattr(transformers, f"{family}Config")(**TINY, **FAMILIES[family])
    model = getattr(transformers, f"{family}ForCausalLM")(config).eval()
    for p in model.parameters():
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=0.1)  # biases stay as built, weights big enough to route unevenly
    return model, torch.randint(0, 64, (1, 8))


@pytest.mark.parametrize("family", FAMILIES)
def test_capacity_computes_the_logits_of_transformers_grouped_form_and_records_the_load_it_measured(family):
    model, ids = _tiny(family)
    with torch.no_grad():
        grouped = model(ids).logits
        per_expert = max(w[0].numel() * w.element_size() for n, w in model.named_parameters() if "experts" in n)
        assert use_expert_form(model, CAPACITY, budget=2 * per_expert) == "capacity-1.25"
        slots = model(ids).logits
    assert expert_form(model) == "capacity-max-load"
    loads = [m.opbyop_load for m in expert_modules(model)]
    # the weights route unevenly: some expert takes more than the mean (8 tokens x 2 / experts)
    assert any(load > math.ceil(8 * 2 / m.num_experts) for m, (_, load) in zip(expert_modules(model), loads))
    torch.testing.assert_close(slots, grouped, rtol=1e-5, atol=1e-5)


def test_a_token_past_its_experts_capacity_loses_that_expert_only():
    routed = torch.tensor([[1, 1, 0], [1, 0, 1], [1, 1, 0]], dtype=torch.float32)  # 3 tokens, 3 experts
    dispatch = dispatch_slots(routed, capacity=2)  # (tokens, experts, slots)
    assert dispatch[:, 0].tolist() == [[1, 0], [0, 1], [0, 0]]  # expert 0: tokens 0, 1; token 2 overflows
    assert dispatch[:, 1].tolist() == [[1, 0], [0, 0], [0, 1]]  # expert 1 keeps token 2
    assert dispatch[:, 2].tolist() == [[0, 0], [1, 0], [0, 0]]


def test_the_capacity_form_is_named_with_its_factor():
    config = transformers.Qwen3MoeConfig(**{**TINY, **FAMILIES["Qwen3Moe"]})
    assert use_expert_form(transformers.Qwen3MoeForCausalLM(config), "capacity-2") == "capacity-2"
    with pytest.raises(ValueError, match="unknown experts form 'capacity-x'.*capacity-FACTOR"):
        use_expert_form(transformers.Qwen3MoeForCausalLM(config), "capacity-x")


def _expert_multiply_adds(records: list[OpRecord]) -> int:
    """The multiply-adds of the experts' own matmuls (batched over experts; the dispatch's are not)."""
    total = 0
    for r in records:
        numbers = r.attributes.get("dot_dimension_numbers", {})
        if r.op_name == "stablehlo.dot_general" and ".experts" in (r.provenance.module_path or "") \
                and numbers.get("lhs_batching_dimensions"):
            lhs = r.operands[0].tensor.shape
            total += math.prod(r.outputs[0].shape) * math.prod(lhs[d] for d in numbers["lhs_contracting_dimensions"])
    return total


@pytest.mark.parametrize("family", ARCHS)
def test_a_meta_device_moe_exported_with_capacity_does_expert_work_proportional_to_tokens_times_top_k(family):
    config = {k: v for k, v in TINY.items() if not k.endswith("implementation")} | FAMILIES[family]
    work = {}
    for tokens in (16, 32):
        model = meta_model(ARCHS[family], dtype="float32", experts=CAPACITY, **config)
        assert expert_form(model) == "capacity-1.25"
        graph = export_torch(model, [torch.randint(0, 64, (1, tokens))], f"tiny-{family}-{tokens}")
        work[tokens] = _expert_multiply_adds(split_graph(graph).ops)
    (experts, *_), layers = expert_modules(model), config["num_hidden_layers"]
    per_expert_row = sum(p[0].numel() for n, p in experts.named_parameters() if p.dim() == 3)  # up + down
    slots = math.ceil(16 * 2 / experts.num_experts * 1.25)  # 16 tokens x top 2 over 8 experts, factor 1.25
    assert work[16] == layers * experts.num_experts * slots * per_expert_row
    assert work[32] == 2 * work[16]


@pytest.mark.parametrize("family", ARCHS)
def test_a_moe_with_weights_exported_with_capacity_keeps_the_measured_load_and_transformers_numbers(family):
    model, ids = _tiny(family)
    with torch.no_grad():
        grouped = model(ids).logits
    use_expert_form(model, CAPACITY)
    graph = export_torch(FirstOutput(model, "logits"), [ids], f"tiny-{family}")  # its eager run measures the load
    assert expert_form(model) == "capacity-max-load"
    split = split_graph(graph)
    loads = [load for _, load in (m.opbyop_load for m in expert_modules(model))]
    per_expert_row = sum(p[0].numel() for n, p in expert_modules(model)[0].named_parameters() if p.dim() == 3)
    assert _expert_multiply_adds(split.ops) == sum(loads) * expert_modules(model)[0].num_experts * per_expert_row
    (logits,) = replay(split, graph.argument_values, XlaCpu())
    np.testing.assert_allclose(logits, grouped.numpy(), rtol=1e-4, atol=1e-4)


def test_a_tiny_moe_exported_with_capacity_has_no_gather_or_sort_and_its_expert_ops_succeed(worker, settings):
    entry = ZooEntry(name="tiny-qwen3-moe-capacity", frontend="torch", factory="opbyop.frontends.models.hf:meta_model",
                     kwargs={"arch": "qwen3_moe", "dtype": "float32", "experts": CAPACITY,
                             **{k: v for k, v in TINY.items() if not k.endswith("implementation")},
                             **FAMILIES["Qwen3Moe"]},
                     inputs=[InputSpec(name="input_ids", shape=[1, 16], dtype="int64", high=64)])
    run = prepare([entry.name], zoo=Zoo(models=[entry]))
    assert not run.errors and not [r for r in run.records if r.frontend_error or r.split_error]
    experts = {r.signature for r in run.records if ".experts" in (r.provenance.module_path or "")}
    expert_ops = [op for op in run.unique if op.signature in experts]
    assert not any(op.op_name in ("stablehlo.sort", "stablehlo.gather", "stablehlo.scatter") for op in expert_ops)
    results = [worker.analyze(op, settings) for op in expert_ops]
    assert all(r.status is Status.SUCCESS for r in results), [(r.op_name, r.status, r.message) for r in results]
