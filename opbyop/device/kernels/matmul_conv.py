"""Matrix engine ops (matmul, linear, conv2d) with the FPU's precision, and pooling."""

from __future__ import annotations

from typing import Callable

import numpy as np

from opbyop.device.formats import fidelity_matmul
from opbyop.device.kernels.base import Call, NotSimulated
from opbyop.device.kernels.eltwise import fused


def _matmul(call: Call) -> list:
    a, b = (np.asarray(t, dtype=np.float32) for t in call.tensors[:2])
    if call.attr("transpose_a", False):
        a = np.swapaxes(a, -1, -2)
    if call.attr("transpose_b", False):
        b = np.swapaxes(b, -1, -2)
    if a.ndim == 1:
        a = a[None, :]
    if b.ndim == 1:
        b = b[:, None]
    fidelity, fp32_acc = call.fidelity
    out = fidelity_matmul(a, b, fidelity, fp32_acc)
    if call.op.name == "ttnn.linear" and len(call.tensors) >= 3:
        out = out + np.asarray(call.tensors[2], dtype=np.float32)
    if call.attr("activation"):
        out = fused(out, [call.attr("activation")])
    return [out.reshape(call.out_shape)]


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


def _conv2d(call: Call) -> list:
    x, weight = (np.asarray(t, dtype=np.float32) for t in call.tensors[:2])
    bias = np.asarray(call.tensors[2], dtype=np.float32).reshape(-1) if len(call.tensors) >= 3 else None
    n, h, w = int(call.attr("batch_size")), int(call.attr("input_height")), int(call.attr("input_width"))
    cin, cout, groups = int(call.attr("in_channels")), int(call.attr("out_channels")), int(call.attr("groups", 1))
    kh, kw = (int(k) for k in call.attr("kernel_size"))
    sh, sw = _pairs(call.attr("stride", [1, 1]), 2)
    dh, dw = _pairs(call.attr("dilation", [1, 1]), 2)
    top, bottom, left, right = _pairs(call.attr("padding", [0, 0]), 4) if len(call.attr("padding", [0, 0])) == 4 \
        else [call.attr("padding")[0]] * 2 + [call.attr("padding")[1]] * 2
    image = x.reshape(n, h, w, cin)
    image = np.pad(image, ((0, 0), (top, bottom), (left, right), (0, 0)))
    windows, oh, ow = _windows(image, kh, kw, sh, sw, dh, dw)
    fidelity, fp32_acc = call.fidelity
    per_group_in, per_group_out = cin // groups, cout // groups
    outputs = []
    for g in range(groups):
        cols = windows[..., g * per_group_in:(g + 1) * per_group_in].reshape(n * oh * ow, kh * kw * per_group_in)
        wg = weight[g * per_group_out:(g + 1) * per_group_out]  # (O, I, kh, kw)
        wmat = np.transpose(wg, (2, 3, 1, 0)).reshape(kh * kw * per_group_in, per_group_out)
        outputs.append(fidelity_matmul(np.ascontiguousarray(cols), wmat, fidelity, fp32_acc))
    out = np.concatenate(outputs, axis=1)
    if bias is not None:
        out = out + bias
    return [out.reshape(call.out_shape)]


def _pool(reduce: str) -> Callable[[Call], list]:
    def kernel(call: Call) -> list:
        x = np.asarray(call.tensors[0], dtype=np.float32)
        n, h, w = int(call.attr("batch_size")), int(call.attr("input_height")), int(call.attr("input_width"))
        c = int(call.attr("channels"))
        kh, kw = (int(k) for k in call.attr("kernel_size"))
        sh, sw = _pairs(call.attr("stride", [kh, kw]), 2)
        dh, dw = _pairs(call.attr("dilation", [1, 1]), 2)
        padding = [int(p) for p in call.attr("padding", [0, 0])]
        top, bottom, left, right = padding if len(padding) == 4 else [padding[0]] * 2 + [padding[1]] * 2
        if call.attr("ceil_mode", False):
            raise NotSimulated(f"{call.op.name} with ceil_mode")
        fill = -np.inf if reduce == "max" else 0.0
        image = np.pad(x.reshape(n, h, w, c), ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=fill)
        windows, oh, ow = _windows(image, kh, kw, sh, sw, dh, dw)
        out = windows.max(axis=(3, 4)) if reduce == "max" else windows.mean(axis=(3, 4))
        return [out.reshape(call.out_shape)]
    return kernel


def _global_avg_pool(call: Call) -> list:
    x = np.asarray(call.tensors[0], dtype=np.float32)
    return [x.mean(axis=(-3, -2) if x.ndim == 4 else -2, keepdims=True).reshape(call.out_shape)]


KERNELS: dict[str, Callable[[Call], list]] = {
    "ttnn.matmul": _matmul, "ttnn.linear": _matmul, "ttnn.conv2d": _conv2d,
    "ttnn.max_pool2d": _pool("max"), "ttnn.avg_pool2d": _pool("avg"), "ttnn.global_avg_pool2d": _global_avg_pool,
}
