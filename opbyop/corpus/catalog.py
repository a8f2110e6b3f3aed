"""The StableHLO op set as corpus cases: each op with the element types the spec admits for it.

Source of the op list and the type constraints: the StableHLO specification (openxla/stablehlo
docs/spec.md, "Ops"). Ops without single-device meaning (infeed, outfeed, send, recv, after_all,
create_token), deprecated ops (broadcast, dot, einsum, unary_einsum, torch_index_select,
cross-replica-sum), tuples, composites, custom calls and quantized types are left out: XLA:CPU,
the golden reference, has no single-op answer for them. Everything else is in, also ops tt-mlir
has no conversion for: the compiler's refusal is a verdict worth recording.
"""

from __future__ import annotations

from typing import Callable, Iterator

from opbyop.corpus.case import Case, Form, Operand, Role, TType

FLOATS = ("f32", "bf16", "f16", "f64")
SIGNED = ("i8", "i16", "i32", "i64")
UNSIGNED = ("ui8", "ui32", "ui64")
INTS = SIGNED + UNSIGNED
BOOL = ("i1",)
COMPLEX = ("complex<f32>",)
ALL_DTYPES = FLOATS + BOOL + INTS + COMPLEX

# Shapes: a rank-0 scalar, an unaligned vector, an unaligned matrix (tile padding), an aligned 3-D.
ELEMENTWISE_SHAPES: tuple[tuple[int, ...], ...] = ((), (13,), (3, 50), (2, 32, 64))

Builder = Callable[[str], Iterator[Case]]


def _t(shape: tuple[int, ...], dtype: str) -> TType:
    return TType(tuple(shape), dtype)


def _real(dtype: str) -> str:
    return {"complex<f32>": "f32", "complex<f64>": "f64"}.get(dtype, dtype)


def _scalar_region(op: str, dtype: str, args: int = 2) -> str:
    """A reduction body `^bb0(%x, %y): %z = op %x, %y; return %z` over rank-0 tensors."""
    t = f"tensor<{dtype}>"
    params = ", ".join(f"%x{i}: {t}" for i in range(args))
    return (f"^bb0({params}):\n      %z = \"stablehlo.{op}\"(%x0, %x1) : ({t}, {t}) -> {t}\n"
            f"      \"stablehlo.return\"(%z) : ({t}) -> ()\n    ")


def _compare_region(direction: str, dtype: str) -> str:
    t = f"tensor<{dtype}>"
    return (f"^bb0(%x0: {t}, %x1: {t}):\n      %z = \"stablehlo.compare\"(%x0, %x1) "
            f"{{comparison_direction = #stablehlo<comparison_direction {direction}>}} : ({t}, {t}) -> tensor<i1>\n"
            f"      \"stablehlo.return\"(%z) : (tensor<i1>) -> ()\n    ")


# -- element-wise ------------------------------------------------------------------------------
# op -> (admitted dtypes, operand indices drawn positive, result dtype rule)
_UNARY: dict[str, tuple[tuple[str, ...], bool]] = {
    "abs": (FLOATS + SIGNED + COMPLEX, False), "cbrt": (FLOATS + COMPLEX, True), "ceil": (FLOATS, False),
    "cosine": (FLOATS + COMPLEX, False), "exponential": (FLOATS + COMPLEX, False),
    "exponential_minus_one": (FLOATS + COMPLEX, False), "floor": (FLOATS, False),
    "log": (FLOATS + COMPLEX, True), "log_plus_one": (FLOATS + COMPLEX, True),
    "logistic": (FLOATS + COMPLEX, False), "negate": (FLOATS + INTS + COMPLEX, False),
    "not": (BOOL + INTS, False), "popcnt": (INTS, False), "count_leading_zeros": (INTS, False),
    "round_nearest_afz": (FLOATS, False), "round_nearest_even": (FLOATS, False),
    "rsqrt": (FLOATS + COMPLEX, True), "sign": (FLOATS + SIGNED + COMPLEX, False),
    "sine": (FLOATS + COMPLEX, False), "sqrt": (FLOATS + COMPLEX, True), "tan": (FLOATS + COMPLEX, False),
    "tanh": (FLOATS + COMPLEX, False), "real": (FLOATS + COMPLEX, False), "imag": (FLOATS + COMPLEX, False),
    "is_finite": (FLOATS, False),
}
_BINARY: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {
    "add": (ALL_DTYPES, ()), "subtract": (FLOATS + INTS + COMPLEX, ()), "multiply": (ALL_DTYPES, ()),
    "divide": (FLOATS + INTS + COMPLEX, (1,)), "remainder": (FLOATS + INTS, (1,)),
    "power": (FLOATS + INTS + COMPLEX, (0,)), "maximum": (FLOATS + BOOL + INTS, ()),
    "minimum": (FLOATS + BOOL + INTS, ()), "atan2": (FLOATS + COMPLEX, (1,)), "and": (BOOL + INTS, ()),
    "or": (BOOL + INTS, ()), "xor": (BOOL + INTS, ()), "shift_left": (INTS, ()),
    "shift_right_arithmetic": (INTS, ()), "shift_right_logical": (INTS, ()),
}
_COMPARE_DIRECTIONS = ("EQ", "NE", "GE", "GT", "LE", "LT")


