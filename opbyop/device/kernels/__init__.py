"""Numerical implementations of TTNN ops, one function per op, looked up by op name.

A kernel receives a Call (host values of the inputs, attributes, result types, compute config)
and returns the result values in f32/int numpy arrays; the executor stores them in the result's
data format (bf16 rounding, block floating point ...) and accounts memory and cost.
"""

from __future__ import annotations

from typing import Callable

from opbyop.device.kernels.base import Call
from opbyop.device.kernels import creation, data_movement, eltwise, indexing, matmul_conv, pool, reduction

Kernel = Callable[[Call], list]

KERNELS: dict[str, Kernel] = {
    **eltwise.KERNELS,
    **reduction.KERNELS,
    **data_movement.KERNELS,
    **indexing.KERNELS,
    **creation.KERNELS,
    **matmul_conv.KERNELS,
    **pool.KERNELS,
}

# Kernels that take stored values in any storage format (bf16 held as bf16): they move values
# without arithmetic, or convert block by block themselves. Every other kernel sees bf16 as f32,
# so a gigabyte bf16 operand is never copied whole to f32 by an op that only moves it.
STORAGE_KERNELS = frozenset({*data_movement.STORAGE_KERNELS, *matmul_conv.STORAGE_KERNELS, "ttnn.rows_gather"})

__all__ = ["Call", "KERNELS", "Kernel", "STORAGE_KERNELS"]
