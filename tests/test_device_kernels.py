"""Each simulated TTNN op against a torch reference, and the chip's number formats."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from opbyop.device.formats import fidelity_matmul, quantize_bfp, round_bf16, store, to_tf32, truncate_mantissa
from opbyop.device.kernels import KERNELS, Call
from opbyop.device.layout import Layout
from opbyop.device.program import Op, TensorType

RNG = np.random.default_rng(0)


def src_a(x: np.ndarray) -> np.ndarray:
    """What a multiplication sees of a value held in srcA: TF32 less its last mantissa bit
    (hidden bit + 4 bits, then 5 more, in two fidelity phases: ttsim's mvmul)."""
    return truncate_mantissa(to_tf32(x), 9)


def run(name: str, inputs: list, out_shape: tuple, storage: str = "f32", **attrs) -> np.ndarray:
    """One kernel on host arrays, the way the executor calls it; operands held in `storage`."""
    def ttype(x):
        return TensorType(tuple(np.shape(x)), storage, Layout(tiled=True, dtype=storage)) if x is not None else None

    op = Op(name=name, operands=list(range(len(inputs))), results=[len(inputs)],
            operand_types=[ttype(x) for x in inputs],
            result_types=[TensorType(tuple(out_shape), "f32", Layout(tiled=True))], attrs=attrs)
    return np.asarray(KERNELS[name](Call(op=op, inputs=inputs, out_types=op.result_types))[0])


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x))


A = RNG.standard_normal((2, 3, 32, 48)).astype(np.float32)
B = RNG.standard_normal((2, 3, 32, 48)).astype(np.float32)
POS = RNG.uniform(0.5, 2.0, (4, 40)).astype(np.float32)

BINARY = {"ttnn.add": torch.add, "ttnn.subtract": torch.sub, "ttnn.multiply": torch.mul, "ttnn.divide": torch.div,
          "ttnn.maximum": torch.maximum, "ttnn.minimum": torch.minimum, "ttnn.ge": torch.ge, "ttnn.lt": torch.lt,
          "ttnn.eq": torch.eq, "ttnn.ne": torch.ne, "ttnn.logical_and": torch.logical_and}
UNARY = {"ttnn.exp": torch.exp, "ttnn.neg": torch.neg, "ttnn.abs": torch.abs, "ttnn.relu": torch.relu,
         "ttnn.gelu": F.gelu, "ttnn.sigmoid": torch.sigmoid, "ttnn.tanh": torch.tanh, "ttnn.sin": torch.sin,
         "ttnn.cos": torch.cos, "ttnn.silu": F.silu, "ttnn.erf": torch.erf, "ttnn.floor": torch.floor}
POSITIVE = {"ttnn.log": torch.log, "ttnn.sqrt": torch.sqrt, "ttnn.rsqrt": torch.rsqrt, "ttnn.reciprocal": torch.reciprocal}


