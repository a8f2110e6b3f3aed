"""Ops that create tensors on the device."""

from __future__ import annotations

from typing import Callable

import numpy as np

from opbyop.device.kernels.base import Call
from opbyop.device.program import dense_values


def _full(value: float | None) -> Callable[[Call], list]:
    def kernel(call: Call) -> list:
        fill = call.attr("fill_value", 0.0) if value is None else value
        # an integer fill keeps its bits in an unsigned tensor (-7 into u32 is 2**32 - 7), as a cast does
        kind = np.int64 if isinstance(fill, (int, np.integer)) and not isinstance(fill, bool) else np.float64
        return [np.full(call.out_shape, fill, dtype=kind)]
    return kernel


def _arange(call: Call) -> list:
    start, end, step = (int(call.attr(k, d)) for k, d in (("start", 0), ("end", 0), ("step", 1)))
    return [np.arange(start, end, step).reshape(call.out_shape)]


def _constant(call: Call) -> list:
    return [dense_values(call.op.raw["value"]).reshape(call.out_shape)]


def _rand(call: Call) -> list:
    """ttnn.rand: uniform in [low, high) from the op's seed. The chip's generator is not the host's:
    the values are random alike, never equal (no golden can compare them)."""
    rng = np.random.default_rng(int(call.attr("seed", 0)))
    low, high = float(call.attr("low", 0.0)), float(call.attr("high", 1.0))
    return [rng.uniform(low, high, size=call.out_shape)]


def _rng_bit_generator(call: Call) -> list:
    """ttnn.rng_bit_generator: random bits and the next state, from the state's words. The chip's
    generator is not XLA's: the bits are random alike, never equal (no golden can compare them)."""
    state = np.asarray(call.tensors[0]).astype(np.uint64)
    rng = np.random.default_rng([int(w) for w in state.reshape(-1)])
    out_type = call.out_types[1]
    assert out_type is not None
    bits = rng.integers(0, 2 ** 32, size=out_type.shape, dtype=np.uint64)
    return [(state + np.uint64(1)).astype(np.uint32).reshape(call.out_shape), bits]


KERNELS: dict[str, Callable[[Call], list]] = {
    "ttnn.full": _full(None), "ttnn.zeros": _full(0.0), "ttnn.ones": _full(1.0), "ttnn.empty": _full(0.0),
    "ttnn.arange": _arange, "ttnn.constant": _constant, "ttnn.rand": _rand,
    "ttnn.rng_bit_generator": _rng_bit_generator,
}
