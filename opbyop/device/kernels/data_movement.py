"""Ops that move, copy or reshape data; the values themselves do not change."""

from __future__ import annotations

from typing import Callable

import numpy as np

from opbyop.device import vector_unit as vu
from opbyop.device.formats import store
from opbyop.device.kernels import sfpu
from opbyop.device.kernels.base import Call, NotSimulated, shape_attr


def _to_result_shape(call: Call) -> list:
    """reshape / squeeze / unsqueeze / to_layout / typecast / memory moves: same values."""
    x = np.asarray(call.tensors[0])
    return [x.reshape(call.out_shape)]


def _device_layout_change(call: Call) -> bool:
    """Whether a to_layout tilizes or untilizes on the device (a tilize or untilize kernel: unpacker,
    Dst, packer), rather than on the host or in memory alone."""
    t_in = next((t for t in call.op.operand_types if t is not None), None)
    t_out = call.out_types[0] if call.out_types else None
    if t_in is None or t_out is None or t_in.layout is None or t_out.layout is None:
        return False
    return t_in.layout.on_device and t_out.layout.on_device and t_in.layout.tiled != t_out.layout.tiled


def _to_layout(call: Call) -> list:
    """to_layout: the same values, but a bf16 tile made or unmade on the device passes the packer of a
    16-bit Dst (ttsim TENSIX_EXECUTE_MOVA2D, PACR): a NaN becomes the infinity of its sign, and zero
    exponents (denormals, -0) +0."""
    x = np.asarray(call.tensors[0])
    t_in = next((t for t in call.op.operand_types if t is not None), None)
    if call.chip_numerics and t_in is not None and t_in.storage == "bf16" and _device_layout_change(call):
        stored = np.asarray(x, np.float32)
        x = store(vu.pack(vu.unpack(stored, False, "bf16"), False, "bf16"), "bf16")
    return [x.reshape(call.out_shape)]


def _typecast(call: Call) -> list:
    """typecast on the device (eltwise_typecast's typecast_tile, ckernel_sfpu_typecast.h): f32 to bf16
    by float32_to_bf16_rne's integer rounding, to si32 by truncation with tt-metal's saturation, bf16 to
    f32 through Dst (zero exponents to +0); other conversions and host tensors as stored values."""
    x = np.asarray(call.tensors[0])
    t_in = next((t for t in call.op.operand_types if t is not None), None)
    t_out = call.out_types[0] if call.out_types else None
    if not (call.chip_numerics and t_in is not None and t_out is not None and t_in.layout is not None
            and t_in.layout.on_device and t_in.storage in ("f32", "bf16") and t_out.storage in ("f32", "bf16", "si32")):
        return [x.reshape(call.out_shape)]
    dest = vu.unpack(np.asarray(x, np.float32), True, t_in.storage)
    if t_out.storage == "si32":
        return [sfpu.typecast_to_int32(dest, True).view(np.int32).reshape(call.out_shape)]
    if t_out.storage == "bf16" and t_in.storage == "f32":
        dest = vu.store(sfpu.typecast_to_bf16(dest, True), True)
    return [store(vu.pack(dest, True, t_out.storage), t_out.storage).reshape(call.out_shape)]


def _permute(call: Call) -> list:
    return [np.transpose(np.asarray(call.tensors[0]), call.attr("permutation"))]


def _transpose(call: Call) -> list:
    return [np.swapaxes(np.asarray(call.tensors[0]), int(call.attr("dim0")), int(call.attr("dim1")))]


def _slice(call: Call) -> list:
    x = np.asarray(call.tensors[0])
    begins, ends = call.attr("begins"), call.attr("ends")
    steps = call.attr("step") or [1] * x.ndim
    index = tuple(slice(int(b), int(e), int(s)) for b, e, s in zip(begins, ends, steps))
    return [x[index]]


def _concat(call: Call) -> list:
    return [np.concatenate([np.asarray(t) for t in call.tensors], axis=int(call.attr("dim", 0)))]


def _repeat(call: Call) -> list:
    return [np.tile(np.asarray(call.tensors[0]), shape_attr(call.attr("repeat_dims")))]


def _repeat_interleave(call: Call) -> list:
    return [np.repeat(np.asarray(call.tensors[0]), int(call.attr("repeats")), axis=int(call.attr("dim", 0)))]


def _pad(call: Call) -> list:
    x = np.asarray(call.tensors[0])
    flat = [int(p) for p in call.attr("padding")]
    pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    pairs = [(0, 0)] * (x.ndim - len(pairs)) + pairs
    return [np.pad(x, pairs, constant_values=call.attr("value", 0.0))]


def _embedding(call: Call) -> list:
    ids, weight = (np.asarray(t) for t in call.tensors[:2])
    return [weight[np.clip(ids.astype(np.int64), 0, weight.shape[0] - 1)].reshape(call.out_shape)]


# How each storage format's bits are read: (numpy type of the bits, how values become bits).
_BITS = {"f32": np.uint32, "tf32": np.uint32, "si32": np.uint32, "u32": np.uint32, "bf16": np.uint16, "f16": np.uint16,
         "u16": np.uint16, "u8": np.uint8}
_FROM_BITS = {"f32": np.float32, "tf32": np.float32, "si32": np.int32, "u32": np.uint32, "f16": np.float16,
              "u16": np.uint16, "u8": np.uint8}


def _to_bits(x: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "bf16":  # a bf16 value is the top half of its f32 bits (values are stored rounded)
        return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.ascontiguousarray(x, dtype=_FROM_BITS[fmt]).view(_BITS[fmt])


def _from_bits(bits: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return bits.view(_FROM_BITS[fmt])


def _bitcast_convert(call: Call) -> list:
    """Reinterpret the stored bits in the result's format (same width, e.g. f32 <-> si32)."""
    src_type, dst_type = call.op.operand_types[0], call.out_types[0]
    src, dst = (t.storage if t is not None else "f32" for t in (src_type, dst_type))
    if src not in _BITS or dst not in _BITS or np.dtype(_BITS[src]).itemsize != np.dtype(_BITS[dst]).itemsize:
        raise NotSimulated(f"ttnn.bitcast_convert from {src} to {dst}")
    return [_from_bits(_to_bits(np.asarray(call.tensors[0]), src), dst).reshape(call.out_shape)]


KERNELS: dict[str, Callable[[Call], list]] = {
    **{name: _to_result_shape for name in (
        "ttnn.reshape", "ttnn.squeeze", "ttnn.unsqueeze",
        "ttnn.to_memory_config", "ttnn.to_device", "ttnn.from_device", "ttnn.to_dtype", "ttnn.clone")},
    "ttnn.to_layout": _to_layout, "ttnn.typecast": _typecast,
    "ttnn.permute": _permute, "ttnn.transpose": _transpose, "ttnn.slice_static": _slice,
    "ttnn.concat": _concat, "ttnn.repeat": _repeat, "ttnn.repeat_interleave": _repeat_interleave,
    "ttnn.pad": _pad, "ttnn.bitcast_convert": _bitcast_convert, "ttnn.assign": _to_result_shape, "ttnn.embedding": _embedding,
}

# Every kernel here but bitcast_convert (which reads the stored bits) moves values unchanged.
STORAGE_KERNELS = frozenset(KERNELS) - {"ttnn.bitcast_convert"}
