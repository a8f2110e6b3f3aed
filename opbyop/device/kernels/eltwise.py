"""Element-wise TTNN ops.

With the chip's numerics, float data goes through the vector unit as tt-metal's kernels drive it
(opbyop.device.kernels.sfpu: copy into Dst, the kernel, SFPSTORE, the packer), bf16 add and subtract
through the FPU (opbyop.device.fpu); integers are computed as integers. Without them (Call.chip_numerics
False) each op is its plain f32 meaning, the reading the reference checks against.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from scipy import special

from opbyop.device import fpu
from opbyop.device.formats import fidelity_multiply, store
from opbyop.device.kernels import sfpu
from opbyop.device.kernels.base import Call, NotSimulated, packed

_Binary = Callable[[np.ndarray, np.ndarray], np.ndarray]
_Unary = Callable[[np.ndarray], np.ndarray]


def _float_or_int(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return x if x.dtype.kind in "iub" else x.astype(np.float32)


def fused(x: np.ndarray, activations: object) -> np.ndarray:
    """Apply fused activations (`#ttnn.unary_with_param<op_type = relu, params = [...]>`) in order."""
    for act in activations or []:
        kind = act.get("op_type") if isinstance(act, dict) else str(act)
        if kind == "leaky_relu":
            slope = float((act.get("params") or [0.01])[0]) if isinstance(act, dict) else 0.01
            x = np.where(x >= 0, x, x * slope)
            continue
        fn = _UNARY.get(str(kind))
        if fn is None:
            raise NotSimulated(f"fused activation {kind}")
        x = fn(np.asarray(x, dtype=np.float32))
    return x


def _binary(fn: _Binary) -> Callable[[Call], list]:
    def kernel(call: Call) -> list:
        a, b = (_float_or_int(x) for x in call.tensors[:2])
        with np.errstate(all="ignore"):
            a = fused(a, call.attr("input_tensor_a_activations"))
            b = fused(b, call.attr("input_tensor_b_activations"))
            return [fused(fn(a, b), call.attr("activations"))]
    return kernel


def on_fpu(call: Call) -> bool:
    """Whether an element-wise add or subtract runs on the FPU (matrix engine) rather than the SFPU:
    ttnn routes same-type f32 and 32-bit integer add/sub to the SFPU, bf16 and block-float operands
    to the FPU (binary_ng_device_operation.cpp, is_binary_sfpu_op)."""
    formats = [t.storage for t in call.op.operand_types[:2] if t is not None]
    return any(f == "bf16" or f.startswith("bfp") for f in formats)


def _sources(call: Call, count: int) -> tuple[str, ...]:
    """The storage formats of the op's first `count` tensor operands (f32 where the program names none)."""
    types = [t for t in call.op.operand_types if t is not None][:count]
    formats = tuple(t.storage for t in types)
    return formats + ("f32",) * (count - len(formats))


def _out_format(call: Call) -> str:
    t = call.out_types[0] if call.out_types else None
    return t.storage if t is not None else "f32"


def _on_sfpu(call: Call, values: list[np.ndarray]) -> bool:
    """Whether the op's values go through the vector unit's kernels: the chip's numerics on, float data."""
    return call.chip_numerics and all(np.asarray(v).dtype.kind == "f" for v in values)


def _post_activations(call: Call) -> list[sfpu.UnaryKernel] | None:
    """A binary op's fused activations as SFPU kernels on Dst (None: one has no kernel here)."""
    kernels = []
    for act in call.attr("activations") or []:
        kind = str(act.get("op_type") if isinstance(act, dict) else act)
        if kind not in sfpu.UNARY_KERNELS:
            return None
        kernels.append(sfpu.UNARY_KERNELS[kind])
    return kernels


