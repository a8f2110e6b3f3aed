"""Matrix engine ops (matmul, linear, conv2d) with the FPU's precision, and pooling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from opbyop.device import fpu
from opbyop.device.conv_plan import Conv, ConvPlan, plan
from opbyop.device.formats import BF16, CONV_EXACT_PRODUCTS, FIDELITY_PHASES, Finish, fidelity_matmul
from opbyop.device.kernels.base import EXACT, Call, NotSimulated, Refused, packed
from opbyop.device.kernels.eltwise import fused


def _matmul(call: Call) -> list:
    a, b = (np.asarray(t) for t in call.tensors[:2])  # in their storage format: fidelity_matmul converts blocks
    if call.attr("transpose_a", False):
        a = np.swapaxes(a, -1, -2)
    if call.attr("transpose_b", False):
        b = np.swapaxes(b, -1, -2)
    if a.ndim == 1:
        a = a[None, :]
    if b.ndim == 1:
        b = b[:, None]
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    finish = _epilogue(call, shape)
    storage = call.out_types[0].storage if call.chip_numerics and call.out_types[0] is not None else "f32"
    # packed to bf16 the values are bf16's: held as bf16, the output is half the bytes of f32
    out = fidelity_matmul(a, b, *call.fidelity, finish=finish, out_dtype=BF16 if storage == "bf16" else np.float32)
    return [out.reshape(call.out_shape)]


def _epilogue(call: Call, shape: tuple[int, ...]) -> Finish:
    """What a matmul does to each block of its results: ttnn.linear's bias, the fused activation,
    then the packer's rounding. Applied block by block, so a large output never has an f32 copy."""
    bias = None
    if call.op.name == "ttnn.linear" and len(call.tensors) >= 3:
        bias = np.asarray(call.tensors[2], dtype=np.float32)
        bias = np.broadcast_to(bias.reshape(bias.shape[max(0, bias.ndim - len(shape)):]), shape)
    activation = call.attr("activation")

    def finish(block: np.ndarray, index: tuple) -> np.ndarray:
        if bias is not None:
            block = block + bias[index]
        if activation:
            block = fused(block, [activation])
        return packed(call, block)
    return finish


def _pairs(values: list[int], n: int) -> list[int]:
    values = [int(v) for v in values]
    return values * (n // len(values)) if len(values) < n else values


def _windows(x: np.ndarray, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int) -> tuple[np.ndarray, int, int]:
    """x: (N, H, W, C) -> (N, OH, OW, kh, kw, C) sliding windows."""
    n, h, w, c = x.shape
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (w - dw * (kw - 1) - 1) // sw + 1
    s = x.strides
    view = np.lib.stride_tricks.as_strided(
        x, shape=(n, oh, ow, kh, kw, c), strides=(s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]),
        writeable=False)
    return view, oh, ow


def conv_nhwc(image: np.ndarray, weight: np.ndarray, stride: tuple[int, int], dilation: tuple[int, int],
              pads: tuple[int, int, int, int], groups: int, fidelity: str, fp32_acc: bool,
              bias: np.ndarray | None = None, storage: str = "f32") -> np.ndarray:
    """(N, H, W, Cin) convolved with an (O, Cin/groups, kh, kw) kernel (plus `bias`) -> (N*OH*OW, O),
    on the matrix engine as tt-metal's conv2d feeds it: a grouped kernel as the block-diagonal dense
    one tt-metal makes of it (convert_conv_weight_tensor_to_grouped_layout), a 1x1 stride-1 conv as
    a matmul, any other as blocks of its reduction (conv_plan) whose partial sums pass through L1 in
    the output's format `storage` between blocks."""
    n, h, w, cin = image.shape
    cout, _, kh, kw = weight.shape
    weight = _grouped_dense(np.asarray(weight, np.float32), groups, cin)
    top, bottom, left, right = pads
    padded = np.pad(image, ((0, 0), (top, bottom), (left, right), (0, 0)))
    windows, oh, ow = _windows(padded, kh, kw, stride[0], stride[1], dilation[0], dilation[1])
    conv = Conv(n, h, w, cin, cout, (kh, kw), tuple(stride), tuple(pads), tuple(dilation),
                *(2 if storage == "bf16" else 4,) * 2)
    if fidelity == EXACT or conv.is_matmul:
        cols = np.ascontiguousarray(windows.reshape(n * oh * ow, kh * kw * cin))
        out = fidelity_matmul(cols, np.transpose(weight, (2, 3, 1, 0)).reshape(kh * kw * cin, cout), fidelity, fp32_acc,
                              exact_limit=CONV_EXACT_PRODUCTS)
        return _add_bias(out, bias, fidelity, fp32_acc, storage)
    conv_plan = plan(conv)
    extra = conv_plan.chunk * conv_plan.chunks - cin  # the padding channels, zeros: added to the image, not its windows
    if extra:
        padded = np.pad(padded, ((0, 0), (0, 0), (0, 0), (0, extra)))
        weight = np.pad(weight, ((0, 0), (0, extra), (0, 0), (0, 0)))
        windows, oh, ow = _windows(padded, kh, kw, stride[0], stride[1], dilation[0], dilation[1])
    return _blocked_conv(windows, weight, conv_plan, fidelity, fp32_acc, bias, storage)


