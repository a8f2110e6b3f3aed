"""A transformers causal LM as two programs with static shapes: prefill and one decode step.

Both are torch modules around the same model (same parameter names, so the same weights feed
both programs), exported with the torch frontend (weights as @main arguments):

    prefill(input_ids[1, P])                    -> token[1, 1], position[1, 1], key0, value0, key1, ...
    decode(token[1, 1], position[1, 1], key0, value0, ...) -> the same outputs, one position later

The key/value cache of every layer has a fixed length L ([1, kv heads, L, head dim]): prefill writes
positions 0..P-1 and zeros after them, each decode step writes its own position (a one-hot `where`,
no in-place op) and attends to positions <= its own through an additive mask, as transformers'
StaticCache does. The greedy choice (argmax) happens in the program, so a decode step's outputs
are exactly the next step's inputs: the whole loop can stay on the device.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from opbyop.config import Zoo, load_zoo
from opbyop.errors import OpbyopError
from opbyop.frontends import loader
from opbyop.graph import ArgumentKind, ModelGraph
from opbyop.frontends.torch_export import export_torch

_NOT_AN_LM_FIX = ("decode the zoo's gpt2 or llama, or a package.module:factory that returns a transformers causal LM "
                  "(a ...ForCausalLM / ...LMHeadModel)")


@dataclass
class CausalLM:
    name: str
    model: nn.Module  # a transformers causal LM (GenerationMixin), eager attention
    layers: int
    max_positions: int
    vocab: int


def load_causal_lm(spec: str, seed: int = 0, zoo: Zoo | None = None) -> CausalLM:
    """The transformers causal LM behind a zoo name or a `package.module:factory` (seeded weights)."""
    zoo = zoo or load_zoo()
    if spec in zoo.names():
        entry = zoo.get(spec)
    elif ":" in spec:
        entry = loader.factory_entry(spec, [])
    else:
        zoo.get(spec)  # raises UnknownModelError listing the zoo
        raise AssertionError("unreachable")
    if entry.factory is None:
        raise OpbyopError(f"{entry.name} is a StableHLO file, not a causal language model", _NOT_AN_LM_FIX)
    made = loader._make(loader._import_factory(entry.factory), entry, seed)
    if isinstance(made, tuple):  # (model, example inputs): decode draws its own prompt
        made = made[0]
    return as_causal_lm(entry.name, made)


def as_causal_lm(name: str, made: Any) -> CausalLM:
    """`made` itself, or the model it wraps (the zoo's FirstOutput), when it is a causal LM."""
    from transformers import GenerationMixin

    model = getattr(made, "model", None) if not isinstance(made, GenerationMixin) else made
    config = getattr(model, "config", None)
    if not isinstance(model, GenerationMixin) or not hasattr(config, "num_hidden_layers"):
        raise OpbyopError(f"{name} is not a causal language model ({type(made).__name__}): decoding needs one",
                          _NOT_AN_LM_FIX)
    model = model.eval()
    # sdpa attention does not export (torch 2.13's run_decompositions fails on it); eager takes the additive 4D mask as is
    model.config._attn_implementation = "eager"
    return CausalLM(name=name, model=model, layers=config.num_hidden_layers,
                    max_positions=int(config.max_position_embeddings), vocab=int(config.vocab_size))


class StaticKV:
    """A key/value cache of fixed length per layer, written functionally (torch.export keeps no
    state): what transformers' attention layers call `update` on."""

    def __init__(self, length: int, keys: list[torch.Tensor | None], values: list[torch.Tensor | None],
                 position: torch.Tensor | None = None):
        self.length, self.keys, self.values, self.position = length, list(keys), list(values), position

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int,
               cache_kwargs: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.position is None:  # prefill: the prompt's entries, zeros after them
            pad = key.new_zeros(key.shape[0], key.shape[1], self.length - key.shape[2], key.shape[3])
            self.keys[layer_idx] = torch.cat([key, pad], 2)
            self.values[layer_idx] = torch.cat([value, pad], 2)
        else:  # one decode step: its own position only
            slot = (torch.arange(self.length) == self.position.reshape(())).view(1, 1, self.length, 1)
            self.keys[layer_idx] = torch.where(slot, key, self.keys[layer_idx])
            self.values[layer_idx] = torch.where(slot, value, self.values[layer_idx])
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions come explicitly (position_ids); never inferred from the cache

    def outputs(self) -> list[torch.Tensor]:
        return [t for kv in zip(self.keys, self.values) for t in kv]


def _greedy(lm: nn.Module, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
            cache: StaticKV) -> torch.Tensor:
    logits = lm(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                use_cache=True).logits
    return torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)