def unary(op: str) -> Builder:
    dtypes, positive = _UNARY[op]

    def build(dtype: str) -> Iterator[Case]:
        if dtype not in dtypes:
            return
        out = {"abs": _real(dtype), "real": _real(dtype), "imag": _real(dtype), "is_finite": "i1"}.get(op, dtype)
        for shape in ELEMENTWISE_SHAPES:
            yield Case(op, "", dtype, (Operand(_t(shape, dtype), positive=positive),), (_t(shape, out),))
    return build


def binary(op: str) -> Builder:
    dtypes, positive = _BINARY[op]

    def build(dtype: str) -> Iterator[Case]:
        if dtype not in dtypes:
            return
        for shape in ELEMENTWISE_SHAPES:
            operands = tuple(Operand(_t(shape, dtype), positive=i in positive) for i in range(2))
            yield Case(op, "", dtype, operands, (_t(shape, dtype),))
    return build


def compare(dtype: str) -> Iterator[Case]:
    directions = ("EQ", "NE") if dtype.startswith("complex") else _COMPARE_DIRECTIONS
    for direction in directions:
        # every direction on one shape; the first direction on all of them
        shapes = ELEMENTWISE_SHAPES if direction == directions[0] else ((3, 50),)
        for shape in shapes:
            yield Case("compare", direction, dtype, (Operand(_t(shape, dtype)), Operand(_t(shape, dtype))),
                       (_t(shape, "i1"),), attrs=f"comparison_direction = #stablehlo<comparison_direction {direction}>")


def complex_(dtype: str) -> Iterator[Case]:
    if dtype != "f32":
        return
    for shape in ELEMENTWISE_SHAPES[1:]:
        yield Case("complex", "", "f32", (Operand(_t(shape, "f32")), Operand(_t(shape, "f32"))),
                   (_t(shape, "complex<f32>"),))


def select(dtype: str) -> Iterator[Case]:
    for shape in ELEMENTWISE_SHAPES:
        yield Case("select", "", dtype, (Operand(_t(shape, "i1")), Operand(_t(shape, dtype)), Operand(_t(shape, dtype))),
                   (_t(shape, dtype),))


def clamp(dtype: str) -> Iterator[Case]:
    if dtype not in FLOATS + INTS:
        return
    for shape in ELEMENTWISE_SHAPES[1:]:
        t = _t(shape, dtype)
        yield Case("clamp", "", dtype, (Operand(t), Operand(t), Operand(t)), (t,))
    t = _t((3, 50), dtype)
    yield Case("clamp", "scalar_bounds", dtype, (Operand(_t((), dtype)), Operand(t), Operand(_t((), dtype))), (t,))


def convert(dtype: str) -> Iterator[Case]:
    """dtype -> f32 and f32 -> dtype (to and from every element type through the common one)."""
    for shape in ((13,), (3, 50)):
        if dtype != "f32":
            yield Case("convert", "to_f32", dtype, (Operand(_t(shape, dtype)),), (_t(shape, "f32"),))
        yield Case("convert", "from_f32", dtype, (Operand(_t(shape, "f32")),), (_t(shape, dtype),))
    if dtype in INTS + BOOL:
        yield Case("convert", "to_i32", dtype, (Operand(_t((3, 50), dtype)),), (_t((3, 50), "i32"),))