@pytest.mark.parametrize("name", BINARY)
def test_binary_ops_broadcast_like_torch(name):
    b = B[:1, :, :1, :]  # broadcast along two dimensions
    got = run(name, [A, b], A.shape)
    np.testing.assert_allclose(got, BINARY[name](t(A), t(b)).float().numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", UNARY)
def test_unary_ops(name):
    np.testing.assert_allclose(run(name, [A], A.shape), UNARY[name](t(A)).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", POSITIVE)
def test_unary_ops_on_their_domain(name):
    np.testing.assert_allclose(run(name, [POS], POS.shape), POSITIVE[name](t(POS)).numpy(), rtol=1e-5)


def test_fused_activations_apply_in_order():
    got = run("ttnn.add", [A, B], A.shape, activations=[{"op_type": "relu"}],
              input_tensor_a_activations=[{"op_type": "neg"}])
    np.testing.assert_allclose(got, torch.relu(-t(A) + t(B)).numpy(), rtol=1e-6)


def test_scalar_and_ternary_ops():
    np.testing.assert_allclose(run("ttnn.clamp_scalar", [A], A.shape, min=-0.5, max=0.25),
                               torch.clamp(t(A), -0.5, 0.25).numpy())
    np.testing.assert_allclose(run("ttnn.pow_scalar", [POS], POS.shape, rhs=3.0), torch.pow(t(POS), 3).numpy(), rtol=1e-6)
    cond = (A > 0).astype(np.float32)
    np.testing.assert_allclose(run("ttnn.where", [cond, A, B], A.shape), torch.where(t(A) > 0, t(A), t(B)).numpy())


@pytest.mark.parametrize("name, fn, keep", [("ttnn.sum", torch.sum, False), ("ttnn.mean", torch.mean, True),
                                             ("ttnn.max", torch.amax, False), ("ttnn.min", torch.amin, True)])
def test_reductions(name, fn, keep):
    """f32 data is reduced in f32 on the vector unit (ttsim: not through TF32 srcA registers), a
    mean scaled by an f32 1/N."""
    want = fn(t(A), dim=(1, 3), keepdim=keep).numpy()
    if name == "ttnn.mean":
        want = torch.sum(t(A), dim=(1, 3), keepdim=keep).numpy() * np.float32(1 / (3 * 48))
    got = run(name, [A], want.shape, dim_arg=[1, 3], keep_dim=keep)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if name in ("ttnn.max", "ttnn.min"):
        np.testing.assert_array_equal(got, want)


def test_softmax_and_norms():
    np.testing.assert_allclose(run("ttnn.softmax", [A], A.shape, dimension=-1), torch.softmax(t(A), -1).numpy(), rtol=1e-5)
    w = RNG.standard_normal(48).astype(np.float32)
    rms = t(A) * torch.rsqrt(t(A).pow(2).mean(-1, keepdim=True) + 1e-6) * t(w)
    np.testing.assert_allclose(run("ttnn.rms_norm", [A, w], A.shape, epsilon=1e-6), rms.numpy(), rtol=1e-5, atol=1e-6)
    ln = F.layer_norm(t(A), (48,), t(w), t(w), eps=1e-5)
    np.testing.assert_allclose(run("ttnn.layer_norm", [A, w, w], A.shape, epsilon=1e-5), ln.numpy(), rtol=1e-4, atol=1e-5)


def test_data_movement():
    np.testing.assert_array_equal(run("ttnn.permute", [A], (3, 0, 2, 1), permutation=[3, 0, 2, 1]),
                                  t(A).permute(3, 0, 2, 1).numpy())
    np.testing.assert_array_equal(run("ttnn.reshape", [A], (6, 1536), shape=[6, 1536]), A.reshape(6, 1536))
    np.testing.assert_array_equal(run("ttnn.slice_static", [A], (2, 3, 16, 16), begins=[0, 0, 0, 0],
                                      ends=[2, 3, 32, 48], step=[1, 1, 2, 3]), t(A)[:, :, ::2, ::3].numpy())
    np.testing.assert_array_equal(run("ttnn.concat", [A, B], (2, 3, 32, 96), dim=3), torch.cat([t(A), t(B)], 3).numpy())
    np.testing.assert_array_equal(run("ttnn.repeat", [A[:1]], (2, 3, 32, 48), repeat_dims="2x1x1x1"),
                                  t(A[:1]).repeat(2, 1, 1, 1).numpy())
    np.testing.assert_array_equal(run("ttnn.pad", [POS], (4, 44), padding=[0, 0, 1, 3], value=0.0),
                                  F.pad(t(POS), (1, 3)).numpy())
    table = RNG.standard_normal((50, 8)).astype(np.float32)
    ids = RNG.integers(0, 50, (1, 7)).astype(np.int32)
    np.testing.assert_array_equal(run("ttnn.embedding", [ids, table], (1, 7, 8)), F.embedding(t(ids).long(), t(table)).numpy())


def test_rows_gather_as_tt_mlir_lowers_an_embedding_lookup():
    table = RNG.standard_normal((1, 50, 8)).astype(np.float32)
    ids = RNG.integers(0, 50, (1, 1, 7)).astype(np.int32)
    got = run("ttnn.rows_gather", [table, ids], (1, 7, 8), column=False, sizes=[50], windows=[1])
    np.testing.assert_array_equal(got, table[0][ids.reshape(-1)][None])


def test_creation_ops():
    np.testing.assert_array_equal(run("ttnn.full", [None], (2, 3), fill_value=1.5, shape="2x3"), np.full((2, 3), 1.5))
    np.testing.assert_array_equal(run("ttnn.arange", [None], (5,), start=2, end=12, step=2), torch.arange(2, 12, 2).numpy())


def test_matmul_with_transposes_matches_torch_within_tf32():
    a = RNG.standard_normal((3, 64, 96)).astype(np.float32)
    b = RNG.standard_normal((3, 80, 96)).astype(np.float32)
    got = run("ttnn.matmul", [a, b], (3, 64, 80), transpose_b=True)
    want = torch.matmul(t(a), t(b).transpose(-1, -2)).numpy()
    assert 1e-6 < np.max(np.abs(got - want)) < 0.2  # srcA/srcB operands: close, but not f32-exact
    # in0 (a) sits in srcB (all of TF32), in1 (b) in srcA (9 mantissa bits); each group of 8 products
    # is rounded to its largest one's grid
    assert np.abs(got - to_tf32(a) @ np.swapaxes(src_a(b), -1, -2)).max() < 0.05


def test_conv2d_matches_torch():
    n, c, h, w, o = 2, 6, 9, 11, 4
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    weight = RNG.standard_normal((o, c // 2, 3, 3)).astype(np.float32)
    want = F.conv2d(t(x), t(weight), stride=2, padding=1, groups=2).numpy()  # (n, o, 5, 6)
    flat = x.transpose(0, 2, 3, 1).reshape(1, 1, n * h * w, c)  # how tt-mlir feeds conv2d: NHWC rows
    got = run("ttnn.conv2d", [flat, weight, None], (1, 1, n * 5 * 6, o), batch_size=n, in_channels=c,
              out_channels=o, input_height=h, input_width=w, kernel_size=[3, 3], stride=[2, 2],
              padding=[1, 1, 1, 1], dilation=[1, 1], groups=2)
    np.testing.assert_allclose(got.reshape(n, 5, 6, o).transpose(0, 3, 1, 2), want, rtol=0.02, atol=0.02)


@pytest.mark.parametrize("name, fn", [("ttnn.max_pool2d", F.max_pool2d), ("ttnn.avg_pool2d", F.avg_pool2d)])
def test_pooling_matches_torch(name, fn):
    x = round_bf16(RNG.standard_normal((1, 5, 8, 8)).astype(np.float32))  # tt-metal pools bf16 only
    want = fn(t(x), kernel_size=2, stride=2).numpy()
    flat = x.transpose(0, 2, 3, 1).reshape(1, 1, 64, 5)
    got = run(name, [flat], (1, 1, 16, 5), "bf16", batch_size=1, channels=5, input_height=8, input_width=8,
              kernel_size=[2, 2], stride=[2, 2], padding=[0, 0], dilation=[1, 1])
    np.testing.assert_allclose(got.reshape(1, 4, 4, 5).transpose(0, 3, 1, 2), want, rtol=1e-6)


# -- number formats ------------------------------------------------------------------------

def test_bf16_rounding_matches_torch():
    x = RNG.standard_normal(10_000).astype(np.float32) * 1000
    np.testing.assert_array_equal(round_bf16(x), t(x).to(torch.bfloat16).float().numpy())
    assert np.isnan(round_bf16(np.array([np.nan], np.float32)))[0]


def test_bfp8_blocks_share_their_largest_exponent_and_round_to_nearest_even():
    block = np.full(16, 1.0, np.float32)
    block[0] = 64.0  # the largest exponent in the block: steps of 2**(6-6) = 1
    block[1] = 0.25  # below half a step: rounds to zero
    block[2] = 3.75  # rounds up to 4 (tt-metal rounds by default; it truncated only with truncate_bfp_mantissa)
    block[3] = 2.5  # a tie rounds to the even 2
    q = quantize_bfp(block.reshape(1, 16), "bfp_bf8")[0]
    assert q[0] == 64.0 and q[1] == 0.0 and q[2] == 4.0 and q[3] == 2.0 and q[4] == 1.0
    other = quantize_bfp(np.concatenate([block, np.full(16, 0.25, np.float32)]).reshape(1, 32), "bfp_bf8")[0]
    assert np.all(other[16:] == 0.25)  # the next block has its own exponent


def _tt_metal_bfp(value: float, shared_exp: int, width: int, exp_a: bool) -> float:
    """One element through tt-metal's convert_u32_to_bfp then convert_bfp_to_u32, written out
    scalar as blockfloat_common.cpp does it (the reference for the vectorised packer)."""
    bits = int(np.float32(value).view(np.uint32))
    if bits & 0x7FFFFFFF == 0:
        return 0.0
    mantissa, exp, sign = bits & 0x7FFFFF, (bits >> 23) & 0xFF, bits >> 31
    if exp_a:
        se = exp - 127 + 15
        if se > 31:
            se, mantissa = 31, 0x7FFFFF
        elif se < 0:
            se, mantissa = 0, 0
        exp = se
    mantissa = ((1 << 23) | mantissa) >> min(shared_exp - exp, 63)
    shift = 24 - width
    round_value, mantissa = mantissa & ((1 << shift) - 1), mantissa >> shift
    if round_value > (1 << (shift - 1)) or (round_value == (1 << (shift - 1)) and mantissa & 1):
        mantissa += 1
    mantissa = min(mantissa, (1 << width) - 1)
    if mantissa == 0:
        return 0.0
    magnitude = mantissa * 2.0 ** (shared_exp - (15 if exp_a else 127) - (width - 1))
    return -magnitude if sign else magnitude


@pytest.mark.parametrize("fmt, width, exp_a", [("bfp_bf8", 7, False), ("bfp_bf4", 3, False), ("bfp_bf2", 1, False),
                                               ("bfp_f8", 7, True), ("bfp_f4", 3, True), ("bfp_f2", 1, True)])
def test_bfp_packing_matches_tt_metal_element_by_element(fmt, width, exp_a):
    x = (RNG.standard_normal((8, 48)) * 10.0 ** RNG.uniform(-7, 6, (8, 48))).astype(np.float32)
    got = quantize_bfp(x, fmt)
    for r in range(x.shape[0]):
        for b in range(0, 48, 16):
            block = x[r, b:b + 16]
            exps = (block.view(np.uint32) >> 23) & 0xFF
            shared = int(np.clip(exps.astype(int) - 127 + 15, 0, 31).max()) if exp_a else int(exps.max())
            want = [_tt_metal_bfp(v, shared, width, exp_a) for v in block]
            np.testing.assert_array_equal(got[r, b:b + 16], np.array(want, np.float32))


def test_bfp_error_grows_as_mantissa_bits_shrink():
    x = RNG.standard_normal((64, 64)).astype(np.float32)
    errors = [np.abs(quantize_bfp(x, f) - x).mean() for f in ("bfp_bf8", "bfp_bf4", "bfp_bf2")]
    assert errors[0] < errors[1] < errors[2]
    step = np.ldexp(1.0, np.frexp(np.abs(x).reshape(-1, 16)).__getitem__(1).max(axis=1) - 7)
    error = np.abs(quantize_bfp(x, "bfp_bf8") - x).reshape(-1, 16)
    assert np.all(error.max(axis=1) <= step)  # a full step only where the largest value clamps
    assert np.mean(error <= step[:, None] / 2) > 0.99  # otherwise rounded: within half a step


def test_store_formats():
    assert store(np.array([3.7, -2.2]), "si32").tolist() == [3, -2]
    assert store(np.array([1e10]), "si32").tolist() == [np.iinfo(np.int32).max]
    assert store(np.array([1.00001]), "bf16")[0] == 1.0


def test_math_fidelity_and_accumulation():
    a = RNG.standard_normal((64, 256)).astype(np.float32)
    b = RNG.standard_normal((256, 64)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    errors = {f: np.abs(fidelity_matmul(a, b, f, True) - exact).mean() for f in ("lofi", "hifi2", "hifi3", "hifi4")}
    assert errors["lofi"] > errors["hifi2"] > errors["hifi4"]
    # the matrix engine rounds each group of 8 products to the largest one's grid: near TF32 products, not at them
    assert np.abs(fidelity_matmul(a, b, "hifi4", True) - to_tf32(a) @ src_a(b)).max() < 0.2
    bf16_sum = fidelity_matmul(a, b, "hifi4", False)  # without fp32_dest_acc_en the running sum is bf16
    np.testing.assert_array_equal(bf16_sum, round_bf16(bf16_sum))
    assert np.abs(bf16_sum - exact).mean() > 1.5 * errors["hifi4"]  # bf16 partial sums add their own error
