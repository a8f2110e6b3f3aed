"""Transformer models built by `transformers` from a config object, random weights, never the hub."""

from __future__ import annotations

import os

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