def _grouped_dense(weight: np.ndarray, groups: int, cin: int) -> np.ndarray:
    """(O, Cin/groups, kh, kw) -> (O, Cin, kh, kw), each group's output channels seeing only its own
    input channels (zeros elsewhere)."""
    if groups == 1:
        return weight
    cout, per_in, kh, kw = weight.shape
    per_out = cout // groups
    dense = np.zeros((cout, cin, kh, kw), np.float32)
    for g in range(groups):
        dense[g * per_out:(g + 1) * per_out, g * per_in:(g + 1) * per_in] = weight[g * per_out:(g + 1) * per_out]
    return dense


def _blocked_conv(windows: np.ndarray, weight: np.ndarray, conv_plan: ConvPlan, fidelity: str, fp32_acc: bool,
                  bias: np.ndarray | None, storage: str) -> np.ndarray:
    """windows (N, OH, OW, kh, kw, Cin) against weight (O, Cin, kh, kw), Cin padded to the plan's
    chunks, block by block in tt-metal's order
    (ConvPlan.blocks): each block's products go into the destination register on top of the partial
    sums so far, which the kernel packed to L1 in the output's format and reloads through srcA
    (reload); a fused bias is an ELWADD of the packed result and the bias row. Bit for bit up to
    CONV_EXACT_PRODUCTS, else each block by fidelity_matmul and the reloads applied between blocks."""
    kh, kw, cin = windows.shape[-3:]
    m = int(np.prod(windows.shape[:3]))
    cout = weight.shape[0]
    chunk, chunks = conv_plan.chunk, conv_plan.chunks
    cols = windows.reshape(windows.shape[:5] + (chunks, chunk))  # a view: each block is copied out once
    taps = np.transpose(weight, (2, 3, 1, 0)).reshape(kh, kw, chunks, chunk, cout)
    blocks = conv_plan.blocks(kh)
    rows = [slice(None) if row is None else slice(row, row + 1) for row, _ in blocks]
    a = [np.ascontiguousarray(cols[:, :, :, r, :, part, :], np.float32).reshape(m, -1) for r, (_, part) in zip(rows, blocks)]
    b = [taps[r, :, part].reshape(-1, cout) for r, (_, part) in zip(rows, blocks)]
    # a block reaches an output channel where its weights for it are not all zero (a grouped or
    # depthwise kernel: one channel chunk's blocks); channels reached by the same blocks go together
    reaches = np.array([np.any(block_b != 0, axis=0) for block_b in b])  # (blocks, Cout)
    keys, group_of = np.unique(reaches, axis=1, return_inverse=True)
    products = m * int(sum(x.shape[1] * reaches[i].sum() for i, x in enumerate(a))) * FIDELITY_PHASES[fidelity]
    exact = products <= CONV_EXACT_PRODUCTS
    storage_in = "f32" if fp32_acc else "bf16"
    in0 = [fpu.operand(block_a, storage_in, is_src_a=False) if reaches[i].any() else None
           for i, block_a in enumerate(a)] if exact else None  # converted once for every channel group
    out = np.zeros((m, cout), np.int64)
    for g in range(keys.shape[1]):
        columns = np.flatnonzero(group_of.reshape(-1) == g)
        out[:, columns] = _reduce_blocks(a, [block_b[:, columns] for block_b in b], keys[:, g], fidelity, fp32_acc,
                                         storage, in0)
    return _add_bias(fpu.as_f32(out), bias, fidelity, fp32_acc, storage)