def _sfpu_binary(name: str, fallback: Callable[[Call], list]) -> Callable[[Call], list]:
    """A binary op on the SFPU (binary_ng's eltwise_binary_sfpu kernels), a scalar right-hand side
    filled into a tile of the left operand's format; the plain reading where the SFPU does not run."""
    kernel = sfpu.BINARY_KERNELS[name]

    def run(call: Call) -> list:
        tensors = call.tensors[:2]
        if len(tensors) == 1 and call.attr("rhs", call.attr("scalar")) is not None:
            rhs = np.float32(call.attr("rhs", call.attr("scalar")))
            source = _sources(call, 1)[0]
            tensors = [tensors[0], store(np.full(np.shape(tensors[0]), rhs, np.float32), source)]
            sources = (source, source)
        else:
            sources = _sources(call, 2)
        post = _post_activations(call)
        if len(tensors) < 2 or not _on_sfpu(call, tensors) or post is None or \
                call.attr("input_tensor_a_activations") or call.attr("input_tensor_b_activations"):
            return fallback(call)
        with np.errstate(all="ignore"):
            a, b = (np.asarray(t, np.float32) for t in tensors)
            return [sfpu.binary(kernel, a, b, sources, _out_format(call), post)]
    return run


def _multiply(call: Call) -> list:
    """ttnn 0.81.1 multiplies on the SFPU (mul_binary_tile) unless asked for fast_and_approximate_mode,
    where bf16 and block-float operands go through the FPU's fidelity phases (the op's compute config,
    else tt-metal's default HiFi4)."""
    if not (sfpu.asks_for_approximation(call.attrs) and len(call.tensors) >= 2 and on_fpu(call)):
        return _sfpu_binary("multiply", _scalar_binary(np.multiply))(call)
    a, b = (np.asarray(x, np.float32) for x in call.tensors[:2])
    with np.errstate(all="ignore"):
        a = fused(a, call.attr("input_tensor_a_activations"))
        b = fused(b, call.attr("input_tensor_b_activations"))
        a, b = np.broadcast_arrays(a, b)
        return [fused(fidelity_multiply(a, b, call.fidelity[0]), call.attr("activations"))]


def _fpu_add(negate: bool) -> Callable[[Call], list]:
    """add / subtract: bf16 and block-float operands go through the FPU's ELWADD / ELWSUB (the
    smaller operand aligned at 11 bits, the sum rounded half away from zero: opbyop.device.fpu);
    the rest as other binary ops."""
    fallback = _sfpu_binary("subtract" if negate else "add", _scalar_binary(np.subtract if negate else np.add))

    def kernel(call: Call) -> list:
        if len(call.tensors) < 2 or not call.chip_numerics or not on_fpu(call) or \
                any(np.asarray(x).dtype.kind in "iub" for x in call.tensors[:2]):
            return fallback(call)
        a, b = (np.asarray(x, np.float32) for x in call.tensors[:2])
        with np.errstate(all="ignore"):
            a = fused(a, call.attr("input_tensor_a_activations"))
            b = fused(b, call.attr("input_tensor_b_activations"))
            a, b = np.broadcast_arrays(a, -b if negate else b)
            out = fpu.as_f32(fpu.add_bits(a, b, ("bf16", "bf16"), call.fidelity[1]))
            return [packed(call, fused(out, call.attr("activations")))]
    return kernel


# Unary ops that work on integers as integers (the SFPU's int32 paths); the rest compute in f32.
_INTEGER_UNARY = {"abs", "neg", "sign", "bitwise_not", "logical_not", "relu"}


def _unary(name: str, fn: _Unary) -> Callable[[Call], list]:
    def kernel(call: Call) -> list:
        x = _float_or_int(call.tensors[0])
        if not (name in _INTEGER_UNARY and x.dtype.kind in "iub"):
            x = x.astype(np.float32)  # an int32 beyond 2**24 would lose its low bits here
        if name in sfpu.UNARY_KERNELS and _on_sfpu(call, [x]) and not (name == "round" and call.attr("decimals", 0)):
            with np.errstate(all="ignore"):
                return [sfpu.unary((name,), x, _sources(call, 1)[0], _out_format(call))]
        with np.errstate(all="ignore"):
            return [fn(x)]
    return kernel


def _compare(name: str, fn: _Binary) -> Callable[[Call], list]:
    """eq / ne / gt / ge / lt / le on the SFPU (calculate_binary_comp_fp32: 1.0 or 0.0); logical
    and / or / xor, integers, and the chip's numerics off: their plain meaning."""
    def plain(call: Call) -> list:
        a, b = (_float_or_int(x) for x in call.tensors[:2])
        return [fn(a, b).astype(np.float32)]
    return _sfpu_binary(name, plain) if name in sfpu.BINARY_KERNELS else plain


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.where(b == 0, 0, np.trunc(a / np.where(b == 0, 1, b))).astype(a.dtype)
    return np.asarray(a, np.float32) / np.asarray(b, np.float32)


