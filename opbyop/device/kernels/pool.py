"""What tt-metal's pool2d refuses before it pools (the pooling itself: matmul_conv's kernels).

tt-metal's generic pool2d (ttnn/cpp/ttnn/operations/pool/generic) validates its input and computes
its output's geometry from its own attributes; a program whose result type disagrees with that
geometry, or whose input tt-metal does not pool, fails on the device. The model says so, with the
attribute at fault, instead of stopping on a reshape of its own.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from opbyop.device.kernels import matmul_conv
from opbyop.device.kernels.base import Call, Refused


def _pool_rows(call: Call) -> tuple[int, int]:
    """(OH, OW) as tt-metal's pool2d computes them (pool/generic/generic_pools.cpp, pool2d_invoke via
    sliding_window's get_output_shape): a four-number padding read as (top, bottom, left, right), a
    two-number one as (height, width) on both sides; floor division (ceil_mode is not simulated)."""
    (kh, kw) = (int(k) for k in call.attr("kernel_size"))
    sh, sw = (int(v) for v in matmul_conv._pairs(call.attr("stride", [kh, kw]), 2))
    dh, dw = (int(v) for v in matmul_conv._pairs(call.attr("dilation", [1, 1]), 2))
    top, bottom, left, right = matmul_conv._four(call.attr("padding", [0, 0]))
    h, w = int(call.attr("input_height")), int(call.attr("input_width"))
    return (h + top + bottom - dh * (kh - 1) - 1) // sh + 1, (w + left + right - dw * (kw - 1) - 1) // sw + 1


def checked(name: str, kernel: Callable[[Call], list]) -> Callable[[Call], list]:
    """`kernel` after tt-metal's checks of a pool2d call:
    - its input in bf16 (pool/generic/device/pool_op.cpp, validate_pool2d: "Only BFLOAT16 supported for now");
    - its result type holding the rows tt-metal's output has (N * OH * OW): tt-metal writes that many
      rows whatever the program's type says, so the program's next op (a reshape to N x OH x OW x C)
      fails its volume check (reshape_common.cpp: "Invalid arguments to reshape")."""
    def kernel_with_checks(call: Call) -> list:
        operand = call.op.operand_types[0] if call.op.operand_types else None
        if call.chip_numerics and operand is not None and operand.storage != "bf16":
            raise Refused(f"{name} of a {operand.storage} tensor: tt-metal's pool2d takes bf16 input only "
                          "(pool_op.cpp: 'Only BFLOAT16 supported for now'); typecast the input to bf16 first")
        oh, ow = _pool_rows(call)
        rows = int(call.attr("batch_size")) * oh * ow
        want = int(np.prod(call.out_shape)) // max(1, int(call.attr("channels")))
        if rows != want:
            raise Refused(f"{name} with padding {list(call.attr('padding'))}: tt-metal reads four paddings as "
                          f"(top, bottom, left, right) and pools to {oh}x{ow} ({rows} rows), the program's result "
                          f"type holds {want} rows; the padding is in another order (the compiler's lowering) and "
                          "the reshape after the pool fails on the device")
        return kernel(call)
    return kernel_with_checks


POOLS = ("ttnn.max_pool2d", "ttnn.avg_pool2d", "ttnn.max_pool2d_with_indices")

KERNELS: dict[str, Callable[[Call], list]] = {name: checked(name, matmul_conv.KERNELS[name]) for name in POOLS}