def _reduce_blocks(a: list[np.ndarray], b: list[np.ndarray], reaching: np.ndarray, fidelity: str, fp32_acc: bool,
                   storage: str, exact: list | None) -> np.ndarray:
    """The destination's bit patterns after every block in order, for output channels that the blocks
    marked in `reaching` reach (`exact`: each block's in0 as fpu.operand gives it, None for the BLAS
    sum). A block reaching none of them still has the partial sums packed and reloaded, and an MVMUL
    pass adding nothing to a destination the engine wrote changes none of its bits: it is a reload,
    and a reload again changes nothing, so only a run of them after the last block that reaches
    these channels shows (the result reloaded once more)."""
    storage_in = "f32" if fp32_acc else "bf16"
    dst = None
    for i in np.flatnonzero(reaching):
        if exact is not None:
            dst = fpu.mvmul_bits(exact[i], fpu.operand(b[i], storage_in, is_src_a=True, k_axis=0), fidelity, fp32_acc,
                                 dst=None if dst is None else reload(dst, storage))
        else:
            part = fpu.u32(fidelity_matmul(a[i], b[i], fidelity, fp32_acc, bit_exact=False))
            dst = part if dst is None else fpu.u32(fpu.as_f32(reload(dst, storage)) + fpu.as_f32(part))
    if dst is None:
        return np.zeros((a[0].shape[0], b[0].shape[1]), np.int64)
    return reload(dst, storage) if not reaching[-1] else dst


def reload(bits: np.ndarray, storage: str) -> np.ndarray:
    """Destination bit patterns packed to the partial sums' buffer in `storage` (the output's format)
    and copied back through srcA: bf16 rounded half away from zero by the packer, f32 cut to TF32 by srcA."""
    if storage == "bf16":
        return fpu.u32(fpu.pack_bf16(bits))
    return fpu.reload_through_src_a(bits)


def _add_bias(out: np.ndarray, bias: np.ndarray | None, fidelity: str, fp32_acc: bool,
              storage: str = "f32") -> np.ndarray:
    """The conv's bias row added to every output row: on the FPU (add_tiles_bcast_rows, an ELWADD of
    the result packed to the partial sums' buffer and the bias), exactly when the chip's numerics are off."""
    if bias is None:
        return out
    bias = np.broadcast_to(np.asarray(bias, np.float32).reshape(1, -1), out.shape)
    if fidelity == EXACT:
        return out + bias
    if storage == "bf16":
        out, operands = fpu.pack_bf16(fpu.u32(out)), ("bf16", "bf16")
    else:
        operands = ("f32", "f32") if fp32_acc else ("bf16", "bf16")
    return fpu.as_f32(fpu.add_bits(out, np.ascontiguousarray(bias), operands, fp32_acc))


def _four(padding: list) -> tuple[int, int, int, int]:
    """ttnn conv padding: [h, w] (symmetric) or [top, bottom, left, right]."""
    p = [int(v) for v in padding]
    return (p[0], p[1], p[2], p[3]) if len(p) == 4 else (p[0], p[0], p[1], p[1])


def _check_output(call: Call, size: tuple[int, int], image: tuple[int, int]) -> None:
    """A convolution whose attributes leave no output (a padding larger than what it pads) cannot run:
    said with the padding as tt-metal reads it."""
    if min(size) <= 0:
        raise Refused(f"{call.op.name}: padding {list(call.attr('padding'))}, read as tt-metal reads it ([height, "
                      "width], or [top, bottom, left, right]), leaves a {}x{} output of the {}x{} input: the program "
                      "cannot run as compiled".format(*size, *image))


def _bias(call: Call) -> np.ndarray | None:
    return np.asarray(call.tensors[2], dtype=np.float32).reshape(-1) if len(call.tensors) >= 3 else None


