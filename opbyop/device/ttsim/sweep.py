"""The vector unit's functions swept over their inputs, on ttsim and on opbyop's model: one single-op
StableHLO module per function and data type (a 256x256 tensor, 64 tiles: one ttnn call), fed every
bf16 value, or a dense sample of f32 values, so that the two devices' outputs can be held bit for bit.

The bf16 sweep is every one of the 65,536 bf16 bit patterns, its NaNs as the quiet NaN ttnn's host
conversion makes of any NaN (a NaN's sign and payload never reach the device through ttnn's Tensor).
The f32 sample is 65,536 values: a quarter random bit patterns (every exponent, NaN and infinity
included, denormals too), the rest random mantissas under exponents within 2**-24 .. 2**24, with the
special values (signed zeros and infinities, NaN, the smallest normals, 1) among them.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

SHAPE = (256, 256)
BF16 = np.dtype(ml_dtypes.bfloat16)


@dataclass(frozen=True)
class Case:
    name: str  # the function, as the sweep table names it
    body: str  # the op, {t} standing for the tensor type, %a0 %a1 for the operands
    operands: int = 1
    result: str = "{t}"  # the result type ({t}: the operands')
    constants: str = ""  # lines before the op (constant operands)
    predicate: bool = False  # a first operand %p of booleans (select's), before the swept ones

    def module(self, dtype: str) -> str:
        t = f"tensor<{SHAPE[0]}x{SHAPE[1]}x{dtype}>"
        args = ", ".join([f"%p: {BOOL}"] * self.predicate + [f"%a{i}: {t}" for i in range(self.operands)])
        result = self.result.format(t=t)
        return (f"func.func @main({args}) -> {result} {{\n{self.constants.format(t=t, dtype=dtype)}"
                f"  %0 = {self.body.format(t=t, result=result, dtype=dtype)}\n  return %0 : {result}\n}}\n")


def _unary(op: str) -> Case:
    return Case(op, f"stablehlo.{op} %a0 : {{t}}")


def _binary(op: str) -> Case:
    return Case(op, f"stablehlo.{op} %a0, %a1 : {{t}}", operands=2)


def _with_constant(name: str, op: str, value: float, constant_first: bool = False) -> Case:
    operands = "%c, %a0" if constant_first else "%a0, %c"
    return Case(name, f"stablehlo.{op} {operands} : {{t}}",
                constants=f"  %c = stablehlo.constant dense<{value}> : {{t}}\n")


BOOL = "tensor<256x256xi1>"

# Every SFPU function this compiler's TTNN programs carry (StableHLO's element-wise ops lower to them;
# chlo's erf, atan, sinh ... lower to compositions of them): the TTNN op each becomes is in the name.
CASES: tuple[Case, ...] = (
    *(_unary(op) for op in ("exponential", "log", "log_plus_one", "exponential_minus_one", "sqrt", "rsqrt",
                            "tanh", "logistic", "sine", "cosine", "tan", "cbrt", "abs", "negate", "sign",
                            "floor", "ceil", "round_nearest_even")),
    Case("is_finite", "stablehlo.is_finite %a0 : ({t}) -> " + BOOL, result=BOOL),
    *(_binary(op) for op in ("add", "subtract", "multiply", "divide", "power", "atan2", "remainder", "maximum",
                             "minimum")),
    *(Case(f"compare_{kind.lower()}", f"stablehlo.compare {kind}, %a0, %a1 : ({{t}}, {{t}}) -> " + BOOL, operands=2,
           result=BOOL) for kind in ("GT", "GE", "LT", "LE", "EQ", "NE")),
    Case("select", "stablehlo.select %p, %a0, %a1 : " + BOOL + ", {t}", operands=2, predicate=True),
    _with_constant("relu (maximum with 0)", "maximum", 0.0),
    _with_constant("reciprocal (1 / x)", "divide", 1.0, constant_first=True),
    _with_constant("power_scalar 2.5", "power", 2.5),
    _with_constant("power_scalar 2", "power", 2.0),
    Case("clamp -1.5 2.5", "stablehlo.clamp %lo, %a0, %hi : (tensor<{dtype}>, {t}, tensor<{dtype}>) -> {t}",
         constants="  %lo = stablehlo.constant dense<-1.5> : tensor<{dtype}>\n"
                   "  %hi = stablehlo.constant dense<2.5> : tensor<{dtype}>\n"),
    Case("convert to f32", "stablehlo.convert %a0 : ({t}) -> tensor<256x256xf32>", result="tensor<256x256xf32>"),
    Case("convert to bf16", "stablehlo.convert %a0 : ({t}) -> tensor<256x256xbf16>", result="tensor<256x256xbf16>"),
    Case("convert to i32", "stablehlo.convert %a0 : ({t}) -> tensor<256x256xi32>", result="tensor<256x256xi32>"),
)


def every_bf16() -> np.ndarray:
    """The 65,536 bf16 values in bit order, as ttnn's host conversion delivers them (any NaN the
    positive quiet NaN), held as bf16."""
    x = (np.arange(65536, dtype=np.uint32) << np.uint32(16)).view(np.float32)
    x = np.where(np.isnan(x), np.float32(np.nan), x)
    return x.reshape(SHAPE).astype(BF16)


def f32_sample(seed: int = 0) -> np.ndarray:
    """65,536 f32 values (see the module's docstring), deterministic."""
    rng = np.random.default_rng(seed)
    n = SHAPE[0] * SHAPE[1]
    bits = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    exponents = rng.integers(127 - 24, 127 + 25, n - n // 4).astype(np.uint32)
    bits[n // 4:] = (bits[n // 4:] & np.uint32(0x807FFFFF)) | (exponents << np.uint32(23))
    specials = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00800000, 0x80800000, 0x3F800000,
                         0xBF800000, 0x007FFFFF], np.uint32)
    bits[:specials.size] = specials
    return bits.view(np.float32).reshape(SHAPE)


def inputs(case: Case, dtype: str) -> list[np.ndarray]:
    """The sweep's operands: the values above, and for a second operand the same values shuffled (each
    value meets others, every one of them once in each position); a select's predicate half true."""
    first = every_bf16() if dtype == "bf16" else f32_sample()
    order = np.random.default_rng(1).permutation(first.size)
    second = first.reshape(-1)[order].reshape(SHAPE)
    predicate = [np.random.default_rng(2).random(SHAPE) < 0.5] if case.predicate else []
    return predicate + [first, second][:case.operands]


def as_bits(x: np.ndarray) -> np.ndarray:
    """Output values as f32 bit patterns (bf16 and integers widened exactly; booleans as 0.0 / 1.0)."""
    x = np.asarray(x)
    if x.dtype == BF16 or x.dtype == np.bool_:
        x = x.astype(np.float32)
    elif x.dtype.kind in "iu":
        return x.astype(np.int64).astype(np.uint32)
    return np.ascontiguousarray(x, np.float32).reshape(-1).view(np.uint32)


def agreement(model: np.ndarray, ttsim: np.ndarray, bf16: bool) -> tuple[int, int]:
    """(outputs bit-equal, the largest distance in units in the last place of the output's format; NaN
    beside NaN of other bits counts as apart)."""
    a, b = as_bits(model).reshape(-1), as_bits(ttsim).reshape(-1)
    equal = int(np.sum(a == b))

    def ordered(bits: np.ndarray) -> np.ndarray:
        signed = bits.view(np.int32).astype(np.int64)
        return np.where(signed < 0, -(signed & 0x7FFFFFFF), signed)
    distance = np.abs(ordered(a) - ordered(b)) >> (16 if bf16 else 0)
    distance = np.where(a == b, 0, np.maximum(distance, 1))
    return equal, int(distance.max()) if distance.size else 0