_SAME_WIDTH = {"f32": "i32", "i32": "f32", "ui32": "f32", "f16": "i16", "bf16": "i16", "i16": "bf16",
               "f64": "i64", "i64": "f64", "ui64": "i64", "i8": "ui8", "ui8": "i8"}


def bitcast_convert(dtype: str) -> Iterator[Case]:
    other = _SAME_WIDTH.get(dtype)
    if other is None:
        return
    for shape in ((13,), (3, 50)):
        yield Case("bitcast_convert", f"to_{other}", dtype, (Operand(_t(shape, dtype)),), (_t(shape, other),))


def reduce_precision(dtype: str) -> Iterator[Case]:
    if dtype not in FLOATS:
        return
    for shape in ((13,), (3, 50)):
        yield Case("reduce_precision", "e5m2", dtype, (Operand(_t(shape, dtype)),), (_t(shape, dtype),),
                   attrs="exponent_bits = 5 : i32, mantissa_bits = 2 : i32")


def map_(dtype: str) -> Iterator[Case]:
    if dtype not in FLOATS + INTS:
        return
    t = _t((3, 50), dtype)
    yield Case("map", "add", dtype, (Operand(t), Operand(t)), (t,), attrs="dimensions = array<i64: 0, 1>",
               regions=(_scalar_region("add", dtype),))


# -- data movement -----------------------------------------------------------------------------
def broadcast_in_dim(dtype: str) -> Iterator[Case]:
    for src, dst, dims in (((), (3, 50), ""), ((13,), (13, 4), "0"), ((3, 50), (2, 3, 50), "1, 2"),
                           ((3, 1), (3, 50), "0, 1")):
        yield Case("broadcast_in_dim", "", dtype, (Operand(_t(src, dtype)),), (_t(dst, dtype),),
                   attrs=f"broadcast_dimensions = array<i64{': ' + dims if dims else ''}>")


def reshape(dtype: str) -> Iterator[Case]:
    for src, dst in (((3, 50), (150,)), ((2, 32, 64), (64, 64)), ((13,), (1, 13))):
        yield Case("reshape", "", dtype, (Operand(_t(src, dtype)),), (_t(dst, dtype),))


def transpose(dtype: str) -> Iterator[Case]:
    for src, perm in (((3, 50), (1, 0)), ((2, 32, 64), (2, 0, 1)), ((2, 3, 4, 5), (0, 2, 3, 1))):
        dst = tuple(src[p] for p in perm)
        yield Case("transpose", "", dtype, (Operand(_t(src, dtype)),), (_t(dst, dtype),),
                   attrs=f"permutation = array<i64: {', '.join(map(str, perm))}>")


def reverse(dtype: str) -> Iterator[Case]:
    for shape, dims in (((13,), "0"), ((3, 50), "1"), ((2, 32, 64), "0, 2")):
        yield Case("reverse", "", dtype, (Operand(_t(shape, dtype)),), (_t(shape, dtype),),
                   attrs=f"dimensions = array<i64: {dims}>")