def _remainder(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ttnn.remainder is torch's: a - floor(a / b) * b, the sign of the divisor (not StableHLO's
    truncated remainder), NaN for a zero float divisor (tt-metal
    tt_metal/hw/ckernels/wormhole_b0/metal/llk_api/llk_sfpu/ckernel_sfpu_binary_remainder.h)."""
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.remainder(a, np.where(b == 0, 1, b)) * (b != 0)
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return np.where(b == 0, np.float32(np.nan), np.remainder(a, np.where(b == 0, 1, b)))


def _fmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ttnn.fmod: the sign of the dividend (C fmod)."""
    return np.fmod(a, b)


def _logical_right_shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Zeros shifted in, whatever the sign: the 32-bit pattern shifted as unsigned."""
    if a.dtype.kind == "i":
        return (a.astype(np.int32).view(np.uint32) >> b.astype(np.uint32)).view(np.int32)
    return np.right_shift(a, b)


def _gelu(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + special.erf(x / np.sqrt(2.0)))).astype(np.float32)


def _exp(call: Call) -> list:
    """ttnn.exp: Schraudolph's approximation when asked for fast_and_approximate_mode (not bit for
    bit), else calculate_exponential's accurate path (opbyop.device.kernels.sfpu.exp)."""
    x = np.asarray(call.tensors[0], np.float32)
    if call.chip_numerics and sfpu.asks_for_approximation(call.attrs):
        return [sfpu.exp_fast(x)]
    return _unary("exp", np.exp)(call)


def _gelu_op(call: Call) -> list:
    mode = call.attr("approximate")
    approximate: bool | str = mode if isinstance(mode, str) and mode != "none" else sfpu.asks_for_approximation(call.attrs)
    if approximate is True and not call.chip_numerics:  # the fast LUT is the chip's numerics; tanh is the op's formula
        approximate = False
    return [sfpu.gelu(np.asarray(call.tensors[0], np.float32), approximate)]


def _clamp_scalar(call: Call) -> list:
    x = _float_or_int(call.tensors[0])
    lo, hi = call.attr("min", -np.inf), call.attr("max", np.inf)
    if _on_sfpu(call, [x]):
        key = ("clamp", float(np.float32(lo)), float(np.float32(hi)))
        return [sfpu.unary(key, x, _sources(call, 1)[0], _out_format(call))]
    return [np.clip(x, lo, hi)]


def _clamp_tensor(call: Call) -> list:
    x, lo, hi = (_float_or_int(t) for t in call.tensors[:3])
    return [np.minimum(np.maximum(x, lo), hi)]


def _pow_scalar(call: Call) -> list:
    x = _float_or_int(call.tensors[0]).astype(np.float32)
    exponent = float(np.float32(call.attr("rhs", 1.0)))
    if _on_sfpu(call, [x]):
        return [sfpu.unary(("pow", exponent), x, _sources(call, 1)[0], _out_format(call))]
    with np.errstate(all="ignore"):
        return [np.power(x, np.float32(exponent))]


def _where(call: Call) -> list:
    cond, a, b = call.tensors[:3]
    if _on_sfpu(call, [cond, a, b]):
        return [sfpu.where(cond, a, b, _sources(call, 3), _out_format(call))]
    return [np.where(np.asarray(cond) != 0, a, b)]


def _leaky_relu(call: Call) -> list:
    x = _float_or_int(call.tensors[0]).astype(np.float32)
    slope = float(call.attr("parameter", call.attr("negative_slope", 0.01)))
    return [np.where(x >= 0, x, x * slope)]


def _scalar_binary(fn: _Binary) -> Callable[[Call], list]:
    """ttnn ops with a scalar right-hand side carried as an attribute (add/multiply... by scalar)."""
    def kernel(call: Call) -> list:
        if len(call.tensors) >= 2:
            return _binary(fn)(call)
        rhs = call.attr("rhs", call.attr("scalar"))
        if rhs is None:
            raise NotSimulated(f"{call.op.name} without a second operand or scalar")
        return [fn(_float_or_int(call.tensors[0]), np.float32(rhs))]
    return kernel


