"""XLA:CPU's reference for a matmul too large to run whole: the same op on blocks of its largest operand.

XLA:CPU computes a bf16 dot_general in f32: it converts both operands first, so llama-3.1-70B's
lm_head (128x8192 by 8192x128256 bf16, a 2.1 GB weight) needs a 4.2 GB f32 temporary beside the
operands. A free dimension of an operand (neither batched nor contracted) maps to one dimension of the
result, and every result element along it depends only on its own slice: the op run on slices of that
dimension, each result written into its place, is the op's result, with the memory of one block.
Each element is the same contraction over the same values; only the matrix library's blocking may
differ between shapes (tests/test_golden_blocked.py compares both paths).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from opbyop.golden.xla_cpu import XlaCpu
from opbyop.ir.context import make_context
from opbyop.ir.rewrite import body_ops, main_func
from opbyop.op_memory import tensor_bytes
from opbyop.records import UniqueOp

# An operand above this many bytes is split: a block's operand, and XLA's f32 copy of it, stay near this size.
BLOCK_BYTES = 1 << 27


@dataclass(frozen=True)
class Blocking:
    """How to split a dot_general: `argument`'s dimension `dim` (its result dimension `result_dim`) in
    blocks of `size` (the last one smaller)."""

    argument: int
    dim: int
    result_dim: int
    size: int
    extent: int


def dot_blocking(op: UniqueOp, block_bytes: int = BLOCK_BYTES) -> Blocking | None:
    """The blocking of a single-op dot_general module whose largest operand exceeds `block_bytes`
    (both operands arguments of @main, one result); None when it is run whole."""
    if op.op_name != "stablehlo.dot_general" or len(op.outputs) != 1 or len(op.operands) != 2:
        return None
    if any(o.argument is None for o in op.operands) or op.mesh is not None:
        return None  # a sharded op runs on a host mesh as it is
    numbers = op.attributes.get("dot_dimension_numbers", {})
    side = max((0, 1), key=lambda i: tensor_bytes(op.operands[i].tensor))
    operand = op.operands[side].tensor
    total = tensor_bytes(operand)
    if total <= block_bytes:
        return None
    prefix = "lhs" if side == 0 else "rhs"
    taken = set(numbers.get(f"{prefix}_batching_dimensions", [])) | set(numbers.get(f"{prefix}_contracting_dimensions", []))
    free = [d for d in range(len(operand.shape)) if d not in taken]
    if not free:
        return None
    dim = max(free, key=lambda d: operand.shape[d])
    extent = operand.shape[dim]
    size = max(1, extent * block_bytes // total)
    if size >= extent:
        return None
    batch = len(numbers.get("lhs_batching_dimensions", []))
    if side == 0:
        result_dim = batch + free.index(dim)
    else:
        lhs = op.operands[0].tensor
        lhs_taken = (set(numbers.get("lhs_batching_dimensions", []))
                     | set(numbers.get("lhs_contracting_dimensions", [])))
        result_dim = batch + (len(lhs.shape) - len(lhs_taken)) + free.index(dim)
    return Blocking(op.operands[side].argument, dim, result_dim, size, extent)


def block_module(module_text: str, blocking: Blocking, size: int) -> str:
    """The single-op module with `blocking.argument`'s dimension (and its result dimension) `size` long."""
    from jaxlib.mlir import ir

    with make_context() as ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse(module_text)
        main = main_func(module, "block")
        block = main.regions[0].blocks[0]
        arg = block.arguments[blocking.argument]
        arg.set_type(_resized(arg.type, blocking.dim, size))
        dot = next(o for o in body_ops(main) if o.name == "stablehlo.dot_general")
        result = dot.results[0]
        result.set_type(_resized(result.type, blocking.result_dim, size))
        main.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get([a.type for a in block.arguments], [result.type]))
        return module.operation.get_asm(enable_debug_info=False)


def _resized(t: object, dim: int, size: int) -> object:
    from jaxlib.mlir import ir

    ranked = ir.RankedTensorType(t)
    shape = list(ranked.shape)
    shape[dim] = size
    return ir.RankedTensorType.get(shape, ranked.element_type, ranked.encoding)


def run_blocked(golden: XlaCpu, op: UniqueOp, inputs: Sequence[np.ndarray], blocking: Blocking) -> list[np.ndarray]:
    """The op's result computed block by block on XLA:CPU (at most two executables: the full blocks'
    and the last one's)."""
    out_desc = op.outputs[0]
    out: np.ndarray | None = None
    texts: dict[int, str] = {}
    for start in range(0, blocking.extent, blocking.size):
        size = min(blocking.size, blocking.extent - start)
        if size not in texts:
            texts[size] = block_module(op.module_text, blocking, size)
        where = [slice(None)] * len(inputs[blocking.argument].shape)
        where[blocking.dim] = slice(start, start + size)
        pieces = list(inputs)
        pieces[blocking.argument] = np.ascontiguousarray(inputs[blocking.argument][tuple(where)])
        (piece,) = golden.run(texts[size], pieces, key=f"{op.signature}|block{blocking.argument}.{blocking.dim}:{size}")
        if out is None:
            shape = list(out_desc.shape)
            out = np.empty(shape, piece.dtype)
        target = [slice(None)] * out.ndim
        target[blocking.result_dim] = slice(start, start + size)
        out[tuple(target)] = piece
    assert out is not None
    return [out]


def golden_outputs(golden: XlaCpu, op: UniqueOp, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """XLA:CPU's outputs of the op on `inputs`: whole, or in blocks when its operands are too large."""
    blocking = dot_blocking(op)
    if blocking is None:
        return golden.run(op.module_text, inputs, key=op.signature)
    return run_blocked(golden, op, inputs, blocking)