def _conv2d(call: Call) -> list:
    x, weight = (np.asarray(t, dtype=np.float32) for t in call.tensors[:2])
    n, h, w = int(call.attr("batch_size")), int(call.attr("input_height")), int(call.attr("input_width"))
    cin, groups = int(call.attr("in_channels")), int(call.attr("groups", 1))
    out = conv_nhwc(x.reshape(n, h, w, cin), weight, tuple(_pairs(call.attr("stride", [1, 1]), 2)),
                    tuple(_pairs(call.attr("dilation", [1, 1]), 2)), _four(call.attr("padding", [0, 0])), groups,
                    *call.fidelity, bias=_bias(call), storage=_storage(call))
    return [packed(call, out).reshape(call.out_shape)]


def _storage(call: Call) -> str:
    """The output's format, which the partial sums between blocks are packed in (f32 with the chip's numerics off)."""
    return call.out_types[0].storage if call.chip_numerics and call.out_types[0] is not None else "f32"


def _conv1d(call: Call) -> list:
    """ttnn.conv1d: (N, L, Cin) with an (O, Cin/groups, k) kernel: conv2d over an (L x 1) image."""
    x, weight = (np.asarray(t, dtype=np.float32) for t in call.tensors[:2])
    n, length, cin = int(call.attr("batch_size")), int(call.attr("input_length")), int(call.attr("in_channels"))
    padding = [int(p) for p in np.atleast_1d(call.attr("padding", [0, 0]))]
    left, right = (padding[0], padding[-1])
    out = conv_nhwc(x.reshape(n, length, 1, cin), weight[..., None], (int(call.attr("stride", 1)), 1),
                    (int(call.attr("dilation", 1)), 1), (left, right, 0, 0), int(call.attr("groups", 1)), *call.fidelity,
                    storage=_storage(call))
    bias = _bias(call)
    return [(out if bias is None else out + bias).reshape(call.out_shape)]


def _conv_transpose2d(call: Call) -> list:
    """ttnn.conv_transpose2d (torch's ConvTranspose2d): weight (Cin, Cout/groups, kh, kw); every input
    pixel's product with each kernel tap lands at (h*stride + i*dilation - pad, ...)."""
    x, weight = (np.asarray(t, dtype=np.float32) for t in call.tensors[:2])
    n, h, w = int(call.attr("batch_size")), int(call.attr("input_height")), int(call.attr("input_width"))
    cin, cout, groups = int(call.attr("in_channels")), int(call.attr("out_channels")), int(call.attr("groups", 1))
    kh, kw = (int(k) for k in call.attr("kernel_size"))
    sh, sw = _pairs(call.attr("stride", [1, 1]), 2)
    dh, dw = _pairs(call.attr("dilation", [1, 1]), 2)
    top, bottom, left, right = _four(call.attr("padding", [0, 0]))
    oph, opw = _pairs(call.attr("output_padding", [0, 0]), 2)
    oh = (h - 1) * sh - top - bottom + dh * (kh - 1) + oph + 1
    ow = (w - 1) * sw - left - right + dw * (kw - 1) + opw + 1
    _check_output(call, (oh, ow), (h, w))
    full = np.zeros((n, (h - 1) * sh + dh * (kh - 1) + 1 + oph, (w - 1) * sw + dw * (kw - 1) + 1 + opw, cout), np.float32)
    image = x.reshape(n * h * w, cin)
    per_in, per_out = cin // groups, cout // groups
    fidelity, fp32_acc = call.fidelity
    for i in range(kh):
        for j in range(kw):
            for g in range(groups):
                tap = weight[g * per_in:(g + 1) * per_in, :, i, j]  # (Cin/g, Cout/g)
                part = fidelity_matmul(np.ascontiguousarray(image[:, g * per_in:(g + 1) * per_in]), tap, fidelity, fp32_acc)
                full[:, i * dh:i * dh + (h - 1) * sh + 1:sh, j * dw:j * dw + (w - 1) * sw + 1:sw,
                     g * per_out:(g + 1) * per_out] += part.reshape(n, h, w, per_out)
    out = full[:, top:top + oh, left:left + ow, :]
    bias = _bias(call)
    return [(out if bias is None else out + bias).reshape(call.out_shape)]


