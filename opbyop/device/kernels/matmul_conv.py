"""Matrix engine ops (matmul, linear, conv2d) with the FPU's precision, and pooling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from opbyop.device import fpu
from opbyop.device.formats import BF16, EXACT_PRODUCTS, FIDELITY_PHASES, Finish, fidelity_matmul
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
              bias: np.ndarray | None = None) -> np.ndarray:
    """(N, H, W, Cin) convolved with an (O, Cin/groups, kh, kw) kernel (plus `bias`) -> (N*OH*OW, O),
    on the matrix engine as tt-metal's conv2d feeds it (conv_blocks; grouped convolutions as one
    matmul per group)."""
    n, _, _, cin = image.shape
    cout, _, kh, kw = weight.shape
    top, bottom, left, right = pads
    image = np.pad(image, ((0, 0), (top, bottom), (left, right), (0, 0)))
    windows, oh, ow = _windows(image, kh, kw, stride[0], stride[1], dilation[0], dilation[1])
    matmul_conv = kh == kw == 1 and tuple(stride) == (1, 1) and not any(pads)
    if groups == 1 and fidelity != EXACT and not matmul_conv:
        return _blocked_conv(windows.reshape(-1, kh, kw, cin), weight, fidelity, fp32_acc, bias)
    per_group_in, per_group_out = cin // groups, cout // groups
    outputs = []
    for g in range(groups):
        cols = windows[..., g * per_group_in:(g + 1) * per_group_in].reshape(n * oh * ow, kh * kw * per_group_in)
        wg = weight[g * per_group_out:(g + 1) * per_group_out]  # (O, I, kh, kw)
        wmat = np.transpose(wg, (2, 3, 1, 0)).reshape(kh * kw * per_group_in, per_group_out)
        outputs.append(fidelity_matmul(np.ascontiguousarray(cols), wmat, fidelity, fp32_acc))
    return _add_bias(np.concatenate(outputs, axis=1), bias, fidelity, fp32_acc)


# tt-metal's conv2d shards a Blackhole p150's 13 x 10 compute grid (as ttsim opens it). The
# kernels do not see the device, so its grid is stated here.
GRID_COLUMNS, GRID_ROWS = 13, 10
TILE = 32


def _round8(n: int) -> int:
    return -(-n // 8) * 8


def channel_chunks(pixels: int, cin: int, cout: int) -> tuple[int, int]:
    """(input channels per chunk, chunks) of a conv2d's reduction, as tt-metal shards it: height
    sharded (every core holds all channels: one chunk of Cin rounded up to 8) unless block sharding
    uses at least as many cores (output pixel tiles over the grid's rows, output channel tiles over
    its columns); block sharded, the channels are split over the grid's columns, ceil(Cin / 13)
    rounded up to 8 each. Measured on ttsim: Cin 16, 128, 256, 512 -> chunks of 8, 16, 24, 40."""
    tiles = -(-pixels // TILE)
    height_cores = min(tiles, GRID_ROWS * GRID_COLUMNS)
    block_cores = min(tiles, GRID_ROWS) * min(-(-cout // TILE), GRID_COLUMNS)
    chunk = _round8(-(-cin // GRID_COLUMNS)) if block_cores >= height_cores else _round8(cin)
    return chunk, -(-cin // chunk)


def conv_blocks(kh: int, kw: int, chunks: int) -> list[tuple[int, int]]:
    """The reduction's blocks in the order the compute kernel (conv_bmm_tilize.cpp) takes them:
    per kernel row, per channel chunk; each block holds that row's kw taps of the chunk's channels."""
    return [(row, chunk) for row in range(kh) for chunk in range(chunks)]


def _blocked_conv(windows: np.ndarray, weight: np.ndarray, fidelity: str, fp32_acc: bool,
                  bias: np.ndarray | None) -> np.ndarray:
    """windows (M, kh, kw, Cin) against weight (O, Cin, kh, kw), block by block: each block's
    products go into the destination register on top of the partial sums so far, which the kernel
    reloads from L1 through srcA between blocks (dropping their low 13 bits: fpu.reload_through_src_a);
    the bias is an ELWADD of the result and the bias row. Bit for bit up to EXACT_PRODUCTS, else each
    block by fidelity_matmul and the reloads applied between blocks."""
    m, kh, kw, cin = windows.shape
    cout = weight.shape[0]
    chunk, chunks = channel_chunks(m, cin, cout)
    padded = chunk * chunks - cin
    cols = np.pad(windows, ((0, 0), (0, 0), (0, 0), (0, padded))).reshape(m, kh, kw, chunks, chunk)
    taps = np.pad(np.transpose(weight, (2, 3, 1, 0)).astype(np.float32),
                  ((0, 0), (0, 0), (0, padded), (0, 0))).reshape(kh, kw, chunks, chunk, cout)
    blocks = conv_blocks(kh, kw, chunks)
    a = np.stack([cols[:, row, :, part, :].reshape(m, kw * chunk) for row, part in blocks]).astype(np.float32)
    b = np.stack([taps[row, :, part].reshape(kw * chunk, cout) for row, part in blocks])
    if m * cout * a.shape[0] * a.shape[2] * FIDELITY_PHASES[fidelity] > EXACT_PRODUCTS:
        parts = fidelity_matmul(a, b, fidelity, fp32_acc, bit_exact=False)  # every block at once
        acc = parts[0]
        for part in parts[1:]:
            acc = fpu.as_f32(fpu.reload_through_src_a(fpu.u32(acc))) + part
        return _add_bias(acc, bias, fidelity, fp32_acc)
    storage = "f32" if fp32_acc else "bf16"
    dst = None
    for block_a, block_b in zip(a, b):
        dst = fpu.matmul_bits(block_a, block_b, (storage, storage), fidelity, fp32_acc,
                              dst=None if dst is None else fpu.reload_through_src_a(dst))
    return _add_bias(fpu.as_f32(dst), bias, fidelity, fp32_acc)


def _add_bias(out: np.ndarray, bias: np.ndarray | None, fidelity: str, fp32_acc: bool) -> np.ndarray:
    """The conv's bias row added to every output row: on the FPU (add_tiles_bcast_rows, an ELWADD of
    the reloaded result and the bias), exactly when the chip's numerics are off."""
    if bias is None:
        return out
    bias = np.broadcast_to(np.asarray(bias, np.float32).reshape(1, -1), out.shape)
    if fidelity == EXACT:
        return out + bias
    storage = "f32" if fp32_acc else "bf16"
    return fpu.as_f32(fpu.add_bits(out, np.ascontiguousarray(bias), (storage, storage), fp32_acc))


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
                    *call.fidelity, bias=_bias(call))
    return [packed(call, out).reshape(call.out_shape)]


def _conv1d(call: Call) -> list:
    """ttnn.conv1d: (N, L, Cin) with an (O, Cin/groups, k) kernel: conv2d over an (L x 1) image."""
    x, weight = (np.asarray(t, dtype=np.float32) for t in call.tensors[:2])
    n, length, cin = int(call.attr("batch_size")), int(call.attr("input_length")), int(call.attr("in_channels"))
    padding = [int(p) for p in np.atleast_1d(call.attr("padding", [0, 0]))]
    left, right = (padding[0], padding[-1])
    out = conv_nhwc(x.reshape(n, length, 1, cin), weight[..., None], (int(call.attr("stride", 1)), 1),
                    (int(call.attr("dilation", 1)), 1), (left, right, 0, 0), int(call.attr("groups", 1)), *call.fidelity)
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