def reduce_precision(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """f32 values rounded to a float with the given exponent and mantissa widths, as XLA defines
    stablehlo.reduce_precision (xla/service/elemental_ir_emitter.cc, EmitReducePrecisionIR):
    mantissa rounded to nearest even, exponents above the range become infinity, below it zero
    (no subnormals), NaN stays NaN."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32).copy()
    if mantissa_bits < 23:
        shift = np.uint32(23 - mantissa_bits)
        last = (bits >> shift) & np.uint32(1)
        bits = (bits + ((np.uint32(1) << (shift - np.uint32(1))) - np.uint32(1)) + last) & ~((np.uint32(1) << shift) - np.uint32(1))
    if exponent_bits < 8:
        bias = (1 << (exponent_bits - 1)) - 1
        exponent = ((bits >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64) - 127
        sign = bits & np.uint32(0x80000000)
        bits = np.where(exponent > bias, sign | np.uint32(0x7F800000), bits)
        bits = np.where(exponent <= -bias, sign, bits)
    out = bits.view(np.float32)
    return np.where(np.isnan(x), x, out)


def _reduce_precision(call: Call) -> list:
    return [reduce_precision(call.tensors[0], int(call.attr("exponent_bits")), int(call.attr("mantissa_bits")))]


_BINARY: dict[str, _Binary] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": _divide,
    "maximum": np.maximum, "minimum": np.minimum, "pow": np.power, "pow_tensor": np.power,
    "remainder": _remainder, "atan2": np.arctan2,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "logical_left_shift": np.left_shift, "logical_right_shift": _logical_right_shift, "fmod": _fmod,
    "bitwise_left_shift": np.left_shift, "bitwise_right_shift": np.right_shift,  # arithmetic on signed values
}
_COMPARE: dict[str, _Binary] = {
    "eq": np.equal, "ne": np.not_equal, "gt": np.greater, "ge": np.greater_equal, "lt": np.less,
    "le": np.less_equal,
    "logical_and": lambda a, b: np.logical_and(a != 0, b != 0),
    "logical_or": lambda a, b: np.logical_or(a != 0, b != 0),
    "logical_xor": lambda a, b: np.logical_xor(a != 0, b != 0),
}
_UNARY: dict[str, _Unary] = {
    "abs": np.abs, "neg": np.negative, "exp": np.exp, "log": np.log, "log1p": np.log1p, "expm1": np.expm1,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "reciprocal": lambda x: 1.0 / x, "cbrt": np.cbrt,
    "relu": lambda x: np.maximum(x, 0), "relu6": lambda x: np.clip(x, 0, 6), "gelu": _gelu,
    "silu": lambda x: x / (1.0 + np.exp(-x)), "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "tan": np.tan, "atan": np.arctan, "erf": special.erf,
    "floor": np.floor, "ceil": np.ceil, "sign": np.sign, "round": np.round, "isfinite": np.isfinite,
    "logical_not": lambda x: (x == 0).astype(np.float32), "bitwise_not": lambda x: ~x if x.dtype.kind in "iu" else ~x.astype(np.int32),
    "hardsigmoid": lambda x: np.clip(x / 6.0 + 0.5, 0, 1),
}

_SFPU_NAME = {"pow_tensor": "pow"}  # TTNN op names whose SFPU kernel goes by another name

KERNELS: dict[str, Callable[[Call], list]] = {
    **{f"ttnn.{name}": _sfpu_binary(_SFPU_NAME.get(name, name), _scalar_binary(fn)) if _SFPU_NAME.get(name, name)
       in sfpu.BINARY_KERNELS else _scalar_binary(fn) for name, fn in _BINARY.items()},
    **{f"ttnn.{name}": _compare(name, fn) for name, fn in _COMPARE.items()},
    **{f"ttnn.{name}": _unary(name, fn) for name, fn in _UNARY.items()},
    "ttnn.clamp_scalar": _clamp_scalar, "ttnn.clamp_tensor": _clamp_tensor, "ttnn.pow_scalar": _pow_scalar,
    "ttnn.where": _where, "ttnn.leaky_relu": _leaky_relu, "ttnn.reduce_precision": _reduce_precision,
    "ttnn.multiply": _multiply, "ttnn.add": _fpu_add(False), "ttnn.subtract": _fpu_add(True),
    "ttnn.exp": _exp, "ttnn.gelu": _gelu_op,
}