def slice_(dtype: str) -> Iterator[Case]:
    for shape, start, limit, step in (((13,), (1,), (12,), (2,)), ((3, 50), (0, 5), (2, 45), (1, 3)),
                                      ((2, 32, 64), (0, 4, 0), (2, 20, 64), (1, 1, 2))):
        out = tuple(-(-(lim - s) // st) for s, lim, st in zip(start, limit, step))
        arr = lambda v: ", ".join(map(str, v))  # noqa: E731
        yield Case("slice", "", dtype, (Operand(_t(shape, dtype)),), (_t(out, dtype),),
                   attrs=f"start_indices = array<i64: {arr(start)}>, limit_indices = array<i64: {arr(limit)}>, "
                         f"strides = array<i64: {arr(step)}>")


def pad(dtype: str) -> Iterator[Case]:
    for shape, low, high, interior in (((13,), (2,), (1,), (0,)), ((3, 50), (1, 2), (0, 3), (0, 1)),
                                       ((2, 32, 64), (0, 1, 0), (0, 0, 5), (0, 0, 0))):
        out = tuple(lo + hi + d + max(0, d - 1) * it for d, lo, hi, it in zip(shape, low, high, interior))
        arr = lambda v: ", ".join(map(str, v))  # noqa: E731
        yield Case("pad", "", dtype, (Operand(_t(shape, dtype)), Operand(_t((), dtype))), (_t(out, dtype),),
                   attrs=f"edge_padding_low = array<i64: {arr(low)}>, edge_padding_high = array<i64: {arr(high)}>, "
                         f"interior_padding = array<i64: {arr(interior)}>")


def concatenate(dtype: str) -> Iterator[Case]:
    for a, b, dim in (((13,), (5,), 0), ((3, 50), (3, 14), 1), ((2, 32, 64), (1, 32, 64), 0)):
        out = tuple(x + y if i == dim else x for i, (x, y) in enumerate(zip(a, b)))
        yield Case("concatenate", "", dtype, (Operand(_t(a, dtype)), Operand(_t(b, dtype))), (_t(out, dtype),),
                   attrs=f"dimension = {dim} : i64")


def iota(dtype: str) -> Iterator[Case]:
    if dtype not in FLOATS + INTS:
        return
    for shape, dim in (((13,), 0), ((3, 50), 1), ((2, 32, 64), 1)):
        yield Case("iota", "", dtype, (), (_t(shape, dtype),), attrs=f"iota_dimension = {dim} : i64",
                   forms=(Form.ARGS,))


def dynamic_slice(dtype: str) -> Iterator[Case]:
    for shape, sizes in (((13,), (4,)), ((3, 50), (2, 10)), ((2, 32, 64), (1, 8, 64))):
        starts = tuple(Operand(_t((), "i64"), Role.INDEX, bound=d - s + 1) for d, s in zip(shape, sizes))
        yield Case("dynamic_slice", "", dtype, (Operand(_t(shape, dtype)),) + starts, (_t(sizes, dtype),),
                   attrs=f"slice_sizes = array<i64: {', '.join(map(str, sizes))}>")


def dynamic_update_slice(dtype: str) -> Iterator[Case]:
    for shape, update in (((13,), (4,)), ((3, 50), (2, 10)), ((2, 32, 64), (1, 8, 64))):
        starts = tuple(Operand(_t((), "i64"), Role.INDEX, bound=d - s + 1) for d, s in zip(shape, update))
        yield Case("dynamic_update_slice", "", dtype, (Operand(_t(shape, dtype)), Operand(_t(update, dtype))) + starts,
                   (_t(shape, dtype),))


def gather(dtype: str) -> Iterator[Case]:
    dn = "#stablehlo.gather<offset_dims = [{o}], collapsed_slice_dims = [{c}], start_index_map = [{s}], index_vector_dim = {v}>"
    # rows (embedding lookup), embedding with a 2-D index tensor, single elements by 2-D coordinates
    yield Case("gather", "rows", dtype, (Operand(_t((8, 16), dtype)), Operand(_t((3, 1), "i64"), Role.INDEX, bound=8)),
               (_t((3, 16), dtype),), attrs=f"dimension_numbers = {dn.format(o='1', c='0', s='0', v=1)}, "
                                            "slice_sizes = array<i64: 1, 16>, indices_are_sorted = false")
    yield Case("gather", "embedding", dtype,
               (Operand(_t((10, 4), dtype)), Operand(_t((2, 3), "i32"), Role.INDEX, bound=10)),
               (_t((2, 3, 4), dtype),), attrs=f"dimension_numbers = {dn.format(o='2', c='0', s='0', v=2)}, "
                                              "slice_sizes = array<i64: 1, 4>, indices_are_sorted = false")
    yield Case("gather", "elements", dtype,
               (Operand(_t((5, 7), dtype)), Operand(_t((4, 2), "i64"), Role.INDEX, bound=5)),
               (_t((4,), dtype),), attrs=f"dimension_numbers = {dn.format(o='', c='0, 1', s='0, 1', v=1)}, "
                                         "slice_sizes = array<i64: 1, 1>, indices_are_sorted = false")


def scatter(dtype: str) -> Iterator[Case]:
    dn = ("#stablehlo.scatter<update_window_dims = [{u}], inserted_window_dims = [{i}], "
          "scatter_dims_to_operand_dims = [{s}], index_vector_dim = {v}>")
    replace = (f"^bb0(%x0: tensor<{dtype}>, %x1: tensor<{dtype}>):\n"
               f"      \"stablehlo.return\"(%x1) : (tensor<{dtype}>) -> ()\n    ")
    combine = "or" if dtype == "i1" else "add"
    for variant, region in (("rows_replace", replace), (f"rows_{combine}", _scalar_region(combine, dtype))):
        yield Case("scatter", variant, dtype,
                   (Operand(_t((8, 4), dtype)), Operand(_t((2, 1), "i64"), Role.INDEX, bound=8),
                    Operand(_t((2, 4), dtype))), (_t((8, 4), dtype),),
                   attrs=f"scatter_dimension_numbers = {dn.format(u='1', i='0', s='0', v=1)}, "
                         "indices_are_sorted = false, unique_indices = false", regions=(region,))
    yield Case("scatter", f"elements_{combine}", dtype,
               (Operand(_t((5, 7), dtype)), Operand(_t((3, 2), "i64"), Role.INDEX, bound=5),
                Operand(_t((3,), dtype))), (_t((5, 7), dtype),),
               attrs=f"scatter_dimension_numbers = {dn.format(u='', i='0, 1', s='0, 1', v=1)}, "
                     "indices_are_sorted = false, unique_indices = false", regions=(_scalar_region(combine, dtype),))


def sort(dtype: str) -> Iterator[Case]:
    if dtype.startswith("complex"):
        return
    for shape, dim, direction in (((13,), 0, "LT"), ((3, 50), 1, "GT"), ((2, 32, 64), 2, "LT")):
        yield Case("sort", direction, dtype, (Operand(_t(shape, dtype)),), (_t(shape, dtype),),
                   attrs=f"dimension = {dim} : i64, is_stable = true", regions=(_compare_region(direction, dtype),))
    # keys with their indices (argsort, what torch.sort / topk lower to)
    t = f"tensor<{dtype}>"
    region = (f"^bb0(%x0: {t}, %x1: {t}, %i0: tensor<i32>, %i1: tensor<i32>):\n      %z = \"stablehlo.compare\"(%x0, %x1) "
              f"{{comparison_direction = #stablehlo<comparison_direction GT>}} : ({t}, {t}) -> tensor<i1>\n"
              f"      \"stablehlo.return\"(%z) : (tensor<i1>) -> ()\n    ")
    yield Case("sort", "with_indices", dtype, (Operand(_t((3, 50), dtype)), Operand(_t((3, 50), "i32"))),
               (_t((3, 50), dtype), _t((3, 50), "i32")), attrs="dimension = 1 : i64, is_stable = true",
               regions=(region,))


def get_dimension_size(dtype: str) -> Iterator[Case]:
    yield Case("get_dimension_size", "", dtype, (Operand(_t((3, 50), dtype)),), (_t((), "i32"),),
               attrs="dimension = 1 : i64", forms=(Form.ARGS,))


def optimization_barrier(dtype: str) -> Iterator[Case]:
    t = _t((3, 50), dtype)
    yield Case("optimization_barrier", "", dtype, (Operand(t),), (t,))


# -- reductions ----------------------------------------------------------------------------------
def _reducers(dtype: str) -> list[tuple[str, str, object]]:
    """(name, body op, init value) for the reductions a dtype admits."""
    if dtype == "i1":
        return [("and", "and", True), ("or", "or", False)]
    if dtype.startswith("complex"):
        return [("sum", "add", 0.0)]
    low, high = (float("-inf"), float("inf")) if dtype in FLOATS else (_int_min(dtype), _int_max(dtype))
    return [("sum", "add", 0), ("max", "maximum", low), ("min", "minimum", high), ("prod", "multiply", 1)]


def _int_min(dtype: str) -> int:
    return 0 if dtype.startswith("ui") else -(2 ** (int(dtype[1:]) - 1))


def _int_max(dtype: str) -> int:
    bits = int(dtype.lstrip("ui"))
    return 2 ** bits - 1 if dtype.startswith("ui") else 2 ** (bits - 1) - 1


def reduce(dtype: str) -> Iterator[Case]:
    for name, body, init in _reducers(dtype):
        shapes = (((3, 50), (1,), (3,)), ((2, 32, 64), (0, 2), (32,)), ((13,), (0,), ()))
        for shape, dims, out in shapes if name in ("sum", "max", "and") else shapes[:1]:
            yield Case("reduce", name, dtype,
                       (Operand(_t(shape, dtype)), Operand(_t((), dtype), Role.FIXED, value=init)), (_t(out, dtype),),
                       attrs=f"dimensions = array<i64: {', '.join(map(str, dims))}>",
                       regions=(_scalar_region(body, dtype),))


def reduce_window(dtype: str) -> Iterator[Case]:
    if dtype not in FLOATS + INTS:
        return
    low = float("-inf") if dtype in FLOATS else _int_min(dtype)
    pool = "window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>"
    x = _t((1, 8, 8, 3), dtype)
    yield Case("reduce_window", "max_pool", dtype, (Operand(x), Operand(_t((), dtype), Role.FIXED, value=low)),
               (_t((1, 4, 4, 3), dtype),), attrs=pool, regions=(_scalar_region("maximum", dtype),))
    yield Case("reduce_window", "sum_pool", dtype, (Operand(x), Operand(_t((), dtype), Role.FIXED, value=0)),
               (_t((1, 4, 4, 3), dtype),), attrs=pool, regions=(_scalar_region("add", dtype),))
    # a cumulative sum along the last dimension (what jnp.cumsum lowers to)
    yield Case("reduce_window", "cumsum", dtype, (Operand(_t((3, 13), dtype)), Operand(_t((), dtype), Role.FIXED, value=0)),
               (_t((3, 13), dtype),), attrs="window_dimensions = array<i64: 1, 13>, "
               "padding = dense<[[0, 0], [12, 0]]> : tensor<2x2xi64>", regions=(_scalar_region("add", dtype),))


def select_and_scatter(dtype: str) -> Iterator[Case]:
    if dtype not in FLOATS:
        return
    yield Case("select_and_scatter", "max_pool_grad", dtype,
               (Operand(_t((1, 8, 8, 3), dtype)), Operand(_t((1, 4, 4, 3), dtype)),
                Operand(_t((), dtype), Role.FIXED, value=0)), (_t((1, 8, 8, 3), dtype),),
               attrs="window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>",
               regions=(_compare_region("GE", dtype), _scalar_region("add", dtype)))


# -- matrix engine -------------------------------------------------------------------------------
def dot_general(dtype: str) -> Iterator[Case]:
    if dtype not in FLOATS + INTS + COMPLEX:
        return
    dn = "#stablehlo.dot<lhs_batching_dimensions = [{b}], rhs_batching_dimensions = [{b}], " \
         "lhs_contracting_dimensions = [{lc}], rhs_contracting_dimensions = [{rc}]>"
    for a, b, out, batch, lc, rc in (((32, 64), (64, 32), (32, 32), "", "1", "0"),
                                     ((3, 50), (50, 7), (3, 7), "", "1", "0"),
                                     ((2, 3, 50), (2, 50, 7), (2, 3, 7), "0", "2", "1"),
                                     ((50,), (50, 7), (7,), "", "0", "0")):
        yield Case("dot_general", "", dtype, (Operand(_t(a, dtype)), Operand(_t(b, dtype))), (_t(out, dtype),),
                   attrs=f"dot_dimension_numbers = {dn.format(b=batch, lc=lc, rc=rc)}")


def convolution(dtype: str) -> Iterator[Case]:
    if dtype not in FLOATS + INTS:
        return
    nchw = "#stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>"
    nhwc = "#stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>"

    def conv(variant: str, x: tuple, w: tuple, out: tuple, layout: str, extra: str, groups: int = 1) -> Case:
        return Case("convolution", variant, dtype, (Operand(_t(x, dtype)), Operand(_t(w, dtype))), (_t(out, dtype),),
                    attrs=f"dimension_numbers = {layout}, feature_group_count = {groups} : i64, "
                          f"batch_group_count = 1 : i64, {extra}")
    pad1 = "padding = dense<1> : tensor<2x2xi64>"
    yield conv("nchw_3x3", (1, 3, 8, 8), (4, 3, 3, 3), (1, 4, 8, 8), nchw, f"window_strides = array<i64: 1, 1>, {pad1}")
    yield conv("nhwc_stride2", (1, 8, 8, 3), (3, 3, 3, 4), (1, 4, 4, 4), nhwc, f"window_strides = array<i64: 2, 2>, {pad1}")
    yield conv("depthwise", (1, 4, 8, 8), (4, 1, 3, 3), (1, 4, 6, 6), nchw, "window_strides = array<i64: 1, 1>", groups=4)
    # a transposed convolution (UNet upsampling): lhs dilation 2, the kernel reversed
    yield conv("transposed", (1, 4, 5, 5), (3, 4, 2, 2), (1, 3, 10, 10), nchw,
               "window_strides = array<i64: 1, 1>, lhs_dilation = array<i64: 2, 2>, padding = dense<1> : tensor<2x2xi64>")
    yield Case("convolution", "conv1d", dtype, (Operand(_t((1, 2, 16), dtype)), Operand(_t((4, 2, 3), dtype))),
               (_t((1, 4, 14), dtype),), attrs="dimension_numbers = #stablehlo.conv<[b, f, 0]x[o, i, 0]->[b, f, 0]>, "
               "feature_group_count = 1 : i64, batch_group_count = 1 : i64, window_strides = array<i64: 1>")


def batch_norm(dtype: str) -> Iterator[Case]:
    if dtype not in FLOATS:
        return
    x, c = _t((2, 3, 4, 4), dtype), _t((3,), dtype)
    attrs = "epsilon = 1.000000e-05 : f32, feature_index = 1 : i64"
    yield Case("batch_norm_inference", "", dtype,
               (Operand(x), Operand(c), Operand(c), Operand(c), Operand(c, positive=True)), (x,), attrs=attrs)
    yield Case("batch_norm_training", "", dtype, (Operand(x), Operand(c), Operand(c)), (x, c, c), attrs=attrs)
    yield Case("batch_norm_grad", "", dtype,
               (Operand(x), Operand(c), Operand(c), Operand(c, positive=True), Operand(x)), (x, c, c), attrs=attrs)


# -- linear algebra, random numbers --------------------------------------------------------------
def linalg(dtype: str) -> Iterator[Case]:
    if dtype not in ("f32", "f64", "complex<f32>"):
        return
    m = _t((4, 4), dtype)
    yield Case("cholesky", "", dtype, (Operand(m),), (m,), attrs="lower = true")
    yield Case("triangular_solve", "", dtype, (Operand(m), Operand(_t((4, 3), dtype))), (_t((4, 3), dtype),),
               attrs="left_side = true, lower = true, unit_diagonal = false, "
                     "transpose_a = #stablehlo<transpose NO_TRANSPOSE>")
    if dtype.startswith("complex"):
        yield Case("fft", "", dtype, (Operand(_t((8,), dtype)),), (_t((8,), dtype),),
                   attrs="fft_type = #stablehlo<fft_type FFT>, fft_length = array<i64: 8>")


def rng(dtype: str) -> Iterator[Case]:
    if dtype not in ("f32", "i32"):
        return
    operands = (Operand(_t((), dtype), Role.FIXED, value=0), Operand(_t((), dtype), Role.FIXED, value=1 if dtype == "f32" else 8),
                Operand(_t((2,), "i64"), Role.FIXED, value=(3, 50)))
    yield Case("rng", "uniform", dtype, operands, (_t((3, 50), dtype),),
               attrs="rng_distribution = #stablehlo<rng_distribution UNIFORM>", forms=(Form.ARGS,), tags=("random",))


def rng_bit_generator(dtype: str) -> Iterator[Case]:
    if dtype not in ("ui32", "ui64"):
        return
    yield Case("rng_bit_generator", "", dtype, (Operand(_t((2,), "ui64")),), (_t((2,), "ui64"), _t((3, 50), dtype)),
               attrs="rng_algorithm = #stablehlo<rng_algorithm DEFAULT>", forms=(Form.ARGS,), tags=("random",))


# -- control flow and collectives ----------------------------------------------------------------
def while_(dtype: str) -> Iterator[Case]:
    if dtype not in FLOATS + INTS:
        return
    t = f"tensor<3x50x{dtype}>"
    cond = ("^bb0(%i: tensor<i32>, %x: " + t + "):\n      %n = \"stablehlo.constant\"() {value = dense<3> : tensor<i32>} : () -> tensor<i32>\n"
            "      %z = \"stablehlo.compare\"(%i, %n) {comparison_direction = #stablehlo<comparison_direction LT>} : "
            "(tensor<i32>, tensor<i32>) -> tensor<i1>\n      \"stablehlo.return\"(%z) : (tensor<i1>) -> ()\n    ")
    body = ("^bb0(%i: tensor<i32>, %x: " + t + "):\n      %one = \"stablehlo.constant\"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>\n"
            "      %j = \"stablehlo.add\"(%i, %one) : (tensor<i32>, tensor<i32>) -> tensor<i32>\n"
            f"      %y = \"stablehlo.add\"(%x, %x) : ({t}, {t}) -> {t}\n"
            f"      \"stablehlo.return\"(%j, %y) : (tensor<i32>, {t}) -> ()\n    ")
    yield Case("while", "doubling", dtype, (Operand(_t((), "i32"), Role.FIXED, value=0), Operand(_t((3, 50), dtype))),
               (_t((), "i32"), _t((3, 50), dtype)), regions=(cond, body))


def if_(dtype: str) -> Iterator[Case]:
    if dtype not in ("f32", "bf16", "i32"):
        return
    t = f"tensor<3x50x{dtype}>"
    # the branches use %x0 from outside (captured): the splitter makes it an extra argument
    yield Case("if", "", dtype, (Operand(_t((), "i1")),), (_t((3, 50), dtype),),
               regions=("\n      \"stablehlo.return\"(%x0) : (" + t + ") -> ()\n    ",
                        "\n      %y = \"stablehlo.add\"(%x0, %x0) : (" + t + ", " + t + ") -> " + t +
                        "\n      \"stablehlo.return\"(%y) : (" + t + ") -> ()\n    "),
               captures=(Operand(_t((3, 50), dtype)),))
    yield Case("case", "", dtype, (Operand(_t((), "i32"), Role.INDEX, bound=2),), (_t((3, 50), dtype),),
               regions=("\n      \"stablehlo.return\"(%x0) : (" + t + ") -> ()\n    ",
                        "\n      %y = \"stablehlo.multiply\"(%x0, %x0) : (" + t + ", " + t + ") -> " + t +
                        "\n      \"stablehlo.return\"(%y) : (" + t + ") -> ()\n    "),
               captures=(Operand(_t((3, 50), dtype)),))


def collectives(dtype: str) -> Iterator[Case]:
    if dtype not in ("f32", "bf16"):
        return
    t = _t((4, 32), dtype)
    groups = "replica_groups = dense<[[0]]> : tensor<1x1xi64>"
    yield Case("all_reduce", "sum", dtype, (Operand(t),), (t,), attrs=groups,
               regions=(_scalar_region("add", dtype),))
    yield Case("all_gather", "", dtype, (Operand(t),), (t,), attrs=f"all_gather_dim = 0 : i64, {groups}")
    yield Case("reduce_scatter", "sum", dtype, (Operand(t),), (t,), attrs=f"scatter_dimension = 0 : i64, {groups}",
               regions=(_scalar_region("add", dtype),))
    yield Case("all_to_all", "", dtype, (Operand(t),), (t,),
               attrs=f"split_dimension = 0 : i64, concat_dimension = 0 : i64, split_count = 1 : i64, {groups}")
    yield Case("collective_permute", "", dtype, (Operand(t),), (t,),
               attrs="source_target_pairs = dense<[[0, 0]]> : tensor<1x2xi64>")
    yield Case("collective_broadcast", "", dtype, (Operand(t),), (t,), attrs=groups)


BUILDERS: dict[str, Builder] = {
    **{op: unary(op) for op in _UNARY}, **{op: binary(op) for op in _BINARY},
    "compare": compare, "complex": complex_, "select": select, "clamp": clamp, "convert": convert,
    "bitcast_convert": bitcast_convert, "reduce_precision": reduce_precision, "map": map_,
    "broadcast_in_dim": broadcast_in_dim, "reshape": reshape, "transpose": transpose, "reverse": reverse,
    "slice": slice_, "pad": pad, "concatenate": concatenate, "iota": iota, "dynamic_slice": dynamic_slice,
    "dynamic_update_slice": dynamic_update_slice, "gather": gather, "scatter": scatter, "sort": sort,
    "get_dimension_size": get_dimension_size, "optimization_barrier": optimization_barrier,
    "reduce": reduce, "reduce_window": reduce_window, "select_and_scatter": select_and_scatter,
    "dot_general": dot_general, "convolution": convolution, "batch_norm": batch_norm, "linalg": linalg,
    "rng": rng, "rng_bit_generator": rng_bit_generator, "while": while_, "if": if_, "collectives": collectives,
}


def cases(ops: list[str] | None = None, dtypes: list[str] | None = None) -> Iterator[Case]:
    """Every case of the named builders (all by default) for the named dtypes (all by default)."""
    for name in ops or list(BUILDERS):
        for dtype in dtypes or ALL_DTYPES:
            yield from BUILDERS[name](dtype)
