"""JAX functions for the zoo (JAX lowers to StableHLO natively)."""

from __future__ import annotations

from typing import Callable

import numpy as np


def mlp(seed: int = 0) -> Callable:
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((32, 64)).astype(np.float32) * 0.2
    w2 = rng.standard_normal((64, 16)).astype(np.float32) * 0.2

    def f(x):
        h = jnp.tanh(x @ w1)
        return jnp.exp(h @ w2).sum(axis=-1)

    return f