@dataclass(frozen=True)
class _PoolWindow:
    """A ttnn pooling op's image and window, read from its attributes."""

    n: int
    h: int
    w: int
    c: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, bottom, left, right

    @classmethod
    def of(cls, call: Call) -> _PoolWindow:
        kh, kw = (int(k) for k in call.attr("kernel_size"))
        if call.attr("ceil_mode", False):
            raise NotSimulated(f"{call.op.name} with ceil_mode")
        return cls(int(call.attr("batch_size")), int(call.attr("input_height")), int(call.attr("input_width")),
                   int(call.attr("channels")), (kh, kw), tuple(_pairs(call.attr("stride", [kh, kw]), 2)),
                   tuple(_pairs(call.attr("dilation", [1, 1]), 2)), tuple(_four(call.attr("padding", [0, 0]))))


def _pool(reduce: str) -> Callable[[Call], list]:
    def kernel(call: Call) -> list:
        x = np.asarray(call.tensors[0], dtype=np.float32)
        p = _PoolWindow.of(call)
        n, h, w, c = p.n, p.h, p.w, p.c
        (kh, kw), (sh, sw), (dh, dw) = p.kernel, p.stride, p.dilation
        top, bottom, left, right = p.padding
        fill = -np.inf if reduce == "max" else 0.0
        image = np.pad(x.reshape(n, h, w, c), ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=fill)
        windows, oh, ow = _windows(image, kh, kw, sh, sw, dh, dw)
        out = windows.max(axis=(3, 4)) if reduce == "max" else windows.mean(axis=(3, 4))
        return [out.reshape(call.out_shape)]
    return kernel


def _max_pool_with_indices(call: Call) -> list:
    """ttnn.max_pool2d_with_indices: the maximum of each window and its index h*W + w in the input
    image (the first maximum in row-major window order on ties, as torch's max_pool2d)."""
    x = np.asarray(call.tensors[0], dtype=np.float32)
    p = _PoolWindow.of(call)
    n, h, w, c = p.n, p.h, p.w, p.c
    (kh, kw), (sh, sw), (dh, dw) = p.kernel, p.stride, p.dilation
    top, bottom, left, right = p.padding
    image = np.pad(x.reshape(n, h, w, c), ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=-np.inf)
    flat = np.pad(np.arange(h * w, dtype=np.int64).reshape(1, h, w, 1), ((0, 0), (top, bottom), (left, right), (0, 0)),
                  constant_values=-1)
    windows, oh, ow = _windows(image, kh, kw, sh, sw, dh, dw)
    where, _, _ = _windows(np.ascontiguousarray(np.broadcast_to(flat, (n, h + top + bottom, w + left + right, c))),
                           kh, kw, sh, sw, dh, dw)
    cells = windows.reshape(n, oh, ow, kh * kw, c)
    first = np.argmax(cells, axis=3)  # argmax returns the first maximum
    values = np.take_along_axis(cells, first[:, :, :, None, :], axis=3)[:, :, :, 0, :]
    indices = np.take_along_axis(where.reshape(n, oh, ow, kh * kw, c), first[:, :, :, None, :], axis=3)[:, :, :, 0, :]
    return [values.reshape(call.out_types[0].shape), indices.reshape(call.out_types[1].shape)]


def _global_avg_pool(call: Call) -> list:
    x = np.asarray(call.tensors[0], dtype=np.float32)
    return [x.mean(axis=(-3, -2) if x.ndim == 4 else -2, keepdims=True).reshape(call.out_shape)]


# Kernels that take bf16 storage as it is (executor.STORAGE_KERNELS).
STORAGE_KERNELS = frozenset({"ttnn.matmul", "ttnn.linear"})

KERNELS: dict[str, Callable[[Call], list]] = {
    "ttnn.matmul": _matmul, "ttnn.linear": _matmul, "ttnn.conv2d": _conv2d, "ttnn.conv1d": _conv1d,
    "ttnn.conv_transpose2d": _conv_transpose2d, "ttnn.max_pool2d_with_indices": _max_pool_with_indices,
    "ttnn.max_pool2d": _pool("max"), "ttnn.avg_pool2d": _pool("avg"), "ttnn.global_avg_pool2d": _global_avg_pool,
}
