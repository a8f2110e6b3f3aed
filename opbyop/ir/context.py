"""MLIR contexts that know every dialect a StableHLO module from torch-mlir or JAX may use."""

from __future__ import annotations

from jaxlib.mlir import ir


def make_context(allow_unregistered: bool = False) -> ir.Context:
    """A context with func, stablehlo, chlo, arith ... registered (a bare ir.Context knows none)."""
    from jax._src.interpreters import mlir as jax_mlir

    ctx = jax_mlir.make_ir_context()
    ctx.allow_unregistered_dialects = allow_unregistered
    return ctx
