"""What each TTNN op means, in exact arithmetic: float64 for every float, int64 for every integer.

No tiles, no data formats, no fidelity, no approximations: the plain meaning of the op as tt-mlir's
golden functions define it for TTIR/TTNN (torch semantics: `remainder` takes the divisor's sign,
`gelu` is the erf form unless the op asks for tanh, `round` is half to even, comparisons give 1/0
in the result's type). Written independently of the simulator's kernels (opbyop.device.kernels):
that is the point of it. The interpreter (reference.interpreter) fits every result to the type the
program declares for it (integers wrap to their width, floats beyond their range become infinite):
the dtype a value has is the compiler's decision, so it is part of the program's meaning.

Each function takes (operand values, the op) and returns the result values.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from scipy import special

from opbyop.device.program import Op, dense_values

Semantics = Callable[[list[np.ndarray], Op], list[np.ndarray]]


class Unreadable(Exception):
    """The reference has no reading of this op (or of this form of it): it cannot judge the program."""


def _attr(op: Op, name: str, default: Any = None) -> Any:
    return op.attrs.get(name, default)


def _out_shape(op: Op, index: int = 0) -> tuple[int, ...]:
    t = op.result_types[index]
    if t is None:
        raise Unreadable(f"{op.name}: result {index} has no tensor type")
    return tuple(t.shape)


def _f(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _is_int(x: np.ndarray) -> bool:
    return np.asarray(x).dtype.kind in "iub"


def _both_int(a: np.ndarray, b: np.ndarray) -> bool:
    return _is_int(a) and _is_int(b) and np.asarray(a).dtype.kind != "b" and np.asarray(b).dtype.kind != "b"


# -- element-wise ---------------------------------------------------------------------------------
def _int_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    safe = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(safe) * np.sign(a) * np.sign(safe)  # truncated toward zero
    return np.where(b == 0, 0, q)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if _both_int(a, b):
        return _int_divide(a, b)
    return _f(a) / _f(b)


def _remainder(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """torch.remainder: a - floor(a / b) * b (the divisor's sign); a zero divisor gives NaN (floats), 0 (ints)."""
    if _both_int(a, b):
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        return np.where(b == 0, 0, np.mod(a, np.where(b == 0, 1, b)))
    a, b = _f(a), _f(b)
    return np.where(b == 0, np.nan, np.mod(a, np.where(b == 0, 1.0, b)))


def _fmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if _both_int(a, b):
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        return np.where(b == 0, 0, np.fmod(a, np.where(b == 0, 1, b)))
    return np.fmod(_f(a), _f(b))


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if _both_int(a, b):
        return np.power(np.asarray(a, np.int64), np.maximum(np.asarray(b, np.int64), 0))
    return np.power(_f(a), _f(b))


def _int_or_float(fn_int: Callable, fn_float: Callable) -> Callable:
    def apply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if _both_int(a, b):
            return fn_int(np.asarray(a, np.int64), np.asarray(b, np.int64))
        return fn_float(_f(a), _f(b))
    return apply


def _width(op: Op, index: int = 0) -> int:
    t = op.operand_types[index] if index < len(op.operand_types) else None
    return {"u8": 8, "u16": 16}.get(t.dtype if t is not None else "", 32)


def _logical_right_shift(op: Op) -> Callable:
    def apply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        bits = _width(op)
        unsigned = np.asarray(a, np.int64) & ((1 << bits) - 1)  # the operand's bit pattern, zeros shifted in
        shift = np.asarray(b, np.int64)
        return np.where((shift < 0) | (shift >= bits), 0, unsigned >> np.clip(shift, 0, bits - 1))
    return apply


def _shift_left(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    shift = np.asarray(b, np.int64)
    return np.where((shift < 0) | (shift >= 64), 0, np.asarray(a, np.int64) << np.clip(shift, 0, 63))


def _arithmetic_right_shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.int64) >> np.clip(np.asarray(b, np.int64), 0, 63)


def _binary_table(op: Op) -> dict[str, Callable]:
    return {
        "add": _int_or_float(np.add, np.add), "subtract": _int_or_float(np.subtract, np.subtract),
        "multiply": _int_or_float(np.multiply, np.multiply), "divide": _divide,
        "maximum": _int_or_float(np.maximum, np.maximum), "minimum": _int_or_float(np.minimum, np.minimum),
        "pow": _power, "pow_tensor": _power, "remainder": _remainder, "fmod": _fmod,
        "atan2": lambda a, b: np.arctan2(_f(a), _f(b)),
        "bitwise_and": lambda a, b: np.asarray(a, np.int64) & np.asarray(b, np.int64),
        "bitwise_or": lambda a, b: np.asarray(a, np.int64) | np.asarray(b, np.int64),
        "bitwise_xor": lambda a, b: np.asarray(a, np.int64) ^ np.asarray(b, np.int64),
        "logical_left_shift": _shift_left, "bitwise_left_shift": _shift_left,
        "logical_right_shift": _logical_right_shift(op), "bitwise_right_shift": _arithmetic_right_shift,
        "eq": lambda a, b: _cmp(np.equal, a, b), "ne": lambda a, b: _cmp(np.not_equal, a, b),
        "gt": lambda a, b: _cmp(np.greater, a, b), "ge": lambda a, b: _cmp(np.greater_equal, a, b),
        "lt": lambda a, b: _cmp(np.less, a, b), "le": lambda a, b: _cmp(np.less_equal, a, b),
        "logical_and": lambda a, b: np.logical_and(np.asarray(a) != 0, np.asarray(b) != 0),
        "logical_or": lambda a, b: np.logical_or(np.asarray(a) != 0, np.asarray(b) != 0),
        "logical_xor": lambda a, b: np.logical_xor(np.asarray(a) != 0, np.asarray(b) != 0),
    }


def _cmp(fn: Callable, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if _both_int(a, b):
        return fn(np.asarray(a, np.int64), np.asarray(b, np.int64))
    return fn(_f(a), _f(b))


def _erf_gelu(x: np.ndarray) -> np.ndarray:
    x = _f(x)
    return 0.5 * x * (1.0 + special.erf(x / math.sqrt(2.0)))


def _tanh_gelu(x: np.ndarray) -> np.ndarray:
    x = _f(x)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _keep_int(fn_int: Callable, fn_float: Callable) -> Callable:
    return lambda x: fn_int(np.asarray(x, np.int64)) if _is_int(x) and np.asarray(x).dtype.kind != "b" else fn_float(_f(x))


def _bitwise_not(x: np.ndarray) -> np.ndarray:
    return ~np.asarray(x, np.int64) if _is_int(x) else ~np.trunc(_f(x)).astype(np.int64)


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "abs": _keep_int(np.abs, np.abs), "neg": _keep_int(np.negative, np.negative),
    "sign": _keep_int(np.sign, np.sign), "relu": _keep_int(lambda x: np.maximum(x, 0), lambda x: np.maximum(x, 0.0)),
    "exp": lambda x: np.exp(_f(x)), "log": lambda x: np.log(_f(x)), "log1p": lambda x: np.log1p(_f(x)),
    "expm1": lambda x: np.expm1(_f(x)), "sqrt": lambda x: np.sqrt(_f(x)), "rsqrt": lambda x: 1.0 / np.sqrt(_f(x)),
    "reciprocal": lambda x: 1.0 / _f(x), "cbrt": lambda x: np.cbrt(_f(x)),
    "relu6": lambda x: np.minimum(np.maximum(_f(x), 0.0), 6.0), "gelu": _erf_gelu,
    "silu": lambda x: _f(x) * special.expit(_f(x)), "sigmoid": lambda x: special.expit(_f(x)),
    "tanh": lambda x: np.tanh(_f(x)), "sin": lambda x: np.sin(_f(x)), "cos": lambda x: np.cos(_f(x)),
    "tan": lambda x: np.tan(_f(x)), "atan": lambda x: np.arctan(_f(x)), "erf": lambda x: special.erf(_f(x)),
    "floor": lambda x: np.floor(_f(x)), "ceil": lambda x: np.ceil(_f(x)), "round": lambda x: np.round(_f(x)),
    "isfinite": lambda x: np.isfinite(_f(x)), "logical_not": lambda x: np.asarray(x) == 0,
    "bitwise_not": _bitwise_not, "hardsigmoid": lambda x: np.clip(_f(x) / 6.0 + 0.5, 0.0, 1.0),
}


def _activation(x: np.ndarray, activations: Any) -> np.ndarray:
    """Fused activations (`unary_with_param<op_type = relu, params = [...]>`), applied in order."""
    for act in activations or []:
        kind = act.get("op_type") if isinstance(act, dict) else str(act)
        params = (act.get("params") or []) if isinstance(act, dict) else []
        if kind == "leaky_relu":
            slope = float(params[0]) if params else 0.01
            x = np.where(_f(x) >= 0, _f(x), _f(x) * slope)
        elif kind in _UNARY:
            x = _UNARY[kind](x)
        else:
            raise Unreadable(f"fused activation {kind}")
    return x


def _binary(name: str) -> Semantics:
    def apply(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
        if len(xs) >= 2:
            a, b = xs[0], xs[1]
        else:
            scalar = _attr(op, "rhs", _attr(op, "scalar"))
            if scalar is None:
                raise Unreadable(f"{op.name} without a second operand or scalar")
            a, b = xs[0], np.asarray(scalar)
        a = _activation(a, _attr(op, "input_tensor_a_activations"))
        b = _activation(b, _attr(op, "input_tensor_b_activations"))
        with np.errstate(all="ignore"):
            return [_activation(_binary_table(op)[name](a, b), _attr(op, "activations"))]
    return apply


def _unary(name: str) -> Semantics:
    def apply(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            return [_UNARY[name](xs[0])]
    return apply


def _gelu(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    return [_tanh_gelu(xs[0]) if _attr(op, "approximate") == "tanh" else _erf_gelu(xs[0])]


def _clamp_scalar(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    x = xs[0] if _is_int(xs[0]) else _f(xs[0])
    low, high = _attr(op, "min"), _attr(op, "max")
    out = x if low is None else np.maximum(x, low)
    return [out if high is None else np.minimum(out, high)]


def _clamp_tensor(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    x, low, high = xs[:3]
    return [np.minimum(np.maximum(x, low), high)]


def _pow_scalar(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return [np.power(_f(xs[0]), float(_attr(op, "rhs", 1.0)))]


def _where(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    cond, a, b = xs[:3]
    if not (_is_int(a) and _is_int(b)):
        a, b = _f(a), _f(b)
    return [np.where(np.asarray(cond) != 0, a, b)]


def _leaky_relu(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    slope = float(_attr(op, "parameter", _attr(op, "negative_slope", 0.01)))
    x = _f(xs[0])
    return [np.where(x >= 0, x, x * slope)]


def _reduce_precision(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    """Round to a float with `exponent_bits` and `mantissa_bits`: nearest even mantissa, overflow to
    infinity, values below the smallest normal to zero (no denormals), as XLA defines the op."""
    e_bits, m_bits = int(_attr(op, "exponent_bits")), int(_attr(op, "mantissa_bits"))
    x = np.asarray(xs[0], np.float32).astype(np.float64)
    mantissa, exponent = np.frexp(x)  # x = mantissa * 2**exponent, 0.5 <= |mantissa| < 1
    scale = 2.0 ** (m_bits + 1)
    rounded = np.ldexp(np.round(mantissa * scale) / scale, exponent)  # np.round: half to even
    bias = 2 ** (e_bits - 1) - 1
    with np.errstate(all="ignore"):
        top = np.abs(rounded) >= 2.0 ** (bias + 1)
        out = np.where(top, np.sign(x) * np.inf, rounded)
        out = np.where(np.abs(rounded) < 2.0 ** (1 - bias), np.copysign(0.0, x), out)
    return [np.where(np.isfinite(x), out, x)]


# -- reductions and normalisations ------------------------------------------------------------------
def _axes(op: Op, ndim: int) -> tuple[int, ...] | None:
    dims = _attr(op, "dim_arg")
    if dims is None:
        return None
    return tuple(int(d) % max(1, ndim) for d in (dims if isinstance(dims, list) else [dims]))


def _reduce(fn: Callable) -> Semantics:
    def apply(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        x = x.astype(np.int64) if _is_int(x) and x.dtype.kind != "b" else _f(x)
        x = x.reshape(x.shape or (1,))
        return [np.asarray(fn(x, axis=_axes(op, x.ndim), keepdims=True)).reshape(_out_shape(op))]
    return apply


def _argmax(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    dim = _attr(op, "dim")
    return [np.asarray(np.argmax(_f(xs[0]), axis=None if dim is None else int(dim))).reshape(_out_shape(op))]


def _softmax(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    x = _f(xs[0])
    dim = int(_attr(op, "dimension", -1))
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return [e / e.sum(axis=dim, keepdims=True)]


def _weight_bias(x: np.ndarray, rest: list[np.ndarray]) -> np.ndarray:
    if rest:
        x = x * _f(rest[0])
    if len(rest) > 1:
        x = x + _f(rest[1])
    return x


def _rms_norm(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    x = _f(xs[0])
    eps = float(_attr(op, "epsilon", 1e-5))
    return [_weight_bias(x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps), xs[1:3])]


def _layer_norm(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    x = _f(xs[0])
    eps = float(_attr(op, "epsilon", 1e-5))
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return [_weight_bias((x - mean) / np.sqrt(var + eps), xs[1:3])]


def _batch_norm_named(xs: list[np.ndarray], op: Op) -> dict[str, np.ndarray]:
    present = _attr(op, "operandSegmentSizes") or [1] * len(xs)
    names = [n for n, p in zip(("input", "running_mean", "running_var", "weight", "bias"), present) if int(p)]
    return {n: _f(x) for n, x in zip(names, xs)}


def _normalise_channels(named: dict[str, np.ndarray], mean: np.ndarray, var: np.ndarray, eps: float) -> np.ndarray:
    out = (named["input"] - mean) / np.sqrt(var + eps)
    if "weight" in named:
        out = out * named["weight"]
    return out + named["bias"] if "bias" in named else out


def _batch_norm_inference(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    named = _batch_norm_named(xs, op)
    return [_normalise_channels(named, named["running_mean"], named["running_var"], float(_attr(op, "epsilon", 1e-5)))]


def _batch_norm_training(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    named = _batch_norm_named(xs, op)
    x = named["input"]
    axes = tuple(i for i in range(x.ndim) if i != 1)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)  # population variance
    return [_normalise_channels(named, mean, var, float(_attr(op, "epsilon", 1e-5))), mean, var]


def _scan(kind: str | None) -> Semantics:
    """A running reduction along `dim` (ttnn.cumsum, ttnn.cumprod; ttnn.cumulative names its own:
    sum, prod, max, min or logsumexp), from the last position back when `reverse`."""
    def semantics(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        x = x.astype(np.int64) if _is_int(x) and x.dtype.kind != "b" else _f(x)
        axis = int(_attr(op, "dim", 0)) % max(1, x.ndim)
        reduction = kind or str(_attr(op, "reduction", "sum"))
        ufunc = {"sum": np.add, "add": np.add, "prod": np.multiply, "mul": np.multiply, "max": np.maximum,
                 "min": np.minimum, "logsumexp": np.logaddexp}.get(reduction)
        if ufunc is None:
            raise Unreadable(f"{op.name} with reduction {reduction}")
        reverse = bool(_attr(op, "reverse", False))
        moved = np.flip(x, axis) if reverse else x
        with np.errstate(all="ignore"):
            out = ufunc.accumulate(moved, axis=axis)
        return [np.flip(out, axis) if reverse else out]
    return semantics


# -- data movement ------------------------------------------------------------------------------
def _same_values(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    return [np.asarray(xs[0]).reshape(_out_shape(op))]


def _dims_list(value: Any) -> list[int]:
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    if isinstance(value, int):
        return [value]
    return [int(d) for d in str(value).split("x") if d]


def _permute(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    return [np.transpose(xs[0], _dims_list(_attr(op, "permutation")))]


def _transpose(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    return [np.swapaxes(xs[0], int(_attr(op, "dim0")), int(_attr(op, "dim1")))]


def _slices(begins: Any, ends: Any, steps: Any, ndim: int) -> tuple[slice, ...]:
    steps = steps or [1] * ndim
    return tuple(slice(int(b), int(e), int(s)) for b, e, s in zip(begins, ends, steps))


def _slice_static(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    x = np.asarray(xs[0])
    return [x[_slices(_attr(op, "begins"), _attr(op, "ends"), _attr(op, "step"), x.ndim)]]


def _slice_dynamic(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    x = np.asarray(xs[0])
    begins, ends = (np.asarray(t, np.int64).reshape(-1) for t in xs[1:3])
    return [x[_slices(begins, ends, _attr(op, "step"), x.ndim)].reshape(_out_shape(op))]


def _concat(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    kinds = {np.asarray(x).dtype.kind for x in xs}
    values = [np.asarray(x) if kinds <= set("iub") else _f(x) for x in xs]
    return [np.concatenate(values, axis=int(_attr(op, "dim", 0)))]


def _repeat(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    return [np.tile(xs[0], _dims_list(_attr(op, "repeat_dims")))]


def _repeat_interleave(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    return [np.repeat(xs[0], int(_attr(op, "repeats")), axis=int(_attr(op, "dim", 0)))]


def _pad(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    x = np.asarray(xs[0])
    flat = [int(p) for p in _attr(op, "padding")]
    pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    pairs = [(0, 0)] * (x.ndim - len(pairs)) + pairs
    return [np.pad(x if _is_int(x) else _f(x), pairs, constant_values=_attr(op, "value", 0))]


def _embedding(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    ids, table = np.asarray(xs[0], np.int64), np.asarray(xs[1])
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise Unreadable(f"{op.name} with ids outside the table (0..{table.shape[0] - 1}): undefined")
    return [table[ids].reshape(_out_shape(op))]


_BIT_TYPES = {"f32": (np.float32, np.uint32), "si32": (np.int32, np.uint32), "u32": (np.uint32, np.uint32),
              "f16": (np.float16, np.uint16), "u16": (np.uint16, np.uint16), "u8": (np.uint8, np.uint8)}


def _bitcast(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    src, dst = op.operand_types[0], op.result_types[0]
    names = (src.dtype if src else "", dst.dtype if dst else "")
    if names[0] not in _BIT_TYPES or names[1] not in _BIT_TYPES:
        raise Unreadable(f"{op.name} from {names[0]} to {names[1]}")
    (src_type, src_bits), (dst_type, dst_bits) = _BIT_TYPES[names[0]], _BIT_TYPES[names[1]]
    if np.dtype(src_bits).itemsize != np.dtype(dst_bits).itemsize:
        raise Unreadable(f"{op.name} from {names[0]} to {names[1]} (widths differ)")
    x = np.asarray(xs[0])
    raw = np.asarray(x.astype(np.int64) if src_type != np.float32 and src_type != np.float16 else x, src_type)
    return [np.ascontiguousarray(raw).view(src_bits).view(dst_type).reshape(_out_shape(op))]


# -- creation ---------------------------------------------------------------------------------------
def _full(value: float | None) -> Semantics:
    def apply(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
        fill = _attr(op, "fill_value", 0.0) if value is None else value
        return [np.full(_out_shape(op), fill, dtype=np.int64 if isinstance(fill, int) and not isinstance(fill, bool)
                        else np.float64)]
    return apply


def _arange(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    start, end, step = (int(_attr(op, k, d)) for k, d in (("start", 0), ("end", 0), ("step", 1)))
    return [np.arange(start, end, step, dtype=np.int64).reshape(_out_shape(op))]


def _constant(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    return [np.asarray(dense_values(op.raw["value"])).reshape(_out_shape(op))]


def _random(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    raise Unreadable(f"{op.name} draws random values: no exact reading")


# -- matrix engine, convolution, pooling ------------------------------------------------------------
def _matmul(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    a, b = _f(xs[0]), _f(xs[1])
    if _attr(op, "transpose_a", False):
        a = np.swapaxes(a, -1, -2)
    if _attr(op, "transpose_b", False):
        b = np.swapaxes(b, -1, -2)
    out = np.matmul(a, b)
    if op.name == "ttnn.linear" and len(xs) >= 3:
        out = out + _f(xs[2])
    if _attr(op, "activation"):
        out = _activation(out, [_attr(op, "activation")])
    return [out.reshape(_out_shape(op))]


def _two(value: Any, default: int) -> tuple[int, int]:
    v = _dims_list(value) if value is not None else [default]
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _four(value: Any) -> tuple[int, int, int, int]:
    """Padding [h, w] (both sides alike) or [top, bottom, left, right]."""
    p = _dims_list(value) if value is not None else [0]
    if len(p) == 1:
        return (p[0],) * 4  # type: ignore[return-value]
    return (p[0], p[1], p[2], p[3]) if len(p) == 4 else (p[0], p[0], p[1], p[1])


def _convolve(image: np.ndarray, weight: np.ndarray, stride: tuple[int, int], dilation: tuple[int, int],
              pads: tuple[int, int, int, int], groups: int) -> np.ndarray:
    """NHWC image, OIHW weight -> NHWC output: a sum over kernel taps of shifted image slices."""
    n, h, w, _ = image.shape
    cout, per_group, kh, kw = weight.shape
    top, bottom, left, right = pads
    padded = np.pad(image, ((0, 0), (top, bottom), (left, right), (0, 0)))
    oh = (h + top + bottom - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + left + right - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, oh, ow, cout))
    outs_per_group = cout // groups
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dilation[0], i * dilation[0] + (oh - 1) * stride[0] + 1, stride[0])
            cols = slice(j * dilation[1], j * dilation[1] + (ow - 1) * stride[1] + 1, stride[1])
            window = padded[:, rows, cols, :]
            for g in range(groups):
                taps = weight[g * outs_per_group:(g + 1) * outs_per_group, :, i, j]  # (O/g, Cin/g)
                part = window[..., g * per_group:(g + 1) * per_group]
                out[..., g * outs_per_group:(g + 1) * outs_per_group] += np.einsum("nhwc,oc->nhwo", part, taps)
    return out


def _bias(xs: list[np.ndarray]) -> np.ndarray | float:
    return _f(xs[2]).reshape(-1) if len(xs) >= 3 else 0.0


def _conv2d(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    n, h, w = (int(_attr(op, k)) for k in ("batch_size", "input_height", "input_width"))
    image = _f(xs[0]).reshape(n, h, w, int(_attr(op, "in_channels")))
    out = _convolve(image, _f(xs[1]), _two(_attr(op, "stride"), 1), _two(_attr(op, "dilation"), 1),
                    _four(_attr(op, "padding")), int(_attr(op, "groups", 1)))
    return [(out + _bias(xs)).reshape(_out_shape(op))]


def _conv1d(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    n, length, cin = (int(_attr(op, k)) for k in ("batch_size", "input_length", "in_channels"))
    padding = _dims_list(_attr(op, "padding", [0]))
    image = _f(xs[0]).reshape(n, length, 1, cin)
    out = _convolve(image, _f(xs[1])[..., None], (int(_attr(op, "stride", 1)), 1), (int(_attr(op, "dilation", 1)), 1),
                    (padding[0], padding[-1], 0, 0), int(_attr(op, "groups", 1)))
    return [(out + _bias(xs)).reshape(_out_shape(op))]


def _conv_transpose2d(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    """torch's conv_transpose2d: input pixel (h, w) times tap (i, j) lands at (h*s + i*d - pad)."""
    n, h, w = (int(_attr(op, k)) for k in ("batch_size", "input_height", "input_width"))
    cin, cout, groups = int(_attr(op, "in_channels")), int(_attr(op, "out_channels")), int(_attr(op, "groups", 1))
    weight = _f(xs[1])  # (Cin, Cout/groups, kh, kw)
    kh, kw = weight.shape[2], weight.shape[3]
    (sh, sw), (dh, dw) = _two(_attr(op, "stride"), 1), _two(_attr(op, "dilation"), 1)
    top, bottom, left, right = _four(_attr(op, "padding"))
    oph, opw = _two(_attr(op, "output_padding"), 0)
    image = _f(xs[0]).reshape(n, h, w, cin)
    full_h, full_w = (h - 1) * sh + dh * (kh - 1) + 1 + oph, (w - 1) * sw + dw * (kw - 1) + 1 + opw
    full = np.zeros((n, full_h, full_w, cout))
    ins, outs = cin // groups, cout // groups
    for i in range(kh):
        for j in range(kw):
            for g in range(groups):
                part = np.einsum("nhwc,co->nhwo", image[..., g * ins:(g + 1) * ins], weight[g * ins:(g + 1) * ins, :, i, j])
                full[:, i * dh:i * dh + (h - 1) * sh + 1:sh, j * dw:j * dw + (w - 1) * sw + 1:sw,
                     g * outs:(g + 1) * outs] += part
    oh = (h - 1) * sh - top - bottom + dh * (kh - 1) + oph + 1
    ow = (w - 1) * sw - left - right + dw * (kw - 1) + opw + 1
    return [(full[:, top:top + oh, left:left + ow, :] + _bias(xs)).reshape(_out_shape(op))]


def _pool_windows(xs: list[np.ndarray], op: Op, fill: float) -> tuple[np.ndarray, np.ndarray]:
    """(windows (N, OH, OW, kh*kw, C), flat input index of each window cell, -1 for padding)."""
    if _attr(op, "ceil_mode", False):
        raise Unreadable(f"{op.name} with ceil_mode")
    n, h, w, c = (int(_attr(op, k)) for k in ("batch_size", "input_height", "input_width", "channels"))
    kh, kw = _two(_attr(op, "kernel_size"), 1)
    (sh, sw), (dh, dw) = _two(_attr(op, "stride", [kh, kw]), kh), _two(_attr(op, "dilation"), 1)
    top, bottom, left, right = _four(_attr(op, "padding"))
    image = np.pad(_f(xs[0]).reshape(n, h, w, c), ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=fill)
    where = np.pad(np.arange(h * w).reshape(h, w), ((top, bottom), (left, right)), constant_values=-1)
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    cells, index = [], []
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dh, i * dh + (oh - 1) * sh + 1, sh)
            cols = slice(j * dw, j * dw + (ow - 1) * sw + 1, sw)
            cells.append(image[:, rows, cols, :])
            index.append(where[rows, cols])
    return np.stack(cells, axis=3), np.stack(index, axis=2)


def _max_pool(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    cells, _ = _pool_windows(xs, op, -np.inf)
    return [cells.max(axis=3).reshape(_out_shape(op))]


def _avg_pool(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    cells, index = _pool_windows(xs, op, 0.0)
    if _attr(op, "count_include_pad", True):
        return [cells.mean(axis=3).reshape(_out_shape(op))]
    counts = (index >= 0).sum(axis=2)[None, :, :, None]
    return [(cells.sum(axis=3) / counts).reshape(_out_shape(op))]


def _max_pool_with_indices(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    cells, index = _pool_windows(xs, op, -np.inf)
    first = np.argmax(cells, axis=3)  # the first maximum in window order
    values = np.take_along_axis(cells, first[:, :, :, None, :], axis=3)[:, :, :, 0, :]
    flat = np.broadcast_to(index[None, :, :, :, None], cells.shape)
    indices = np.take_along_axis(flat, first[:, :, :, None, :], axis=3)[:, :, :, 0, :]
    return [values.reshape(_out_shape(op, 0)), indices.reshape(_out_shape(op, 1))]


def _global_avg_pool(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    x = _f(xs[0])
    return [x.mean(axis=(-3, -2) if x.ndim == 4 else -2, keepdims=True).reshape(_out_shape(op))]


# -- indexing -------------------------------------------------------------------------------------
def _rows_split(shape: tuple[int, ...], sizes: list[int], other: tuple[int, ...], batch: int,
                column: bool) -> tuple[int, int] | None:
    """(pre, rest) element counts around the `sizes` dimensions (which may also be a factoring of
    the operand's dimensions: 1x64x64 over sizes [2, 32]). Index vectors of their own per row
    (batch > 1) make pre the batch. Otherwise rest is what the operand and `other` (the gathered
    values or the updates: pre, n, windows, rest) end with alike, the longest such run of trailing
    dimensions that fits; pre is what remains."""
    total, span = int(np.prod(shape)), int(np.prod(sizes))
    if span == 0 or total % span:
        return None
    around = total // span  # pre * rest
    if batch > 1:
        return (batch, around // batch) if around % batch == 0 else None
    if column:  # vectors address single elements: nothing after them
        return around, 1
    common = 0
    while common < min(len(shape), len(other)) and shape[len(shape) - 1 - common] == other[len(other) - 1 - common]:
        common += 1
    for width in range(common, -1, -1):
        rest = int(np.prod(shape[len(shape) - width:])) if width else 1
        if around % rest == 0:
            return around // rest, rest
    return None


def _rows_geometry(op: Op, x: np.ndarray, indices: np.ndarray, other: tuple[int, ...]
                   ) -> tuple[int, list[int], list[int], int, np.ndarray]:
    """ttnn.rows_gather / rows_scatter address an operand read as (pre, *sizes, rest): `sizes` the
    dimensions an index vector addresses, `pre` the dimensions before them, `rest` those after
    (none when `column`: the vectors address single elements). `other` (the gathered values' or
    the updates' shape: pre, n, windows, rest) says where `sizes` sit (_rows_split). Indices are
    (batch, len(sizes), n): n vectors per batch, the batch being 1 (the same vectors for every `pre`
    row) or `pre`. Returns (pre, sizes, windows, rest, starts[pre, n, len(sizes)])."""
    sizes = [int(s) for s in _attr(op, "sizes")]
    windows = [int(w) for w in _attr(op, "windows", [1] * len(sizes))]
    batch = indices.shape[0] if indices.ndim == 3 else 1
    split = _rows_split(tuple(x.shape), sizes, other, batch, bool(_attr(op, "column", False)))
    if len(windows) != len(sizes) or split is None:
        raise Unreadable(f"{op.name} of {x.shape} over sizes {sizes} windows {windows} into {other}")
    pre, rest = split
    if indices.size % (batch * len(sizes)):
        raise Unreadable(f"{op.name}: indices {indices.shape} for {pre} rows of {x.shape}")
    starts = np.asarray(indices, np.int64).reshape(batch, len(sizes), -1).transpose(0, 2, 1)
    return pre, sizes, windows, rest, np.broadcast_to(starts, (pre,) + starts.shape[1:])


def _window_cells(windows: list[int]) -> np.ndarray:
    """Every cell of one window as offsets: (prod(windows), len(windows))."""
    return np.array(np.unravel_index(np.arange(int(np.prod(windows))), windows)).T.reshape(-1, len(windows))


def _rows_gather(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    """Each index vector is the start of a window; starts are clamped into the operand (StableHLO
    gather) or, with `fill_out_of_bounds`, a window not inside reads as zeros."""
    x = np.asarray(xs[0])
    pre, sizes, windows, rest, starts = _rows_geometry(op, x, np.asarray(xs[1]), _out_shape(op))
    table = x.reshape(pre, *sizes, rest)
    cells = _window_cells(windows)
    limit = np.array(sizes) - np.array(windows)
    n = starts.shape[1]
    out = np.zeros((pre, n, len(cells), rest), dtype=x.dtype)
    for p in range(pre):
        for i in range(n):
            start = starts[p, i]
            inside = bool(np.all((start >= 0) & (start <= limit)))
            if _attr(op, "fill_out_of_bounds", False) and not inside:
                continue
            coords = np.clip(start, 0, np.maximum(limit, 0)) + cells
            out[p, i] = table[(p, *coords.T)]
    return [out.reshape(_out_shape(op))]


def _rows_scatter(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    """Updates (pre, n, *windows, rest) combine into the operand at each window, in order (the last
    update wins a replace); a window that does not fit is skipped (StableHLO scatter)."""
    x, indices, updates = (np.asarray(t) for t in xs[:3])
    pre, sizes, windows, rest, starts = _rows_geometry(op, x, indices, tuple(updates.shape))
    reduce = str(_attr(op, "reduce", "invalid")).lower()
    combine = {"invalid": None, "none": None, "sum": np.add, "add": np.add, "max": np.maximum, "min": np.minimum,
               "prod": np.multiply, "mul": np.multiply}
    if reduce not in combine:
        raise Unreadable(f"{op.name} with reduce {reduce}")
    work = x.astype(np.int64) if _is_int(x) and x.dtype.kind != "b" else _f(x)
    out = work.reshape(pre, *sizes, rest).copy()
    cells = _window_cells(windows)
    n = starts.shape[1]
    values = np.asarray(updates, out.dtype).reshape(pre, n, len(cells), rest)
    limit = np.array(sizes) - np.array(windows)
    for p in range(pre):
        for i in range(n):
            start = starts[p, i]
            if not np.all((start >= 0) & (start <= limit)):
                continue
            for c, cell in enumerate(cells):
                where = (p, *(start + cell))
                fn = combine[reduce]
                out[where] = values[p, i, c] if fn is None else fn(out[where], values[p, i, c])
    return [out.reshape(_out_shape(op))]


def _order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """A stable order; descending keeps equal elements in their original order too."""
    key = _f(x) if not _is_int(x) else np.asarray(x, np.int64)
    if descending:
        ranks = np.unique(key, return_inverse=True)[1].reshape(key.shape)
        return np.argsort(-ranks, axis=axis, kind="stable")
    return np.argsort(key, axis=axis, kind="stable")


def _sort(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    axis = int(_attr(op, "dim", -1))
    order = _order(xs[0], axis, bool(_attr(op, "descending", False)))
    return [np.take_along_axis(np.asarray(xs[0]), order, axis=axis), order]


def _topk(xs: list[np.ndarray], op: Op) -> list[np.ndarray]:
    axis, k = int(_attr(op, "dim", -1)), int(_attr(op, "k"))
    order = np.take(_order(xs[0], axis, bool(_attr(op, "largest", True))), np.arange(k), axis=axis)
    return [np.take_along_axis(np.asarray(xs[0]), order, axis=axis), order]


_BINARY_NAMES = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "pow", "pow_tensor", "remainder",
                 "fmod", "atan2", "bitwise_and", "bitwise_or", "bitwise_xor", "logical_left_shift",
                 "bitwise_left_shift", "logical_right_shift", "bitwise_right_shift", "eq", "ne", "gt", "ge", "lt",
                 "le", "logical_and", "logical_or", "logical_xor")
_SAME_VALUES = ("reshape", "squeeze", "unsqueeze", "to_layout", "typecast", "to_memory_config", "to_device",
                "from_device", "to_dtype", "clone", "assign")

SEMANTICS: dict[str, Semantics] = {
    **{f"ttnn.{n}": _binary(n) for n in _BINARY_NAMES},
    **{f"ttnn.{n}": _unary(n) for n in _UNARY},
    **{f"ttnn.{n}": _same_values for n in _SAME_VALUES},
    "ttnn.gelu": _gelu, "ttnn.clamp_scalar": _clamp_scalar, "ttnn.clamp_tensor": _clamp_tensor,
    "ttnn.pow_scalar": _pow_scalar, "ttnn.where": _where, "ttnn.leaky_relu": _leaky_relu,
    "ttnn.reduce_precision": _reduce_precision,
    "ttnn.sum": _reduce(np.sum), "ttnn.mean": _reduce(np.mean), "ttnn.max": _reduce(np.max),
    "ttnn.min": _reduce(np.min), "ttnn.prod": _reduce(np.prod), "ttnn.argmax": _argmax, "ttnn.softmax": _softmax,
    "ttnn.rms_norm": _rms_norm, "ttnn.layer_norm": _layer_norm, "ttnn.batch_norm_inference": _batch_norm_inference,
    "ttnn.batch_norm_training": _batch_norm_training, "ttnn.cumsum": _scan("sum"), "ttnn.moreh_cumsum": _scan("sum"),
    "ttnn.cumprod": _scan("prod"), "ttnn.cumulative": _scan(None),
    "ttnn.permute": _permute, "ttnn.transpose": _transpose, "ttnn.slice_static": _slice_static,
    "ttnn.slice_dynamic": _slice_dynamic, "ttnn.concat": _concat, "ttnn.repeat": _repeat,
    "ttnn.repeat_interleave": _repeat_interleave, "ttnn.pad": _pad, "ttnn.embedding": _embedding,
    "ttnn.bitcast_convert": _bitcast,
    "ttnn.full": _full(None), "ttnn.zeros": _full(0.0), "ttnn.ones": _full(1.0), "ttnn.empty": _full(0.0),
    "ttnn.arange": _arange, "ttnn.constant": _constant, "ttnn.rand": _random, "ttnn.rng_bit_generator": _random,
    "ttnn.matmul": _matmul, "ttnn.linear": _matmul, "ttnn.conv2d": _conv2d, "ttnn.conv1d": _conv1d,
    "ttnn.conv_transpose2d": _conv_transpose2d, "ttnn.max_pool2d": _max_pool, "ttnn.avg_pool2d": _avg_pool,
    "ttnn.max_pool2d_with_indices": _max_pool_with_indices, "ttnn.global_avg_pool2d": _global_avg_pool,
    "ttnn.rows_gather": _rows_gather, "ttnn.rows_scatter": _rows_scatter, "ttnn.sort": _sort, "ttnn.topk": _topk,
}