class Prefill(nn.Module):
    def __init__(self, lm: nn.Module, layers: int, length: int):
        super().__init__()
        self.lm, self.layers, self.length = lm, layers, length

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        prompt = input_ids.shape[1]
        keys = torch.arange(self.length).view(1, -1)
        queries = torch.arange(prompt).view(-1, 1)
        mask = torch.where(keys <= queries, 0.0, torch.finfo(torch.float32).min).view(1, 1, prompt, self.length)
        cache = StaticKV(self.length, [None] * self.layers, [None] * self.layers)
        token = _greedy(self.lm, input_ids, mask, torch.arange(prompt).view(1, -1), cache)
        return (token, torch.full((1, 1), prompt, dtype=torch.int64), *cache.outputs())


class DecodeStep(nn.Module):
    def __init__(self, lm: nn.Module, layers: int, length: int):
        super().__init__()
        self.lm, self.layers, self.length = lm, layers, length

    def forward(self, token: torch.Tensor, position: torch.Tensor, *cache: torch.Tensor) -> tuple[torch.Tensor, ...]:
        keys = torch.arange(self.length).view(1, 1, 1, -1)
        mask = torch.where(keys <= position.view(1, 1, 1, 1), 0.0, torch.finfo(torch.float32).min)
        kv = StaticKV(self.length, list(cache[0::2]), list(cache[1::2]), position)
        nxt = _greedy(self.lm, token, mask, position, kv)
        return (nxt, position + 1, *kv.outputs())


def input_names(layers: int) -> list[str]:
    """The decode step's inputs (and, in the same order, every program's outputs)."""
    return ["token", "position"] + [f"{kind}{i}" for i in range(layers) for kind in ("key", "value")]


def framework_greedy(lm: CausalLM, prompt: np.ndarray, new_tokens: int) -> list[int]:
    """transformers' own greedy generation (its DynamicCache, its masks): the reference. No stop at
    the end-of-sequence token: the device loop runs a fixed number of steps too."""
    config = copy.deepcopy(lm.model.generation_config)
    config.do_sample, config.max_new_tokens, config.min_new_tokens = False, new_tokens, None
    config.eos_token_id, config.pad_token_id = None, 0
    with torch.no_grad():
        out = lm.model.generate(torch.from_numpy(prompt), generation_config=config)
    return [int(t) for t in out[0, prompt.shape[1]:]]


@dataclass
class TorchDecode:
    """The two wrappers run by torch itself: their tokens and the cache after the last step."""

    tokens: list[int]
    final_cache: list[np.ndarray]


def torch_decode(lm: CausalLM, prompt: np.ndarray, steps: int, length: int) -> TorchDecode:
    prefill, step = Prefill(lm.model, lm.layers, length), DecodeStep(lm.model, lm.layers, length)
    with torch.no_grad():
        outputs = prefill(torch.from_numpy(prompt))
        tokens = [int(outputs[0])]
        for _ in range(steps):
            outputs = step(*outputs)
            tokens.append(int(outputs[0]))
    return TorchDecode(tokens, [t.numpy().copy() for t in outputs[2:]])


@dataclass
class DecodeGraphs:
    prefill: ModelGraph
    decode: ModelGraph
    inputs: list[str]  # the decode step's own inputs, before the weights
    weights: list[str]  # parameter names, the same (in the same order) for both programs

    def weight_values(self) -> list[np.ndarray]:
        return [v for v, a in zip(self.prefill.argument_values or [], self.prefill.arguments)
                if a.kind is ArgumentKind.PARAMETER]


def export_programs(lm: CausalLM, prompt: np.ndarray, length: int) -> DecodeGraphs:
    """Prefill and decode step exported to StableHLO (torch-mlir), weights as @main arguments."""
    prefill = Prefill(lm.model, lm.layers, length)
    step = DecodeStep(lm.model, lm.layers, length)
    ids = torch.from_numpy(prompt)
    with torch.no_grad():
        example = list(prefill(ids))  # the decode step's example inputs: what prefill hands it
    names = input_names(lm.layers)
    prefill_graph = export_torch(prefill, [ids], f"{lm.name}-prefill", ["input_ids"])
    decode_graph = export_torch(step, example, f"{lm.name}-decode", names)
    weights = [a.name for a in prefill_graph.arguments if a.kind is ArgumentKind.PARAMETER]
    decode_weights = [a.name for a in decode_graph.arguments if a.kind is ArgumentKind.PARAMETER]
    if weights != decode_weights:  # both programs must take the very same weights, in one order
        raise OpbyopError(f"{lm.name}: prefill and decode step take different weights "
                          f"({len(weights)} and {len(decode_weights)})", "report this: it is a bug in opbyop.decode")
    return DecodeGraphs(prefill_graph, decode_graph, names, weights)
