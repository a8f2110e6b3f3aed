"""Kernels added for the corpus's TTNN ops, each against numpy / torch / XLA, and control flow run
from programs tt-mlir compiled (tests/data/ttnn_*.mlir are real compiler output)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from opbyop.device.formats import round_bf16
from opbyop.device.kernels import KERNELS, Call
from opbyop.device.layout import Layout
from opbyop.device.program import Op, TensorType
from opbyop.device.simulator import DeviceSimulator

DATA = Path(__file__).parent / "data"
RNG = np.random.default_rng(7)


def ttype(shape: tuple, fmt: str = "f32") -> TensorType:
    return TensorType(tuple(shape), fmt, Layout(tiled=True, dtype=fmt))


def run(name: str, inputs: list, outs: list[TensorType] | tuple, formats: list[str] | None = None, **attrs) -> list:
    """One kernel the way the executor calls it; `outs` are result types (or one result shape)."""
    formats = formats or ["f32"] * len(inputs)
    out_types = outs if isinstance(outs, list) else [ttype(outs)]
    op = Op(name=name, operands=list(range(len(inputs))), results=list(range(len(inputs), len(inputs) + len(out_types))),
            operand_types=[ttype(np.shape(x), f) if x is not None else None for x, f in zip(inputs, formats)],
            result_types=out_types, attrs=attrs)
    return [np.asarray(v) for v in KERNELS[name](Call(op=op, inputs=inputs, out_types=out_types))]


# -- gathers and scatters as tt-mlir lowers them ---------------------------------------------------
def test_rows_gather_windows_clamp_their_start_like_stablehlo_gather():
    x = RNG.standard_normal((1, 6, 9)).astype(np.float32)
    starts = np.array([[[0, 5, 4], [2, 8, -3]]], np.int32)  # 3 vectors over (6, 9); two run off the edge
    got = run("ttnn.rows_gather", [x, starts], (1, 3, 2, 3), column=True, sizes=[6, 9], windows=[2, 3])[0]
    for i, (r, c) in enumerate(zip(starts[0, 0], starts[0, 1])):
        r, c = min(max(r, 0), 4), min(max(c, 0), 6)  # clamped into the operand, as gather does
        np.testing.assert_array_equal(got[0, i], x[0, r:r + 2, c:c + 3])


def test_rows_gather_fill_out_of_bounds_reads_zeros():
    x = RNG.standard_normal((1, 5, 4)).astype(np.float32)
    ids = np.array([[[1, 7, 4]]], np.int32)
    got = run("ttnn.rows_gather", [x, ids], (1, 3, 4), column=False, sizes=[5], windows=[1], fill_out_of_bounds=True)[0]
    np.testing.assert_array_equal(got[0], np.stack([x[0, 1], np.zeros(4, np.float32), x[0, 4]]))


@pytest.mark.parametrize("reduce, combine", [("invalid", None), ("sum", torch.Tensor.index_add_)])
def test_rows_scatter_rows_like_torch(reduce, combine):
    x = RNG.standard_normal((1, 8, 4)).astype(np.float32)
    ids = np.array([[[3, 5, 3]]], np.int32)  # a repeated row: replace keeps the last, sum adds both
    updates = RNG.standard_normal((1, 3, 4)).astype(np.float32)
    got = run("ttnn.rows_scatter", [x, ids, updates], (1, 8, 4), column=False, sizes=[8], windows=[1],
              reduce=reduce)[0]
    want = torch.from_numpy(x[0].copy())
    if combine is None:
        for i, row in enumerate(ids.reshape(-1)):
            want[row] = torch.from_numpy(updates[0, i])
    else:
        want.index_add_(0, torch.from_numpy(ids.reshape(-1)).long(), torch.from_numpy(updates[0]))
    np.testing.assert_allclose(got[0], want.numpy(), rtol=1e-6)


def test_rows_scatter_window_is_dynamic_update_slice_and_out_of_range_windows_are_skipped():
    x = RNG.standard_normal((1, 3, 50)).astype(np.float32)
    update = RNG.standard_normal((1, 20)).astype(np.float32)
    got = run("ttnn.rows_scatter", [x, np.array([[[1], [33]]], np.int32), update], (1, 3, 50), column=True,
              sizes=[3, 50], windows=[2, 10], reduce="invalid")[0]
    want = x.copy()
    want[0, 1:3, 33:43] = update.reshape(2, 10)
    np.testing.assert_array_equal(got, want)
    skipped = run("ttnn.rows_scatter", [x, np.array([[[2], [45]]], np.int32), update], (1, 3, 50), column=True,
                  sizes=[3, 50], windows=[2, 10], reduce="invalid")[0]
    np.testing.assert_array_equal(skipped, x)


def test_rows_scatter_elements_with_max():
    x = np.zeros((1, 5, 7), np.float32)
    coords = np.array([[[0, 4, 0], [6, 2, 6]]], np.int32)
    updates = np.array([[1.0, 2.0, 3.0]], np.float32)
    got = run("ttnn.rows_scatter", [x, coords, updates], (1, 5, 7), column=True, sizes=[5, 7], windows=[1, 1],
              reduce="max")[0]
    assert got[0, 0, 6] == 3.0 and got[0, 4, 2] == 2.0 and np.count_nonzero(got) == 2


def test_slice_dynamic():
    x = RNG.standard_normal((3, 50)).astype(np.float32)
    got = run("ttnn.slice_dynamic", [x, np.array([1, 7], np.uint32), np.array([3, 17], np.uint32)], (2, 10))[0]
    np.testing.assert_array_equal(got, x[1:3, 7:17])


# -- sort, topk ------------------------------------------------------------------------------------
@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_stable_like_torch(descending):
    x = RNG.integers(0, 5, (3, 40)).astype(np.float32)  # many ties: stability decides the indices
    values, indices = run("ttnn.sort", [x], [ttype((3, 40)), ttype((3, 40), "u16")], dim=1, descending=descending,
                          stable=True)
    want = torch.sort(torch.from_numpy(x), dim=1, descending=descending, stable=True)
    np.testing.assert_array_equal(values, want.values.numpy())
    np.testing.assert_array_equal(indices, want.indices.numpy())


def test_topk_matches_torch():
    x = RNG.standard_normal((4, 33)).astype(np.float32)
    values, indices = run("ttnn.topk", [x], [ttype((4, 5)), ttype((4, 5), "u16")], k=5, dim=1, largest=True)
    want = torch.topk(torch.from_numpy(x), 5, dim=1)
    np.testing.assert_array_equal(values, want.values.numpy())
    np.testing.assert_array_equal(indices, want.indices.numpy())


# -- bits and precision ----------------------------------------------------------------------------
def test_bitcast_convert_reinterprets_the_stored_bits():
    x = RNG.standard_normal(13).astype(np.float32)
    got = run("ttnn.bitcast_convert", [x], [ttype((13,), "si32")])[0]
    np.testing.assert_array_equal(got, x.view(np.int32))
    back = run("ttnn.bitcast_convert", [got], [ttype((13,), "f32")], formats=["si32"])[0]
    np.testing.assert_array_equal(back, x)
    bf16 = torch.from_numpy(x).bfloat16()
    got16 = run("ttnn.bitcast_convert", [bf16.float().numpy()], [ttype((13,), "u16")], formats=["bf16"])[0]
    np.testing.assert_array_equal(got16, bf16.view(torch.int16).numpy().view(np.uint16))


@pytest.mark.parametrize("exponent_bits, mantissa_bits", [(5, 2), (5, 10), (8, 7), (4, 3)])
def test_reduce_precision_matches_xla(exponent_bits, mantissa_bits):
    from opbyop.jaxenv import prepare_jax

    prepare_jax()
    from jax import lax

    x = (RNG.standard_normal(2000) * 10.0 ** RNG.uniform(-9, 6, 2000)).astype(np.float32)
    x = np.concatenate([x, np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 65504, 65520], np.float32)])
    got = run("ttnn.reduce_precision", [x], x.shape, exponent_bits=exponent_bits, mantissa_bits=mantissa_bits)[0]
    want = np.asarray(lax.reduce_precision(x, exponent_bits=exponent_bits, mantissa_bits=mantissa_bits))
    np.testing.assert_array_equal(got, want)


# -- normalisation, convolutions, pooling ------------------------------------------------------------
def test_batch_norm_inference_and_training_match_torch():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    mean, var = RNG.standard_normal((1, 3, 1, 1)).astype(np.float32), RNG.uniform(0.5, 2, (1, 3, 1, 1)).astype(np.float32)
    weight, bias = RNG.standard_normal((1, 3, 1, 1)).astype(np.float32), RNG.standard_normal((1, 3, 1, 1)).astype(np.float32)
    got = run("ttnn.batch_norm_inference", [x, mean, var, weight, bias], x.shape, epsilon=1e-5,
              operandSegmentSizes=[1, 1, 1, 1, 1])[0]
    flat = [torch.from_numpy(v.reshape(-1)) for v in (mean, var, weight, bias)]
    want = F.batch_norm(torch.from_numpy(x), flat[0], flat[1], flat[2], flat[3], training=False, eps=1e-5)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
    out, batch_mean, batch_var = run("ttnn.batch_norm_training", [x, weight, bias],
                                     [ttype(x.shape), ttype((1, 3, 1, 1)), ttype((1, 3, 1, 1))], epsilon=1e-5,
                                     operandSegmentSizes=[1, 0, 0, 1, 1])
    want = F.batch_norm(torch.from_numpy(x), None, None, flat[2], flat[3], training=True, eps=1e-5)
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(batch_var.reshape(-1), x.var(axis=(0, 2, 3)), rtol=1e-5)  # population variance
    np.testing.assert_allclose(batch_mean.reshape(-1), x.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)


def test_conv1d_matches_torch():
    x = RNG.standard_normal((2, 4, 16)).astype(np.float32)  # (N, C, L)
    weight = RNG.standard_normal((6, 2, 3)).astype(np.float32)
    want = F.conv1d(torch.from_numpy(x), torch.from_numpy(weight), stride=2, padding=1, groups=2).numpy()  # (2, 6, 8)
    got = run("ttnn.conv1d", [x.transpose(0, 2, 1).copy(), weight, None], (1, 1, 16, 6), batch_size=2, in_channels=4,
              out_channels=6, input_length=16, kernel_size=3, stride=2, padding=[1, 1], dilation=1, groups=2)[0]
    np.testing.assert_allclose(got.reshape(2, 8, 6).transpose(0, 2, 1), want, rtol=0.02, atol=0.02)


@pytest.mark.parametrize("stride, padding, output_padding, groups", [(2, 0, 0, 1), (2, 1, 1, 2), (1, 1, 0, 1)])
def test_conv_transpose2d_matches_torch(stride, padding, output_padding, groups):
    n, cin, cout, h, w = 2, 4, 6, 5, 4
    x = RNG.standard_normal((n, cin, h, w)).astype(np.float32)
    weight = RNG.standard_normal((cin, cout // groups, 3, 3)).astype(np.float32)
    want = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(weight), stride=stride, padding=padding,
                              output_padding=output_padding, groups=groups).numpy()
    oh, ow = want.shape[2:]
    got = run("ttnn.conv_transpose2d", [x.transpose(0, 2, 3, 1).reshape(1, 1, n * h * w, cin), weight, None],
              (1, 1, n * oh * ow, cout), batch_size=n, in_channels=cin, out_channels=cout, input_height=h,
              input_width=w, kernel_size=[3, 3], stride=[stride, stride], padding=[padding] * 4,
              output_padding=[output_padding] * 2, dilation=[1, 1], groups=groups)[0]
    np.testing.assert_allclose(got.reshape(n, oh, ow, cout).transpose(0, 3, 1, 2), want, rtol=0.02, atol=0.03)


def test_max_pool2d_with_indices_matches_torch():
    n, c, h, w = 2, 3, 8, 6
    x = round_bf16(RNG.standard_normal((n, c, h, w)).astype(np.float32))  # tt-metal pools bf16 only
    values, indices = F.max_pool2d(torch.from_numpy(x), 2, stride=2, padding=1, return_indices=True)
    oh, ow = values.shape[2:]
    got, got_indices = run("ttnn.max_pool2d_with_indices", [x.transpose(0, 2, 3, 1).reshape(1, 1, n * h * w, c)],
                           [ttype((1, 1, n * oh * ow, c)), ttype((1, 1, n * oh * ow, c), "u16")], ["bf16"], batch_size=n,
                           channels=c, input_height=h, input_width=w, kernel_size=[2, 2], stride=[2, 2],
                           padding=[1, 1], dilation=[1, 1], ceil_mode=False)
    np.testing.assert_array_equal(got.reshape(n, oh, ow, c).transpose(0, 3, 1, 2), values.numpy())
    np.testing.assert_array_equal(got_indices.reshape(n, oh, ow, c).transpose(0, 3, 1, 2), indices.numpy())


def test_rand_is_uniform_in_range_and_seeded():
    a = run("ttnn.rand", [None], (64, 64), low=-2.0, high=3.0, seed=5)[0]
    assert a.min() >= -2.0 and a.max() < 3.0 and abs(a.mean() - 0.5) < 0.1
    np.testing.assert_array_equal(a, run("ttnn.rand", [None], (64, 64), low=-2.0, high=3.0, seed=5)[0])
    assert not np.array_equal(a, run("ttnn.rand", [None], (64, 64), low=-2.0, high=3.0, seed=6)[0])


# -- control flow, on programs tt-mlir compiled -----------------------------------------------------
def test_while_loop_runs_its_body_until_the_condition_fails():
    """stablehlo.while (i < 3: i += 1, x = x + x) compiled for n150: ttcore.while_loop calling two programs."""
    x = RNG.standard_normal((3, 50)).astype(np.float32)
    simulator = DeviceSimulator()
    (count, doubled), run_info = simulator.run((DATA / "ttnn_while_loop.mlir").read_text(), [x])
    assert int(np.asarray(count).reshape(-1)[0]) == 3
    np.testing.assert_array_equal(doubled, x * 8)
    device = next(iter(simulator._devices.values()))
    assert sum(device.memory.dram.used) == 0 and not device.live  # every iteration's state was released


@pytest.mark.parametrize("index, want", [(0, lambda x: x), (1, lambda x: x * x), (7, lambda x: x * x), (-1, lambda x: x * x)])
def test_case_takes_the_indexed_branch_and_the_last_one_out_of_range(index, want):
    """stablehlo.case compiled for n150: branch 0 returns x, branch 1 x * x."""
    x = RNG.standard_normal((3, 50)).astype(np.float32)
    (out,), _ = DeviceSimulator().run((DATA / "ttnn_case.mlir").read_text(), [np.array(index, np.int32), x])
    np.testing.assert_allclose(out, want(x), rtol=1e-6)


# -- what the chip lacks, as the compiled program holds it -------------------------------------------
def test_complex_inputs_reach_the_program_as_real_and_imaginary_words():
    """stablehlo.add on complex64 compiled for n150: arguments and result are tensor<13x2xf32>."""
    a = (RNG.standard_normal(13) + 1j * RNG.standard_normal(13)).astype(np.complex64)
    b = (RNG.standard_normal(13) + 1j * RNG.standard_normal(13)).astype(np.complex64)
    (out,), _ = DeviceSimulator().run((DATA / "ttnn_add_complex64.mlir").read_text(), [a, b])
    assert out.shape == (13, 2)
    np.testing.assert_allclose(out[:, 0] + 1j * out[:, 1], a + b, rtol=1e-6)


def test_ui64_add_carries_between_its_32_bit_words():
    """stablehlo.add on ui64 compiled for n150: two u32 words per value; the program computes the
    carry of the low words with bitwise ops and a logical right shift by 31."""
    a = np.array([2**32 - 1, 2**33 + 5, 7, 2**63, 2**64 - 1] + [3] * 8, np.uint64)
    b = np.array([1, 2**32 - 1, 2**40, 2**63 - 1, 0] + [4] * 8, np.uint64)
    (out,), _ = DeviceSimulator().run((DATA / "ttnn_add_ui64.mlir").read_text(), [a, b])
    words = np.ascontiguousarray(out.astype(np.uint32))
    np.testing.assert_array_equal(words.view(np.uint64).reshape(-1), a + b)


def test_remainder_takes_the_divisor_sign_like_tt_metal():
    a = np.array([-7.5, 7.5, -7.5, 3.0, 1.0], np.float32)
    b = np.array([2.0, -2.0, -2.0, 0.0, 3.0], np.float32)
    got = run("ttnn.remainder", [a, b], a.shape)[0]
    np.testing.assert_array_equal(got[[0, 1, 2, 4]], torch.remainder(torch.from_numpy(a), torch.from_numpy(b)).numpy()[[0, 1, 2, 4]])
    assert np.isnan(got[3])
    ints = run("ttnn.remainder", [np.array([-7, 7], np.int32), np.array([2, -2], np.int32)], (2,), formats=["si32", "si32"])[0]
    np.testing.assert_array_equal(ints, [1, -1])


def test_right_shifts_logical_and_arithmetic():
    a, s = np.array([-16, 16, -1], np.int32), np.array([2, 2, 31], np.int32)
    logical = run("ttnn.logical_right_shift", [a, s], (3,), formats=["si32", "si32"])[0]
    np.testing.assert_array_equal(logical, (a.view(np.uint32) >> s.astype(np.uint32)).view(np.int32))
    arithmetic = run("ttnn.bitwise_right_shift", [a, s], (3,), formats=["si32", "si32"])[0]
    np.testing.assert_array_equal(arithmetic, [-4, 4, -1])


def test_scalars_stay_rank_0_in_every_format():
    from opbyop.device.formats import store

    for fmt in ("f32", "bf16", "f16", "bfp_bf8", "si32", "u32"):
        assert store(np.array(1.25, np.float32), fmt).shape == (), fmt


def test_outputs_reach_the_host_in_the_framework_type_the_program_records():
    """stablehlo.add on i1 compiled for n150 computes in bf16 (true + true = 2.0); the runtime hands
    the framework an i1 (`ttcore.local_shape`), nonzero being true, as a C++ cast would."""
    a = np.array([True, True, False, False] * 3 + [True])
    b = np.array([True, False, True, False] * 3 + [True])
    (out,), _ = DeviceSimulator().run((DATA / "ttnn_add_i1.mlir").read_text(), [a, b])
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, a | b)


def test_host_conversion_wraps_integers_and_keeps_two_word_values():
    from opbyop.device.runtime import as_host_type

    i8 = TensorType((3,), "i8", None)
    np.testing.assert_array_equal(as_host_type(np.array([512, 127, 129], np.int32), i8), [0, 127, -127])
    np.testing.assert_array_equal(as_host_type(np.array([2.0, 0.0, -0.5], np.float32), TensorType((3,), "i1", None)),
                                  [True, False, True])
    words = np.zeros((3, 2), np.uint32)
    assert as_host_type(words, TensorType((3,), "ui64", None)) is words  # two words each: the comparison reads them
    # a rank-0 boolean the device holds as one bf16 element: true + true computed as 2 is true
    assert as_host_type(np.array([2.0], np.float32), TensorType((), "i1", None)).tolist() == [True]


def test_integer_fill_keeps_its_bits_in_an_unsigned_tensor():
    from opbyop.device.formats import store

    filled = run("ttnn.full", [None], [ttype((2,), "u32")], fill_value=-7, shape="2")[0]
    np.testing.assert_array_equal(store(filled, "u32"), [2**32 - 7] * 2)
    assert store(run("ttnn.full", [None], [ttype((2,), "u32")], fill_value=-7.5, shape="2")[0], "u32").tolist() == [0, 0]


def test_rng_bit_generator_gives_state_and_bits_of_the_declared_shapes():
    state = np.array([[1, 0], [2, 0]], np.uint32)
    outs = [ttype((2, 2), "u32"), ttype((3, 50), "u32")]
    new_state, bits = run("ttnn.rng_bit_generator", [state], outs, formats=["u32"], philox=False)
    assert new_state.shape == (2, 2) and bits.shape == (3, 50) and not np.array_equal(new_state, state)
    assert len(np.unique(bits)) > 100  # random bits, not a constant
    np.testing.assert_array_equal(bits, run("ttnn.rng_bit_generator", [state], outs, formats=["u32"])[1])
