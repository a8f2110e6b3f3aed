"""What a kernel sees."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from opbyop.device import fpu
from opbyop.device.program import Op, TensorType


# The fidelity a kernel sees when the chip's numerics are off: products and sums in plain f32.
EXACT = "exact"


class NotSimulated(Exception):
    """The executor has no implementation for this op (or this variant of it)."""


class Refused(Exception):
    """The program asks an op for what tt-metal cannot do (an empty output, say): the device's
    verdict, a run failure, in words that name the attribute at fault."""


@dataclass
class Call:
    op: Op
    inputs: list[np.ndarray | None]  # None for non-tensor operands (the device)
    out_types: list[TensorType | None]
    # False: the chip's numerics are off (no bf16/block-float rounding, no fidelity phases, no SFPU
    # approximations): the same kernel computes the op's plain meaning, to tell a kernel bug from numerics
    chip_numerics: bool = True

    @property
    def attrs(self) -> dict[str, Any]:
        return self.op.attrs

    def attr(self, name: str, default: Any = None) -> Any:
        return self.op.attrs.get(name, default)

    @property
    def tensors(self) -> list[np.ndarray]:
        return [x for x in self.inputs if x is not None]

    @property
    def out_shape(self) -> tuple[int, ...]:
        t = self.out_types[0]
        assert t is not None
        return t.shape

    @property
    def fidelity(self) -> tuple[str, bool]:
        """(math fidelity, fp32 accumulation) from the op's compute config; tt-mlir's defaults otherwise."""
        if not self.chip_numerics:
            return EXACT, True
        config = self.attr("compute_config") or {}
        if not isinstance(config, dict):
            config = {}
        return str(config.get("math_fidelity", "hifi4")), bool(config.get("fp32_dest_acc_en", True))


def packed(call: Call, out: np.ndarray) -> np.ndarray:
    """An FPU op's destination values as the packer writes its result (to bf16: half away from zero)."""
    t = call.out_types[0]
    return fpu.pack(np.asarray(out, np.float32), t.storage) if call.chip_numerics and t is not None else out


def shape_attr(value: Any) -> tuple[int, ...]:
    """`#ttnn.shape<4x128>` arrives as '4x128', a bare 1, or a list."""
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    if isinstance(value, int):
        return (value,)
    text = str(value).strip()
    return tuple(int(d) for d in text.split("x") if d) if text else ()


def as_float(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32) if np.asarray(x).dtype != np.float32 else np.asarray(x)
