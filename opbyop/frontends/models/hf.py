"""Transformer models built by `transformers` from a config object, random weights, never the hub."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no network: a hub lookup would hang, then fail


class FirstOutput(nn.Module):
    """Return one tensor (logits or last hidden state) instead of a ModelOutput."""

    def __init__(self, model: nn.Module, field: str):
        super().__init__()
        self.model = model
        self.field = field

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(*inputs), self.field)


def bert(seed: int = 0, hidden: int = 128, layers: int = 2, heads: int = 2, intermediate: int = 512,
         vocab: int = 1000) -> nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=intermediate,
                        max_position_embeddings=512, attn_implementation="eager")
    return FirstOutput(BertModel(config, add_pooling_layer=False), "last_hidden_state")


def gpt2(seed: int = 0, hidden: int = 128, layers: int = 2, heads: int = 2, vocab: int = 1000) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    # sdpa attention fails inside torch 2.13's run_decompositions; eager attention exports.
    config = GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads,
                        n_positions=256, attn_implementation="eager")
    return FirstOutput(GPT2LMHeadModel(config), "logits")


def llama(seed: int = 0, hidden: int = 128, layers: int = 2, heads: int = 4, kv_heads: int = 2,
          intermediate: int = 344, vocab: int = 1000) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads,
                         intermediate_size=intermediate, max_position_embeddings=256,
                         attn_implementation="eager")
    return FirstOutput(LlamaForCausalLM(config), "logits")


def vit(seed: int = 0, image: int = 32, patch: int = 8, hidden: int = 128, layers: int = 2,
        heads: int = 2, intermediate: int = 256) -> nn.Module:
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(seed)
    config = ViTConfig(image_size=image, patch_size=patch, hidden_size=hidden, num_hidden_layers=layers,
                       num_attention_heads=heads, intermediate_size=intermediate,
                       attn_implementation="eager")
    return FirstOutput(ViTModel(config, add_pooling_layer=False), "last_hidden_state")


# Published configurations of the LLMs Tenstorrent brings up (their config.json numbers). Built on the
# meta device: the graph and its op shapes, never the weights (llama-3.1-70B is 141 GB in bf16).
_LLAMA31_ROPE = dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                     original_max_position_embeddings=8192)
REAL_SIZE: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": dict(arch="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                         num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                         max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
                         rope_parameters=dict(_LLAMA31_ROPE)),
    "llama-3.1-70b": dict(arch="llama", vocab_size=128256, hidden_size=8192, intermediate_size=28672,
                          num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
                          max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
                          rope_parameters=dict(_LLAMA31_ROPE)),
    "qwen2.5-7b": dict(arch="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                       num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                       max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
                       rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
    "mistral-7b": dict(arch="mistral", vocab_size=32768, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                       max_position_embeddings=32768, rms_norm_eps=1e-5, tie_word_embeddings=False,
                       sliding_window=None, rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
    "mixtral-8x7b": dict(arch="mixtral", vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                         num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                         num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=32768,
                         rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=None,
                         rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
    "qwen3-30b-a3b": dict(arch="qwen3_moe", vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                          moe_intermediate_size=768, num_hidden_layers=48, num_attention_heads=32,
                          num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
                          norm_topk_prob=True, max_position_embeddings=40960, rms_norm_eps=1e-6,
                          tie_word_embeddings=False, rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
    "gpt-oss-20b": dict(arch="gpt_oss", vocab_size=201088, hidden_size=2880, intermediate_size=2880,
                        num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                        num_local_experts=32, num_experts_per_tok=4, sliding_window=128, swiglu_limit=7.0,
                        attention_bias=True, max_position_embeddings=131072, rms_norm_eps=1e-5,
                        tie_word_embeddings=False,
                        rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0,
                                             beta_slow=1.0, original_max_position_embeddings=4096, truncate=False)),
    "deepseek-v2-lite": dict(arch="deepseek_v2", vocab_size=102400, hidden_size=2048, intermediate_size=10944,
                             moe_intermediate_size=1408, num_hidden_layers=27, num_attention_heads=16,
                             num_key_value_heads=16, n_shared_experts=2, n_routed_experts=64, num_experts_per_tok=6,
                             first_k_dense_replace=1, kv_lora_rank=512, q_lora_rank=None, qk_nope_head_dim=128,
                             qk_rope_head_dim=64, v_head_dim=128, topk_method="greedy", n_group=1, topk_group=1,
                             routed_scaling_factor=1.0, norm_topk_prob=False, max_position_embeddings=163840,
                             rms_norm_eps=1e-6, tie_word_embeddings=False,
                             rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, beta_fast=32.0,
                                                  beta_slow=1.0, mscale=0.707, mscale_all_dim=0.707,
                                                  original_max_position_embeddings=4096)),
    "deepseek-v3": dict(arch="deepseek_v3", vocab_size=129280, hidden_size=7168, intermediate_size=18432,
                        moe_intermediate_size=2048, num_hidden_layers=61, num_attention_heads=128,
                        num_key_value_heads=128, n_shared_experts=1, n_routed_experts=256, num_experts_per_tok=8,
                        first_k_dense_replace=3, kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128,
                        qk_rope_head_dim=64, v_head_dim=128, n_group=8, topk_group=4, routed_scaling_factor=2.5,
                        norm_topk_prob=True, max_position_embeddings=163840, rms_norm_eps=1e-6,
                        tie_word_embeddings=False,
                        rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, beta_fast=32.0,
                                             beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0,
                                             original_max_position_embeddings=4096)),
    "gemma-2-9b": dict(arch="gemma2", vocab_size=256000, hidden_size=3584, intermediate_size=14336,
                       num_hidden_layers=42, num_attention_heads=16, num_key_value_heads=8, head_dim=256,
                       query_pre_attn_scalar=256, sliding_window=4096, final_logit_softcapping=30.0,
                       attn_logit_softcapping=50.0, hidden_activation="gelu_pytorch_tanh",
                       max_position_embeddings=8192, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
    # transformers' Qwen3.5-MoE text configuration is Qwen3.5-35B-A3B's (its defaults)
    "qwen3.5-35b-a3b": dict(arch="qwen3_5_moe", vocab_size=248320, hidden_size=2048, num_hidden_layers=40,
                            num_attention_heads=16, num_key_value_heads=2, head_dim=256, moe_intermediate_size=512,
                            shared_expert_intermediate_size=512, num_experts=256, num_experts_per_tok=8,
                            max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
                            use_cache=False),  # a cache of linear-attention layers alone cannot say its length
    "whisper-large-v3-encoder": dict(arch="whisper-encoder", d_model=1280, encoder_layers=32,
                                     encoder_attention_heads=20, encoder_ffn_dim=5120, num_mel_bins=128,
                                     max_source_positions=1500, vocab_size=51866),
}

_CAUSAL_LM = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
              "mistral": ("MistralConfig", "MistralForCausalLM"), "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
              "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"), "gpt_oss": ("GptOssConfig", "GptOssForCausalLM"),
              "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM"),
              "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM"),
              "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
              "qwen3_5_moe": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM")}
_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def real_size(name: str, layers: int | None = None, dtype: str = "bfloat16", experts: str | None = None,
              **overrides: Any) -> nn.Module:
    """A published configuration from REAL_SIZE on the meta device (`layers` overrides the depth,
    `overrides` any other field, e.g. first_k_dense_replace to keep a MoE layer in a short model)."""
    if name not in REAL_SIZE:
        raise ValueError(f"no real-size configuration named {name!r}; known: {', '.join(REAL_SIZE)}")
    config = {**REAL_SIZE[name], **overrides}
    arch = config.pop("arch")
    if layers is not None:
        config["encoder_layers" if arch == "whisper-encoder" else "num_hidden_layers"] = layers
    return meta_model(arch, dtype=dtype, experts=experts, **config)


def meta_model(arch: str, dtype: str = "bfloat16", experts: str | None = None, **config: Any) -> nn.Module:
    """A transformers model of `arch` (one of _CAUSAL_LM's, or whisper-encoder) built from `config`
    on the meta device: weights known by shape and dtype, buffers real (rebuilt on the CPU from the
    configuration: rotary frequencies are what position chains are computed from). A mixture of
    experts is exported in the form `experts` names (opbyop.frontends.experts.FORMS, or capacity-FACTOR;
    None: its DEFAULT_FORM)."""
    # transformers and the experts' forms (which register with it): loaded only when a model is built
    import transformers

    from opbyop.frontends.experts import use_expert_form

    if arch == "whisper-encoder":
        config_class, model_class = transformers.WhisperConfig, transformers.models.whisper.modeling_whisper.WhisperEncoder
        field = "last_hidden_state"
    elif arch in _CAUSAL_LM:
        config_class, model_class = (getattr(transformers, n) for n in _CAUSAL_LM[arch])
        field = "logits"
    else:
        raise ValueError(f"unknown architecture {arch!r}: one of {', '.join([*_CAUSAL_LM, 'whisper-encoder'])}")
    settings = config_class(attn_implementation="eager", **config)
    with torch.device("meta"):
        model = model_class(settings).to(_DTYPES[dtype])
    _real_buffers(model, settings)
    use_expert_form(model, experts)
    return FirstOutput(model, field)


def _real_buffers(model: nn.Module, config: Any) -> None:
    """Rebuild on the CPU each parameterless submodule whose buffers are on the meta device and that
    is made from the configuration alone (transformers' rotary embeddings)."""
    for name, sub in list(model.named_modules()):
        if not name or not any(b.is_meta for b in sub.buffers(recurse=False)) or any(True for _ in sub.parameters()):
            continue
        try:
            rebuilt = type(sub)(config=config)
        except TypeError:  # not built from the configuration alone: its buffers stay shape-only
            continue
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr, rebuilt)
