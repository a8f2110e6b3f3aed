"""Numerical implementations of TTNN ops, one function per op, looked up by op name.

A kernel receives a Call (host values of the inputs, attributes, result types, compute config)
and returns the result values in f32/int numpy arrays; the executor stores them in the result's
data format (bf16 rounding, block floating point ...) and accounts memory and cost.
"""

from __future__ import annotations

from typing import Callable

from opbyop.device.kernels.base import Call
from opbyop.device.kernels import creation, data_movement, eltwise, indexing, matmul_conv, reduction

Kernel = Callable[[Call], list]

KERNELS: dict[str, Kernel] = {
    **eltwise.KERNELS,
    **reduction.KERNELS,
    **data_movement.KERNELS,
    **indexing.KERNELS,
    **creation.KERNELS,
    **matmul_conv.KERNELS,
}

__all__ = ["Call", "KERNELS", "Kernel"]
