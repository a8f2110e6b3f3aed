"""Every simulator kernel against the reference reading of the same TTNN op, on random shapes,
dimension choices, dtypes and layouts (hypothesis), with the chip's numerics off: both must say
what the op means. A kernel that reads its operand the wrong way round fails here before it
reaches a user."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opbyop.analysis.attribution import agree
from opbyop.device.formats import store
from opbyop.device.kernels import KERNELS, Call
from opbyop.device.layout import Layout
from opbyop.device.program import Op, TensorType
from opbyop.device.reference import SEMANTICS, fit

PROPERTY = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FLOAT_FORMATS = ("f32", "bf16", "bfp_bf8")  # what the numerics-off kernels must all read as plain values


def ttype(shape: tuple[int, ...], dtype: str, storage: str | None = None, tiled: bool = True) -> TensorType:
    return TensorType(tuple(shape), dtype, Layout(tiled=tiled, dtype=storage or dtype))


def both_readings(name: str, inputs: list[np.ndarray], operand_types: list[TensorType], result_types: list[TensorType],
                  **attrs) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(kernel's results as the executor stores them with the chip's numerics off, the reference's)."""
    op = Op(name=name, operands=list(range(len(inputs))), results=[len(inputs) + i for i in range(len(result_types))],
            operand_types=list(operand_types), result_types=list(result_types), attrs=attrs)
    held = [store(np.asarray(x), t.storage, chip_numerics=False) for x, t in zip(inputs, operand_types)]
    values = KERNELS[name](Call(op=op, inputs=held, out_types=op.result_types, chip_numerics=False))
    kernel = [store(np.asarray(v).reshape(t.shape), t.storage, chip_numerics=False) for v, t in zip(values, result_types)]
    ref_in = [fit(np.asarray(x).astype(np.float64 if np.asarray(x).dtype.kind == "f" else np.int64), t)
              for x, t in zip(held, operand_types)]
    reference = [fit(np.asarray(v).reshape(t.shape), t) for v, t in zip(SEMANTICS[name](ref_in, op), result_types)]
    return kernel, reference


def assert_same(name: str, kernel: list[np.ndarray], reference: list[np.ndarray], context: str) -> None:
    for i, (k, r) in enumerate(zip(kernel, reference)):
        assert agree(k, r), (f"{name} {context}: result {i} differs from the reference, max abs error "
                             f"{np.nanmax(np.abs(k.astype(np.float64) - r.astype(np.float64))) if k.size else 0}")


shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)


def values(draw, shape: tuple[int, ...], dtype: str, low: float = -4, high: float = 4) -> np.ndarray:
    seed = draw(st.integers(0, 2 ** 16))
    rng = np.random.default_rng(seed)
    if dtype == "si32":
        return rng.integers(int(low) * 3, int(high) * 3 + 1, shape).astype(np.int32)
    return rng.uniform(low, high, shape).astype(np.float32)


def test_every_simulated_op_has_a_reference_reading():
    assert sorted(set(KERNELS) - set(SEMANTICS)) == []


# -- element-wise -------------------------------------------------------------------------------
ARITHMETIC = ["ttnn.add", "ttnn.subtract", "ttnn.multiply", "ttnn.maximum", "ttnn.minimum", "ttnn.eq", "ttnn.ne",
              "ttnn.gt", "ttnn.ge", "ttnn.lt", "ttnn.le", "ttnn.logical_and", "ttnn.logical_or", "ttnn.logical_xor"]
FLOAT_ONLY = ["ttnn.divide", "ttnn.atan2", "ttnn.remainder", "ttnn.fmod"]
INT_ONLY = ["ttnn.bitwise_and", "ttnn.bitwise_or", "ttnn.bitwise_xor", "ttnn.divide", "ttnn.remainder"]


@st.composite
def broadcast_pair(draw):
    shape = draw(shapes)
    other = tuple(d if draw(st.booleans()) else 1 for d in shape)
    return (shape, other) if draw(st.booleans()) else (other, shape)


