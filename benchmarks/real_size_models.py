"""Real-size llama-style decoders as StableHLO, lowered from JAX with jax.ShapeDtypeStruct
arguments: the module holds the graph and every weight's shape and dtype, never a weight value.

    python benchmarks/real_size_models.py llama-3.1-8b --layers 2 -o llama8b.mlir
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DecoderConfig:
    """The published dimensions of a llama-style decoder (bf16 as Tenstorrent runs it)."""

    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    layers: int
    sequence: int = 128

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def parameters(self) -> int:
        per_layer = (self.hidden * self.hidden * 2 + self.hidden * self.head_dim * self.kv_heads * 2
                     + 3 * self.hidden * self.intermediate + 2 * self.hidden)
        return per_layer * self.layers + 2 * self.vocab * self.hidden + self.hidden


CONFIGS: dict[str, DecoderConfig] = {
    "llama-3.2-1b": DecoderConfig(hidden=2048, intermediate=8192, heads=32, kv_heads=8, vocab=128256, layers=16),
    "llama-3.1-8b": DecoderConfig(hidden=4096, intermediate=14336, heads=32, kv_heads=8, vocab=128256, layers=32),
    # one layer of llama-3.1-8B with a 1,000-token vocabulary: the largest case today's path was measured on
    "llama-3.1-8b-1layer-1k-vocab": DecoderConfig(hidden=4096, intermediate=14336, heads=32, kv_heads=8, vocab=1000,
                                                  layers=1),
    "llama-3.1-70b": DecoderConfig(hidden=8192, intermediate=28672, heads=64, kv_heads=8, vocab=128256, layers=80),
}


def stablehlo(config: DecoderConfig, layers: int | None = None) -> str:
    """The decoder's forward (embedding, `layers` decoder layers, final norm, lm_head) as StableHLO
    text; weights are @main arguments known by shape and dtype only."""
    from opbyop.jaxenv import prepare_jax

    prepare_jax()
    import jax
    import jax.numpy as jnp

    n = config.layers if layers is None else layers
    bf16, h, d = jnp.bfloat16, config.hidden, config.head_dim
    s, kv = config.sequence, config.kv_heads * config.head_dim

    def rms_norm(x, w):
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-5)
        return (x32.astype(bf16)) * w

    def rope(x, positions):
        half = x.shape[-1] // 2
        freqs = 1.0 / (500000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
        angles = positions[:, None].astype(jnp.float32) * freqs[None, :]
        cos, sin = jnp.cos(angles)[None, :, None, :], jnp.sin(angles)[None, :, None, :]
        x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
        return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(bf16)

    def layer(x, w, positions, mask):
        y = rms_norm(x, w["ln1"])
        q = (y @ w["wq"].T).reshape(1, s, config.heads, d)
        k = (y @ w["wk"].T).reshape(1, s, config.kv_heads, d)
        v = (y @ w["wv"].T).reshape(1, s, config.kv_heads, d)
        q, k = rope(q, positions), rope(k, positions)
        group = config.heads // config.kv_heads
        k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / (d ** 0.5)
        scores = jnp.where(mask, scores, -1e9)
        attn = jax.nn.softmax(scores, axis=-1).astype(bf16)
        out = jnp.einsum("bhqk,bkhd->bqhd", attn, v).reshape(1, s, h)
        x = x + out @ w["wo"].T
        y = rms_norm(x, w["ln2"])
        return x + (jax.nn.silu(y @ w["gate"].T) * (y @ w["up"].T)) @ w["down"].T

    def forward(tokens, embed, layer_weights, norm, head):
        x = embed[tokens]
        positions = jnp.arange(s)
        mask = positions[None, :] <= positions[:, None]
        for w in layer_weights:
            x = layer(x, w, positions, mask)
        return rms_norm(x, norm) @ head

    spec = jax.ShapeDtypeStruct
    # torch's nn.Linear layout (out, in), used as x @ w.T: the transposes torch's export has too
    one = {"ln1": spec((h,), bf16), "wq": spec((h, h), bf16), "wk": spec((kv, h), bf16), "wv": spec((kv, h), bf16),
           "wo": spec((h, h), bf16), "ln2": spec((h,), bf16), "gate": spec((config.intermediate, h), bf16),
           "up": spec((config.intermediate, h), bf16), "down": spec((h, config.intermediate), bf16)}
    args = (spec((1, s), jnp.int32), spec((config.vocab, h), bf16), [dict(one) for _ in range(n)],
            spec((h,), bf16), spec((h, config.vocab), bf16))
    return jax.jit(forward).lower(*args).as_text()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=sorted(CONFIGS))
    parser.add_argument("--layers", type=int, default=None, help="decoder layers (default: the model's)")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    args.output.write_text(stablehlo(CONFIGS[args.model], args.layers))


if __name__ == "__main__":
    main()
