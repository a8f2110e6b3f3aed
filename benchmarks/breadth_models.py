"""Every architecture of the installed transformers, built from its configuration shrunk to a tiny size.

`breadth_models:<model_type>` is a factory (what `opbyop analyze` takes): the architecture's base
model (AutoModel) from `AutoConfig.for_model(model_type)` with its sizes shrunk (SHRINK, applied to
every size the configuration and its sub-configurations name), random weights, eval mode, and example
inputs chosen from what its forward takes first (token ids, pixels, audio). An encoder-decoder gets
decoder token ids too, through a wrapper whose forward takes them positionally.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoConfig, AutoModel, PretrainedConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

SEQUENCE = 8
SHRINK: dict[str, Any] = {
    "hidden_size": 64, "d_model": 64, "n_embd": 64, "embed_dim": 64, "dim": 64, "hidden_dim": 64,
    "num_hidden_layers": 1, "n_layer": 1, "n_layers": 1, "num_layers": 1, "encoder_layers": 1, "decoder_layers": 1,
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4, "encoder_attention_heads": 4,
    "decoder_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16,
    "intermediate_size": 64, "ffn_dim": 64, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "n_inner": 64, "d_ff": 64,
    "vocab_size": 128, "max_position_embeddings": 64, "n_positions": 64,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "first_k_dense_replace": 0,
    "image_size": 32, "patch_size": 8, "num_channels": 3,
    "use_cache": False,
}


def architectures() -> list[str]:
    """Model types that have a base model class in this transformers."""
    return sorted(t for t in CONFIG_MAPPING_NAMES if t in MODEL_MAPPING_NAMES)


def _shrunk(values: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in values.items():
        if key in SHRINK and not isinstance(value, (list, dict)) and value is not None:
            out[key] = SHRINK[key]
        elif key.endswith("_token_id") and isinstance(value, int) and value >= SHRINK["vocab_size"]:
            out[key] = 1  # a special token inside the shrunk vocabulary (a padding index must be)
        elif isinstance(value, dict) and "model_type" in value:  # a sub-configuration (text, vision ...)
            out[key] = {**value, **_shrunk(value)}
    layers = out.get("num_hidden_layers")
    if layers is not None and isinstance(values.get("layer_types"), list):
        out["layer_types"] = values["layer_types"][:layers]
    return out


def tiny_config(model_type: str) -> PretrainedConfig:
    default = AutoConfig.for_model(model_type).to_dict()
    config = AutoConfig.for_model(model_type, **_shrunk(default))
    config._attn_implementation = "eager"
    return config


class _Positional(torch.nn.Module):
    """forward(*inputs) = model(**{names: inputs}), returning the output's tensors."""

    def __init__(self, model: torch.nn.Module, names: list[str]):
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(**dict(zip(self.names, inputs)))
        values = out.values() if hasattr(out, "values") else (out if isinstance(out, tuple) else (out,))
        return tuple(v for v in values if isinstance(v, torch.Tensor))


def _input(name: str, config: PretrainedConfig) -> torch.Tensor | None:
    vision = getattr(config, "vision_config", None) or config
    if name in ("input_ids", "decoder_input_ids"):
        vocab = getattr(config, "vocab_size", None) or getattr(getattr(config, "text_config", None), "vocab_size", 128)
        return torch.randint(0, min(int(vocab), 128), (1, SEQUENCE))
    if name == "pixel_values":
        size = getattr(vision, "image_size", 32)
        size = size[0] if isinstance(size, (list, tuple)) else size
        return torch.randn(1, getattr(vision, "num_channels", 3), int(size), int(size))
    if name == "input_values":
        return torch.randn(1, 4000)
    if name == "input_features":
        return torch.randn(1, getattr(config, "num_mel_bins", 80), 3000)
    return None


def build(model_type: str) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    torch.manual_seed(0)
    config = tiny_config(model_type)
    model = AutoModel.from_config(config).eval()
    names = [model.main_input_name]
    if getattr(config, "is_encoder_decoder", False) and names[0] != "decoder_input_ids":
        names.append("decoder_input_ids")
    inputs = [_input(n, config) for n in names]
    if any(x is None for x in inputs):
        raise ValueError(f"no example input known for {names}")
    return _Positional(model, names).eval(), inputs


def runs_eagerly(model_type: str) -> str | None:
    """None when the tiny model builds and runs; else why not."""
    try:
        model, inputs = build(model_type)
        with torch.no_grad():
            model(*inputs)
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return None


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)

    def factory() -> tuple[torch.nn.Module, list[torch.Tensor]]:
        return build(name)

    factory.__name__ = name
    return factory