@PROPERTY
@given(st.data(), broadcast_pair(), st.sampled_from(["f32", "bf16", "si32"]), st.sampled_from(ARITHMETIC + FLOAT_ONLY + INT_ONLY))
def test_binary_kernels_mean_what_the_reference_reads(data, pair, dtype, name):
    if dtype == "si32" and name in FLOAT_ONLY and name not in INT_ONLY or dtype != "si32" and name in INT_ONLY and name not in FLOAT_ONLY:
        dtype = "f32" if name in FLOAT_ONLY else "si32"
    (sa, sb) = pair
    out = tuple(np.broadcast_shapes(sa, sb))
    program_dtype = "si32" if dtype == "si32" else "f32"
    a, b = values(data.draw, sa, program_dtype), values(data.draw, sb, program_dtype)
    types = [ttype(sa, program_dtype, dtype), ttype(sb, program_dtype, dtype)]
    kernel, reference = both_readings(name, [a, b], types, [ttype(out, program_dtype, dtype)])
    assert_same(name, kernel, reference, f"{sa} {sb} {dtype}")


UNARY_FLOAT = ["ttnn.abs", "ttnn.neg", "ttnn.exp", "ttnn.tanh", "ttnn.sigmoid", "ttnn.silu", "ttnn.gelu", "ttnn.sin",
               "ttnn.cos", "ttnn.erf", "ttnn.floor", "ttnn.ceil", "ttnn.sign", "ttnn.relu", "ttnn.relu6",
               "ttnn.hardsigmoid", "ttnn.atan", "ttnn.expm1", "ttnn.cbrt", "ttnn.round", "ttnn.isfinite",
               "ttnn.logical_not"]
UNARY_POSITIVE = ["ttnn.log", "ttnn.log1p", "ttnn.sqrt", "ttnn.rsqrt", "ttnn.reciprocal"]


@PROPERTY
@given(st.data(), shapes, st.sampled_from(FLOAT_FORMATS), st.sampled_from(UNARY_FLOAT + UNARY_POSITIVE),
       st.booleans())
def test_unary_kernels_mean_what_the_reference_reads(data, shape, storage, name, approximate):
    low = 0.1 if name in UNARY_POSITIVE else -4
    x = values(data.draw, shape, "f32", low=low)
    attrs = {"fast_and_approximate_mode": True} if approximate else {}
    kernel, reference = both_readings(name, [x], [ttype(shape, "f32", storage)], [ttype(shape, "f32", storage)], **attrs)
    assert_same(name, kernel, reference, f"{shape} {storage}")


@PROPERTY
@given(st.data(), shapes, st.sampled_from(["f32", "si32"]))
def test_where_and_clamps_mean_what_the_reference_reads(data, shape, dtype):
    cond, a, b = (values(data.draw, shape, dtype) for _ in range(3))
    t = ttype(shape, dtype)
    assert_same("ttnn.where", *both_readings("ttnn.where", [cond, a, b], [t, t, t], [t]), f"{shape}")
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    assert_same("ttnn.clamp_tensor", *both_readings("ttnn.clamp_tensor", [cond, lo, hi], [t, t, t], [t]), f"{shape}")


# -- reductions -------------------------------------------------------------------------------------
@PROPERTY
@given(st.data(), shapes, st.sampled_from(FLOAT_FORMATS + ("si32",)), st.sampled_from(["sum", "mean", "max", "min"]))
def test_reductions_mean_what_the_reference_reads(data, shape, storage, kind):
    dims = data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True))
    keep = data.draw(st.booleans())
    dtype = "si32" if storage == "si32" else "f32"
    x = values(data.draw, shape, dtype)
    out = tuple(1 if i in dims else d for i, d in enumerate(shape)) if keep else \
        tuple(d for i, d in enumerate(shape) if i not in dims)
    kernel, reference = both_readings(f"ttnn.{kind}", [x], [ttype(shape, dtype, storage)], [ttype(out, dtype, storage)],
                                      dim_arg=sorted(dims), keep_dim=keep)
    assert_same(kind, kernel, reference, f"{shape} over {dims} {storage}")


