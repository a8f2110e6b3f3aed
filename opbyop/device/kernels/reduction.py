"""Reductions and normalisations (accumulated in f32)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from opbyop.device import fpu, sfpu_reduce
from opbyop.device import vector_unit as vu
from opbyop.device.formats import EXACT_PRODUCTS, FIDELITY_PHASES, fidelity_multiply, round_bf16
from opbyop.device.kernels.base import EXACT, Call, NotSimulated, packed


def _dims(call: Call, ndim: int) -> tuple[int, ...] | None:
    dims = call.attr("dim_arg")
    if dims is None:
        return None
    dims = dims if isinstance(dims, list) else [dims]
    return tuple(int(d) % ndim for d in dims)


# What tt-metal pads a tile's unused rows and columns with before reducing: the op's neutral value
# (ttnn/cpp/ttnn/operations/reduction/generic/generic_reductions.cpp pads every input again, since
# tensors may arrive pre-padded with zeros). The padded tiles take part in the reduction.
NEUTRAL = {"sum": 0.0, "mean": 0.0, "max": -np.inf, "min": np.inf}
TILE = 32


def pad_tiles(x: np.ndarray, value: float) -> np.ndarray:
    """`x` with its last two dimensions padded to whole 32x32 tiles with `value`."""
    if x.ndim == 0:
        x = x.reshape(1)
    pads = [(0, 0)] * max(0, x.ndim - 2) + [(0, -(-d // TILE) * TILE - d) for d in x.shape[-2:]]
    return np.pad(x, pads, constant_values=value)


def tile_reduce(x: np.ndarray, axes: tuple[int, ...] | None, kind: str, fidelity: str, fp32_acc: bool,
                storage: str = "f32") -> np.ndarray:
    """A float reduction as the chip does it, keeping the reduced dimensions.

    sum / mean of bf16 data: a matmul with a scaler (1, or 1/N for the mean with N the logical
    count, packed as bf16 by ttnn's reduce program factories) on the matrix engine: over rows the
    data sits in srcA (scaler row @ data), over columns in srcB (data @ scaler column); bit for
    bit as the engine sums (opbyop.device.fpu) for one axis up to EXACT_PRODUCTS, else each
    product through the fidelity's phases and the partial sums kept in f32 (fp32_dest_acc_en) or
    rounded to bf16 tile by tile.
    sum / mean of f32 data: on the vector unit in f32, tile by tile in tt-metal's own order
    (opbyop.device.sfpu_reduce); ttnn takes the matrix engine's TF32 path for these only when asked
    for fast_and_approximate_mode, which TTNN programs do not carry.
    max / min: exact (ttsim's f32 and bf16 maxima are the inputs' own values)."""
    ndim = max(1, x.ndim)
    axes = tuple(range(ndim)) if axes is None else axes
    logical = int(np.prod([np.shape(x.reshape(-1) if x.ndim == 0 else x)[a] for a in axes])) if axes else 1
    if fidelity == EXACT:  # the chip's numerics off: no tiles, no scaler, no TF32
        values = np.asarray(x, np.float64).reshape(np.shape(x) or (1,))
        out = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[kind](values, axis=axes, keepdims=True)
        return out.astype(np.float32)
    if kind in ("sum", "mean") and storage in ("f32", "tf32"):
        return sfpu_reduce.reduce_sum(x, axes, None if kind == "sum" else 1.0 / max(1, logical))
    padded = pad_tiles(np.asarray(x, np.float32), NEUTRAL[kind])
    if kind in ("max", "min"):
        out = (padded.max if kind == "max" else padded.min)(axis=axes, keepdims=True)
        return _unpad(out, np.shape(x), axes)
    scaler = np.float32(1.0) if kind == "sum" else round_bf16(np.float32(1.0 / max(1, logical)))
    if _on_matrix_engine(padded, axes, fidelity):
        out = _engine_reduce(padded, axes[0], scaler, fidelity, fp32_acc)
    else:
        products = fidelity_multiply(padded, np.full(padded.shape, scaler, np.float32), fidelity)
        out = products.sum(axis=axes, keepdims=True, dtype=np.float32) if fp32_acc else _bf16_sum(products, axes)
    return _unpad(out, np.shape(x), axes)


def _on_matrix_engine(padded: np.ndarray, axes: tuple[int, ...], fidelity: str) -> bool:
    """Whether a sum is computed bit for bit: one axis among the tile's two, small enough."""
    return (len(axes) == 1 and padded.ndim >= 2 and axes[0] >= padded.ndim - 2
            and padded.size * FIDELITY_PHASES[fidelity] <= EXACT_PRODUCTS)


def _engine_reduce(padded: np.ndarray, axis: int, scaler: np.float32, fidelity: str, fp32_acc: bool) -> np.ndarray:
    """The sum over one of the last two axes as a matmul with the scaler, keeping the axis (size 1)."""
    k = padded.shape[axis]
    if axis == padded.ndim - 2:  # over rows: scaler row @ data (data in srcA)
        bits = fpu.matmul_bits(np.full((1, k), scaler, np.float32), padded, ("bf16", "bf16"), fidelity, fp32_acc)
    else:  # over columns: data @ scaler column (data in srcB)
        bits = fpu.matmul_bits(padded, np.full((k, 1), scaler, np.float32), ("bf16", "bf16"), fidelity, fp32_acc)
    return fpu.as_f32(bits)


def _bf16_sum(products: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """The sum over `axes` with the destination register holding bf16 between tiles."""
    moved = np.moveaxis(products, axes, tuple(range(-len(axes), 0)))
    flat = moved.reshape(moved.shape[:moved.ndim - len(axes)] + (-1,))
    acc = np.zeros(flat.shape[:-1], np.float32)
    for start in range(0, flat.shape[-1], TILE):
        acc = round_bf16(acc + flat[..., start:start + TILE].sum(axis=-1, dtype=np.float32))
    return acc.reshape(tuple(1 if i in axes else d for i, d in enumerate(products.shape)))


def _reduce(kind: str, fn: Callable) -> Callable[[Call], list]:
    def kernel(call: Call) -> list:
        x = np.asarray(call.tensors[0])
        dims = _dims(call, max(1, x.ndim))
        if x.dtype.kind in "iub" or kind not in NEUTRAL:  # integer paths and prod: exact
            out = fn(x if x.dtype.kind in "iu" else x.astype(np.float32), axis=dims, keepdims=True)
        else:
            storage = call.op.operand_types[0].storage if call.op.operand_types and call.op.operand_types[0] else "f32"
            out = packed(call, tile_reduce(x, dims, kind, *call.fidelity, storage=storage))
        return [np.asarray(out).reshape(call.out_shape)]
    return kernel


def _unpad(out: np.ndarray, shape: tuple[int, ...], dims: tuple[int, ...] | None) -> np.ndarray:
    """The logical part of a reduction of tile-padded data (reduced dimensions have size 1)."""
    dims = tuple(range(max(1, len(shape)))) if dims is None else dims
    full = shape or (1,)
    return out[tuple(slice(0, 1 if i in dims else d) for i, d in enumerate(full))]


def _argmax(call: Call) -> list:
    """The index of the first maximum; integers compared as integers (a uint32 near 2**32 read through
    f32 would tie with its neighbours)."""
    x = np.asarray(call.tensors[0])
    x = x if x.dtype.kind in "iu" else x.astype(np.float32)
    dim = call.attr("dim")
    out = np.argmax(x, axis=None if dim is None else int(dim))
    return [np.asarray(out).reshape(call.out_shape)]


def _softmax(call: Call) -> list:
    x = np.asarray(call.tensors[0], dtype=np.float32)
    dim = int(call.attr("dimension", -1))
    shifted = x - x.max(axis=dim, keepdims=True)
    e = np.exp(shifted)
    return [e / e.sum(axis=dim, keepdims=True)]


def _affine(call: Call, normalised: np.ndarray) -> list:
    """A norm's optional weight (second operand) and bias (third)."""
    weight_bias = call.tensors[1:3]
    if len(weight_bias) >= 1:
        normalised = normalised * weight_bias[0]
    if len(weight_bias) >= 2:
        normalised = normalised + weight_bias[1]
    return [normalised]


def _rms_norm(call: Call) -> list:
    x = np.asarray(call.tensors[0], dtype=np.float32)
    eps = float(call.attr("epsilon", 1e-5))
    return _affine(call, x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def _layer_norm(call: Call) -> list:
    x = np.asarray(call.tensors[0], dtype=np.float32)
    eps = float(call.attr("epsilon", 1e-5))
    centred = x - x.mean(axis=-1, keepdims=True)
    return _affine(call, centred / np.sqrt((centred ** 2).mean(axis=-1, keepdims=True) + eps))


_BATCH_NORM_OPERANDS = ("input", "running_mean", "running_var", "weight", "bias")


def _batch_norm_operands(call: Call) -> dict[str, np.ndarray]:
    """ttnn.batch_norm_* operands by name; `operandSegmentSizes` says which optional ones are there."""
    sizes = call.attr("operandSegmentSizes") or [1] * len(call.tensors)
    names = [n for n, present in zip(_BATCH_NORM_OPERANDS, sizes) if int(present)]
    return {n: np.asarray(t, dtype=np.float32) for n, t in zip(names, call.tensors)}


def _affine_channels(x: np.ndarray, mean: np.ndarray, var: np.ndarray, eps: float, ops: dict) -> np.ndarray:
    out = (x - mean) / np.sqrt(var + np.float32(eps))
    if "weight" in ops:
        out = out * ops["weight"]
    if "bias" in ops:
        out = out + ops["bias"]
    return out


def _batch_norm_inference(call: Call) -> list:
    """Channels on dimension 1, statistics shaped (1, C, 1, 1) (ttnn.batch_norm, training=False)."""
    ops = _batch_norm_operands(call)
    eps = float(call.attr("epsilon", 1e-5))
    return [_affine_channels(ops["input"], ops["running_mean"], ops["running_var"], eps, ops)]


def _batch_norm_training(call: Call) -> list:
    """Normalised by the batch's own statistics (population variance, as StableHLO's
    batch_norm_training defines them); also returns them."""
    ops = _batch_norm_operands(call)
    x = ops["input"]
    axes = tuple(i for i in range(x.ndim) if i != 1)
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float32)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True, dtype=np.float32)
    eps = float(call.attr("epsilon", 1e-5))
    return [_affine_channels(x, mean, var, eps, ops), mean, var]


def scan(x: np.ndarray, axis: int, kind: str, storage: str, reverse: bool = False) -> np.ndarray:
    """A running sum or product along `axis` as ttnn's accumulation op computes it
    (ttnn/cpp/ttnn/operations/reduction/accumulation, device/kernels/compute/accumulation_compute.cpp):
    one position after another, an accumulator of the running value in f32 on the vector unit
    (SFPADD, SFPMUL: opbyop.device.vector_unit); an f32 sum compensated (Kahan: the kernel's
    calculate_kahan_step, COMPENSATED_SUM for Float32 data), each position's output packed from the
    32-bit Dst into the tensor's format (bf16: rounded half away from zero). Checked against ttsim
    over every axis of a 4x40x70 tensor, f32 and bf16."""
    moved = np.moveaxis(np.asarray(x, np.float32), axis, 0)
    if reverse:
        moved = moved[::-1]
    shape = moved.shape
    moved = moved.reshape(shape[0], -1)
    acc = np.full(moved.shape[1], vu.ONE if kind == "prod" else vu.ZERO, np.uint32)
    compensation = np.zeros(moved.shape[1], np.uint32)
    out = np.empty(moved.shape, np.float32)
    for i, row in enumerate(moved):
        value = np.ascontiguousarray(row).view(np.uint32)
        if kind == "prod":
            acc = vu.mul(acc, value)
        elif storage == "f32":
            y = vu.sub(value, compensation)
            total = vu.add(acc, y)
            difference = vu.sub(total, acc)
            compensation = np.where(((difference >> np.uint32(23)) & np.uint32(255)) >= 255, np.uint32(0),
                                    vu.sub(difference, y)).astype(np.uint32)
            acc = total
        else:
            acc = vu.add(acc, value)
        out[i] = vu.pack(vu.store(acc, True), True, "f32" if storage == "f32" else "bf16")
    out = out.reshape(shape)
    if reverse:
        out = out[::-1]
    return np.moveaxis(out, 0, axis)


def _integer_scan(x: np.ndarray, axis: int, kind: str, reverse: bool) -> np.ndarray:
    moved = np.moveaxis(x, axis, 0)[::-1] if reverse else np.moveaxis(x, axis, 0)
    out = (np.cumprod if kind == "prod" else np.cumsum)(moved, axis=0, dtype=x.dtype)
    return np.moveaxis(out[::-1] if reverse else out, 0, axis)


def _scan_kernel(kind: str | None) -> Callable[[Call], list]:
    """ttnn.cumsum / moreh_cumsum / cumprod, and ttnn.cumulative (`kind` None: its reduction attribute)."""
    def kernel(call: Call) -> list:
        x = np.asarray(call.tensors[0])
        axis = int(call.attr("dim", 0)) % max(1, x.ndim)
        reverse = bool(call.attr("reverse", False))
        reduction = kind or str(call.attr("reduction", "sum"))
        reduction = {"add": "sum", "mul": "prod"}.get(reduction, reduction)
        if x.dtype.kind in "iub":
            if reduction not in ("sum", "prod"):
                return [_extremum_scan(x, axis, reduction, reverse)]
            return [_integer_scan(x, axis, reduction, reverse).reshape(call.out_shape)]
        if reduction in ("sum", "prod") and call.chip_numerics:
            storage = call.op.operand_types[0].storage if call.op.operand_types and call.op.operand_types[0] else "f32"
            return [scan(x, axis, reduction, storage, reverse).reshape(call.out_shape)]
        if reduction in ("sum", "prod"):
            fn = np.cumprod if reduction == "prod" else np.cumsum
            moved = np.moveaxis(x.astype(np.float64), axis, 0)
            out = fn(moved[::-1] if reverse else moved, axis=0)
            return [np.moveaxis(out[::-1] if reverse else out, 0, axis).astype(np.float32).reshape(call.out_shape)]
        return [_extremum_scan(x.astype(np.float32), axis, reduction, reverse).reshape(call.out_shape)]
    return kernel


def _extremum_scan(x: np.ndarray, axis: int, reduction: str, reverse: bool) -> np.ndarray:
    """ttnn.cumulative's other reductions (logsumexp, max, min): ttnn 0.81.1 has no kernel for them (its
    accumulation op does cumsum and cumprod), so they are their definitions, one position after another
    in f32: max and min select exactly; logsumexp is max(a, b) + log1p(exp(-|a - b|)) (not bit for bit)."""
    moved = np.moveaxis(x, axis, 0)
    moved = moved[::-1] if reverse else moved
    if reduction in ("max", "min"):
        out = (np.maximum if reduction == "max" else np.minimum).accumulate(moved, axis=0)
    elif reduction == "logsumexp":
        out = np.empty(moved.shape, np.float32)
        acc = np.full(moved.shape[1:], -np.inf, np.float32)
        with np.errstate(all="ignore"):
            for i, row in enumerate(moved.astype(np.float32)):
                high = np.maximum(acc, row)
                acc = np.where(np.isneginf(high), high, high + np.log1p(np.exp(-np.abs(acc - row)))).astype(np.float32)
                out[i] = acc
    else:
        raise NotSimulated(f"ttnn.cumulative with reduction {reduction}")
    return np.moveaxis(out[::-1] if reverse else out, 0, axis)


KERNELS: dict[str, Callable[[Call], list]] = {
    "ttnn.sum": _reduce("sum", np.sum), "ttnn.mean": _reduce("mean", np.mean), "ttnn.max": _reduce("max", np.max),
    "ttnn.min": _reduce("min", np.min), "ttnn.prod": _reduce("prod", np.prod), "ttnn.argmax": _argmax,
    "ttnn.softmax": _softmax, "ttnn.rms_norm": _rms_norm, "ttnn.layer_norm": _layer_norm,
    "ttnn.moreh_cumsum": _scan_kernel("sum"), "ttnn.cumsum": _scan_kernel("sum"), "ttnn.cumprod": _scan_kernel("prod"),
    "ttnn.cumulative": _scan_kernel(None),
    "ttnn.batch_norm_inference": _batch_norm_inference, "ttnn.batch_norm_training": _batch_norm_training,
}
