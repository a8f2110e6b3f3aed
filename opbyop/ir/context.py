"""MLIR contexts that know every dialect a StableHLO module from torch-mlir or JAX may use."""

from __future__ import annotations

from jaxlib.mlir import ir

# Parses a reused context serves before it is made anew: a context keeps every type and attribute it
# ever interned (2,000 distinct op programs grew a process by 5 MB, against 1.6 MB with a context each).
RENEW_AFTER = 2048


def make_context(allow_unregistered: bool = False) -> ir.Context:
    """A context with func, stablehlo, chlo, arith ... registered (a bare ir.Context knows none)."""
    from jax._src.interpreters import mlir as jax_mlir

    ctx = jax_mlir.make_ir_context()
    ctx.allow_unregistered_dialects = allow_unregistered
    return ctx


class ReusedContext:
    """One context for many parses, made anew every RENEW_AFTER of them. A new context costs more than
    the parse of a single op's program: 4.5 ms a program with a context each, 0.9 ms with one reused
    (benchmarks/bench_program_load.py --workspace, 2,000 programs of a breadth run)."""

    def __init__(self, allow_unregistered: bool = False, renew_after: int = RENEW_AFTER):
        self._allow_unregistered = allow_unregistered
        self._renew_after = renew_after
        self._ctx: ir.Context | None = None
        self._served = 0

    def get(self) -> ir.Context:
        """The context for the next parse."""
        if self._ctx is None or self._served >= self._renew_after:
            self._ctx, self._served = make_context(self._allow_unregistered), 0
        self._served += 1
        return self._ctx