@PROPERTY
@given(st.data(), shapes)
def test_softmax_cumsum_argmax_sort_and_topk_mean_what_the_reference_reads(data, shape):
    x = values(data.draw, shape, "f32")
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    t = ttype(shape, "f32")
    assert_same("softmax", *both_readings("ttnn.softmax", [x], [t], [t], dimension=dim), f"{shape} {dim}")
    assert_same("cumsum", *both_readings("ttnn.cumsum", [x], [t], [t], dim=dim), f"{shape} {dim}")
    descending = data.draw(st.booleans())
    ints = ttype(shape, "si32")
    assert_same("sort", *both_readings("ttnn.sort", [x], [t], [t, ints], dim=dim, descending=descending), f"{shape}")
    k = data.draw(st.integers(1, shape[dim]))
    top = tuple(k if i == dim % len(shape) else d for i, d in enumerate(shape))
    assert_same("topk", *both_readings("ttnn.topk", [x], [t], [ttype(top, "f32"), ttype(top, "si32")], dim=dim, k=k,
                                       largest=descending), f"{shape} k={k}")


# -- data movement --------------------------------------------------------------------------------
@PROPERTY
@given(st.data(), shapes, st.sampled_from(["f32", "si32"]))
def test_data_movement_kernels_mean_what_the_reference_reads(data, shape, dtype):
    x = values(data.draw, shape, dtype)
    t = ttype(shape, dtype)
    permutation = data.draw(st.permutations(range(len(shape))))
    out = tuple(shape[p] for p in permutation)
    assert_same("permute", *both_readings("ttnn.permute", [x], [t], [ttype(out, dtype)], permutation=list(permutation)), "")
    begins = [data.draw(st.integers(0, d - 1)) for d in shape]
    ends = [data.draw(st.integers(b + 1, d)) for b, d in zip(begins, shape)]
    steps = [data.draw(st.integers(1, 2)) for _ in shape]
    sliced = tuple(len(range(b, e, s)) for b, e, s in zip(begins, ends, steps))
    assert_same("slice", *both_readings("ttnn.slice_static", [x], [t], [ttype(sliced, dtype)], begins=begins, ends=ends,
                                        step=steps), f"{begins}:{ends}:{steps}")
    dim = data.draw(st.integers(0, len(shape) - 1))
    joined = tuple(d * 2 if i == dim else d for i, d in enumerate(shape))
    assert_same("concat", *both_readings("ttnn.concat", [x, x], [t, t], [ttype(joined, dtype)], dim=dim), f"dim {dim}")
    reps = [data.draw(st.integers(1, 2)) for _ in shape]
    assert_same("repeat", *both_readings("ttnn.repeat", [x], [t], [ttype(tuple(a * r for a, r in zip(shape, reps)), dtype)],
                                         repeat_dims=reps), f"{reps}")
    pads = [data.draw(st.integers(0, 2)) for _ in range(2 * len(shape))]
    padded = tuple(d + pads[2 * i] + pads[2 * i + 1] for i, d in enumerate(shape))
    assert_same("pad", *both_readings("ttnn.pad", [x], [t], [ttype(padded, dtype)], padding=pads, value=0), f"{pads}")


# -- indexing: the operand read as (pre, sizes, rest) -------------------------------------------------
@st.composite
def rows_case(draw):
    """An operand (pre dims..., sizes..., rest), index vectors per batch (1 or every pre row)."""
    pre = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=2))
    column = draw(st.booleans())
    rest = [] if column else draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
    windows = [draw(st.integers(1, s)) for s in sizes]
    n = draw(st.integers(1, 3))
    batch = draw(st.sampled_from([1, int(np.prod(pre)) if pre else 1]))
    seed = draw(st.integers(0, 2 ** 16))
    dtype = draw(st.sampled_from(["f32", "si32"]))
    return tuple(pre), tuple(sizes), tuple(rest), tuple(windows), n, batch, seed, dtype, column


@PROPERTY
@given(rows_case(), st.sampled_from(["invalid", "sum", "max"]), st.booleans())
def test_row_gathers_and_scatters_mean_what_the_reference_reads(case, reduce, fill):
    pre, sizes, rest, windows, n, batch, seed, dtype, column = case
    rng = np.random.default_rng(seed)
    shape = pre + sizes + rest
    x = (rng.integers(-9, 10, shape) if dtype == "si32" else rng.uniform(-4, 4, shape)).astype(
        np.int32 if dtype == "si32" else np.float32)
    # starts mostly inside the operand, sometimes outside (clamped by gather, skipped by scatter)
    starts = rng.integers(-1, np.array(sizes) - np.array(windows) + 2, (batch, n, len(sizes)))
    indices = starts.transpose(0, 2, 1).astype(np.int32)
    lead = int(np.prod(pre)) if pre else 1
    gathered = pre + (n,) + windows + rest
    attrs = dict(sizes=list(sizes), windows=list(windows), column=column)
    t_x, t_i = ttype(shape, dtype), ttype(indices.shape, "si32")
    kernel, reference = both_readings("ttnn.rows_gather", [x, indices], [t_x, t_i], [ttype(gathered, dtype)],
                                      fill_out_of_bounds=fill, **attrs)
    assert_same("ttnn.rows_gather", kernel, reference, f"operand {shape} sizes {sizes} windows {windows} "
                                                      f"indices {indices.shape} ({lead} rows before, fill {fill})")
    updates = (rng.integers(-9, 10, gathered) if dtype == "si32" else rng.uniform(-4, 4, gathered)).astype(x.dtype)
    kernel, reference = both_readings("ttnn.rows_scatter", [x, indices, updates], [t_x, t_i, ttype(gathered, dtype)],
                                      [t_x], reduce=reduce, **attrs)
    assert_same("ttnn.rows_scatter", kernel, reference, f"operand {shape} sizes {sizes} windows {windows} "
                                                        f"indices {indices.shape} reduce {reduce}")


def test_a_scatter_add_on_the_middle_dimension_matches_the_reference():
    """StableHLO scatter-add, int32 operand 3x5x4 scattered on dimension 1, as tt-mlir lowers it."""
    x = np.arange(60, dtype=np.int32).reshape(3, 5, 4)
    indices = np.array([1, 3], np.int32).reshape(1, 1, 2)
    updates = np.ones((3, 2, 4), np.int32)
    t = ttype((3, 5, 4), "si32")
    kernel, reference = both_readings("ttnn.rows_scatter", [x, indices, updates],
                                      [t, ttype((1, 1, 2), "si32"), ttype((3, 2, 4), "si32")], [t],
                                      reduce="sum", sizes=[5], windows=[1], column=False)
    expected = x.astype(np.int64)
    expected[:, [1, 3], :] += 1
    assert np.array_equal(reference[0], expected) and np.array_equal(kernel[0], expected)


# -- matrix engine ------------------------------------------------------------------------------
@PROPERTY
@given(st.data(), st.integers(1, 3), st.integers(1, 40), st.integers(1, 40), st.integers(1, 40),
       st.sampled_from(FLOAT_FORMATS), st.booleans(), st.booleans())
def test_matmuls_mean_what_the_reference_reads(data, batch, m, k, n, storage, ta, tb):
    a = values(data.draw, (batch, k, m) if ta else (batch, m, k), "f32")
    b = values(data.draw, (batch, n, k) if tb else (batch, k, n), "f32")
    kernel, reference = both_readings("ttnn.matmul", [a, b], [ttype(a.shape, "f32", storage), ttype(b.shape, "f32", storage)],
                                      [ttype((batch, m, n), "f32", storage)], transpose_a=ta, transpose_b=tb,
                                      compute_config={"math_fidelity": "lofi", "fp32_dest_acc_en": False})
    assert_same("ttnn.matmul", kernel, reference, f"{a.shape} @ {b.shape} {storage}")


@PROPERTY
@given(st.data(), st.integers(1, 2), st.integers(3, 7), st.integers(3, 7), st.sampled_from([1, 2]),
       st.integers(1, 3), st.integers(1, 2), st.integers(0, 1))
def test_convolutions_mean_what_the_reference_reads(data, n, h, w, groups, kernel_size, stride, padding):
    cin, cout = 2 * groups, 2 * groups
    x = values(data.draw, (1, 1, n * h * w, cin), "f32")
    weight = values(data.draw, (cout, cin // groups, kernel_size, kernel_size), "f32")
    oh = (h + 2 * padding - kernel_size) // stride + 1
    ow = (w + 2 * padding - kernel_size) // stride + 1
    attrs = dict(batch_size=n, input_height=h, input_width=w, in_channels=cin, out_channels=cout, groups=groups,
                 kernel_size=[kernel_size, kernel_size], stride=[stride, stride], padding=[padding, padding],
                 dilation=[1, 1])
    kernel, reference = both_readings("ttnn.conv2d", [x, weight], [ttype(x.shape, "f32"), ttype(weight.shape, "f32")],
                                      [ttype((1, 1, n * oh * ow, cout), "f32")], **attrs)
    assert_same("ttnn.conv2d", kernel, reference, f"{n}x{h}x{w}x{cin} k{kernel_size} s{stride} p{padding} g{groups}")
    pooled = both_readings("ttnn.max_pool2d", [x], [ttype(x.shape, "f32")], [ttype((1, 1, n * oh * ow, cin), "f32")],
                           batch_size=n, input_height=h, input_width=w, channels=cin,
                           kernel_size=[kernel_size, kernel_size], stride=[stride, stride],
                           padding=[padding, padding], dilation=[1, 1])
    assert_same("ttnn.max_pool2d", *pooled, "")


@pytest.mark.parametrize("name", ["ttnn.rows_gather", "ttnn.rows_scatter"])
def test_the_reference_says_when_it_cannot_read_an_op(name):
    from opbyop.device.reference import Unreadable

    op = Op(name=name, operands=[0, 1], results=[2], operand_types=[None, None],
            result_types=[ttype((6,), "f32")], attrs={"sizes": [4], "windows": [1]})
    with pytest.raises(Unreadable, match="sizes"):
        SEMANTICS[name]([np.zeros(6), np.zeros((1, 1, 1), np.int64), np.zeros(6)], op)


# -- the remaining kernels, one drawn case each ---------------------------------------------------
@PROPERTY
@given(st.data(), st.lists(st.integers(1, 5), min_size=2, max_size=4).map(tuple), st.sampled_from(FLOAT_FORMATS))
def test_normalisations_and_scalar_ops_mean_what_the_reference_reads(data, shape, storage):
    x = values(data.draw, shape, "f32")
    t = ttype(shape, "f32", storage)
    weight = values(data.draw, shape[-1:], "f32")
    bias = values(data.draw, shape[-1:], "f32")
    tw = ttype(shape[-1:], "f32", storage)
    for name in ("ttnn.rms_norm", "ttnn.layer_norm"):
        assert_same(name, *both_readings(name, [x, weight, bias], [t, tw, tw], [t], epsilon=1e-5), f"{shape}")
    checks = {"ttnn.clamp_scalar": dict(min=-1.0, max=2.0), "ttnn.pow_scalar": dict(rhs=2.0),
              "ttnn.leaky_relu": dict(parameter=0.1), "ttnn.reduce_precision": dict(exponent_bits=5, mantissa_bits=4)}
    for name, attrs in checks.items():
        assert_same(name, *both_readings(name, [x], [t], [t], **attrs), f"{shape} {attrs}")
    dim = data.draw(st.integers(0, len(shape) - 1))
    assert_same("transpose", *both_readings("ttnn.transpose", [x], [t], [ttype(tuple(np.swapaxes(x, 0, dim).shape), "f32",
                                                                                 storage)], dim0=0, dim1=dim), "")
    grown = tuple(d * 2 if i == dim else d for i, d in enumerate(shape))
    assert_same("repeat_interleave", *both_readings("ttnn.repeat_interleave", [x], [t], [ttype(grown, "f32", storage)],
                                                    repeats=2, dim=dim), "")
    reduced = tuple(d for i, d in enumerate(shape) if i != dim)
    assert_same("argmax", *both_readings("ttnn.argmax", [x], [t], [ttype(reduced, "si32")], dim=dim), "")
    ints = values(data.draw, shape, "si32")
    ti = ttype(shape, "si32")
    assert_same("prod", *both_readings("ttnn.prod", [ints], [ti], [ttype(reduced, "si32")], dim_arg=[dim]), "")


@PROPERTY
@given(st.data(), st.integers(1, 2), st.integers(2, 5), st.integers(2, 5), st.integers(1, 3), st.integers(1, 2),
       st.integers(0, 1))
def test_pooling_and_transposed_convolutions_mean_what_the_reference_reads(data, n, h, w, k, stride, padding):
    c = 2
    x = values(data.draw, (1, 1, n * h * w, c), "f32")
    tx = ttype(x.shape, "f32")
    window = dict(batch_size=n, input_height=h, input_width=w, channels=c, kernel_size=[k, k], stride=[stride, stride],
                  padding=[padding, padding], dilation=[1, 1])
    if k <= h + 2 * padding and k <= w + 2 * padding and padding <= k // 2:
        oh, ow = (h + 2 * padding - k) // stride + 1, (w + 2 * padding - k) // stride + 1
        out = ttype((1, 1, n * oh * ow, c), "f32")
        assert_same("avg_pool2d", *both_readings("ttnn.avg_pool2d", [x], [tx], [out], **window), "")
        assert_same("max_pool2d_with_indices", *both_readings("ttnn.max_pool2d_with_indices", [x], [tx],
                                                              [out, ttype(out.shape, "si32")], **window), "")
    weight = values(data.draw, (c, c, k, k), "f32")
    oh, ow = (h - 1) * stride - 2 * padding + k, (w - 1) * stride - 2 * padding + k
    if oh > 0 and ow > 0:
        attrs = dict(batch_size=n, input_height=h, input_width=w, in_channels=c, out_channels=c, groups=1,
                     kernel_size=[k, k], stride=[stride, stride], padding=[padding, padding], dilation=[1, 1],
                     output_padding=[0, 0])
        assert_same("conv_transpose2d", *both_readings("ttnn.conv_transpose2d", [x, weight], [tx, ttype(weight.shape, "f32")],
                                                       [ttype((1, 1, n * oh * ow, c), "f32")], **attrs), "")
    assert_same("global_avg_pool2d", *both_readings("ttnn.global_avg_pool2d", [x.reshape(n, h, w, c)],
                                                    [ttype((n, h, w, c), "f32")], [ttype((n, 1, 1, c), "f32")]), "")


@PROPERTY
@given(st.data(), st.integers(1, 6), st.integers(1, 4), st.lists(st.integers(1, 3), min_size=1, max_size=2).map(tuple))
def test_embeddings_and_creation_mean_what_the_reference_reads(data, rows, width, ids_shape):
    table = values(data.draw, (rows, width), "f32")
    ids = np.asarray(data.draw(st.lists(st.integers(0, rows - 1), min_size=int(np.prod(ids_shape)),
                                        max_size=int(np.prod(ids_shape))))).reshape(ids_shape).astype(np.int32)
    out = ttype(ids_shape + (width,), "f32")
    assert_same("embedding", *both_readings("ttnn.embedding", [ids, table], [ttype(ids_shape, "si32"),
                                                                            ttype(table.shape, "f32")], [out]), "")
    assert_same("full", *both_readings("ttnn.full", [], [], [out], fill_value=2.5), "")
    assert_same("arange", *both_readings("ttnn.arange", [], [], [ttype((rows,), "si32")], start=0, end=rows, step=1), "")
