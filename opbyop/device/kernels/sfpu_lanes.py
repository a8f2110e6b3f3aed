"""The vector unit's busiest kernels compiled whole (numba), lane by lane.

opbyop.device.kernels.sfpu states each kernel with opbyop.device.vector_unit's instructions on numpy
arrays: one pass over the lanes per instruction. Here the same instructions act on one lane, and each
kernel is a transcription of the sfpu function of the same name (whose docstring cites tt-metal's
source): the same instructions in the same order, compiled whole, so that LLVM vectorises a kernel
over a tile's lanes (AVX-512: 16 lanes). tests/test_sfpu_compiled.py holds every compiled kernel to
its statement's bits over every bf16 value and an f32 sample.

A lane is an np.int32 holding the register's 32 bits (`unsigned` reads them as the unsigned integer).
numba computes on 64-bit integers; `_w` truncates each result to 32 bits again, which lets LLVM keep
the arithmetic 32 bits wide. Every function but the `*_f32` / `*_bf16` / `*_any` runs is inlined
(forceinline) into the run that calls it.

SFPMAD is the host's fused multiply-add on f32 together with a proof, lane by lane, that
fma_model_bh gives the same bits (`mad`); a multiply-add that cancels by design (a Newton step's
residual) is computed as fma_model_bh does, in f64 and int64 (`mad_exact`). A kernel returns (its
bits, a flag word whose sign bit marks the lane unsafe: a multiply-add without its proof, a result
near the denormal range); sfpu.unary and sfpu.binary compute those lanes again with the statement.
A multiply-add whose result a lane does not use passes its flag through `_used`, so that a lane is
not computed twice for a value it drops.

The `*_f32` / `*_bf16` runs take a flat tile through a core (copy_tile's unpack into Dst, the kernel,
SFPSTORE, the packer), with a 32-bit or a 16-bit Dst: one compiled function each, since LLVM
vectorises one such loop per function. Unary kernels are here for a 32-bit Dst only: on a 16-bit one
sfpu.unary reads a table of every bf16 input.

The instructions and the kernels share this one file because numba's cache (cache=True) knows a
compiled function by its own file: kernels in another file would keep stale compiled code when only
the instructions changed.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from opbyop.device.vector_unit import _RECIP_LUT

# --- the instructions, on one lane --------------------------------------------------------------

SIGN = 0x80000000
ABS = 0x7FFFFFFF
INF = 0x7F800000
NAN = 0x7FC00000
ONE = 0x3F800000
HIDDEN = 0x800000  # the implicit one of a normal number's mantissa
_I32 = ir.IntType(32)
_RECIP = _RECIP_LUT.astype(np.int32)


@intrinsic
def _bits(typingctx, x):  # pragma: no cover (compiled)
    """The 32 bits of an f32 as an int32 (a bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], _I32)
    return types.int32(types.float32), codegen


@intrinsic
def _float(typingctx, x):  # pragma: no cover (compiled)
    """The f32 whose 32 bits the int32 holds (a bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@intrinsic
def _f64(typingctx, x):  # pragma: no cover (compiled)
    """The f64 whose 64 bits the int64 holds (a bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@intrinsic
def _fma(typingctx, x, y, z):  # pragma: no cover (compiled)
    """x * y + z in f32, rounded once (llvm.fma: the host's fused multiply-add)."""
    def codegen(context, builder, signature, args):
        return builder.fma(*args)
    return types.float32(types.float32, types.float32, types.float32), codegen


@intrinsic
def _trailing_zeros(typingctx, x):  # pragma: no cover (compiled)
    """The number of trailing zero bits of an int32 (llvm.cttz)."""
    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))
    return types.int32(types.int32), codegen


@njit(forceinline=True)
def _w(x):  # pragma: no cover (compiled)
    """A 64-bit intermediate truncated to the register's 32 bits."""
    return np.int32(x)


@njit(forceinline=True)
def unsigned(x):  # pragma: no cover (compiled)
    """The register's bits as an unsigned integer (int64)."""
    return np.int64(x) & 0xFFFFFFFF


@njit(forceinline=True)
def exponent(x):  # pragma: no cover (compiled)
    """The biased exponent field."""
    return _w((x >> 23) & 255)


# --- SFPMAD ---------------------------------------------------------------------------------------
# Zero and non-finite operands are told apart on their values as floats (`_zero`, `_finite`), not by
# comparing exponent fields: LLVM fuses a test `e == 0` with an `e - 1` computed nearby into an
# overflow intrinsic its vectoriser cannot widen, and the loop would run a lane at a time.

@njit(forceinline=True)
def _flushed(x):  # pragma: no cover (compiled)
    """A zero-exponent operand (a denormal) as the signed zero SFPMAD takes it for."""
    return x if (x & INF) != 0 else _w(x & SIGN)


@njit(forceinline=True)
def _zero(flushed):  # pragma: no cover (compiled)
    """Whether a flushed operand is a zero."""
    return _float(flushed) == 0


@njit(forceinline=True)
def _finite(x):  # pragma: no cover (compiled)
    """Whether x is neither infinite nor NaN."""
    return abs(_float(x)) < np.float32(np.inf)


@njit(forceinline=True)
def _word(condition):  # pragma: no cover (compiled)
    """A condition as a word whose sign bit holds it."""
    return _w(-1) if condition else _w(0)


@njit(forceinline=True)
def _special(x, y, z, fx, fy):  # pragma: no cover (compiled)
    """fma_model_bh's result where an operand is infinite or NaN or the product past the range: NaN
    for a NaN, 0 * inf and inf - inf; else z where it is infinite, else the product's infinity."""
    ps, zs = _w((x ^ y) & SIGN), _w(z & SIGN)
    x_inf, y_inf, z_inf = not _finite(x), not _finite(y), not _finite(z)  # (NaN included; told apart below)
    nan = (_float(x) != _float(x)) | (_float(y) != _float(y)) | (_float(z) != _float(z)) | (x_inf & _zero(fy)) | \
        (y_inf & _zero(fx)) | (z_inf & (x_inf | y_inf) & (zs != ps))
    return _w(NAN) if nan else (z if z_inf else _w(ps | INF))


@njit(forceinline=True)
def mad(x, y, z, unsafe):  # pragma: no cover (compiled)
    """SFPMAD x * y + z, fast: (its bits, `unsafe` with this lane's sign bit set where it lacks the
    proof below). For a multiply-add that cancels (a Newton step's residual), `mad_exact`.

    fma_model_bh computes RNE(T) * u with T = s_p RO(P) + s_z RO(Q), P = |xy| / u, Q = |z| / u,
    u = 2**(E - 153), E the larger of the product's exponent field sum (pe) and z's, RO rounding to an
    odd integer (0 below 1). The host's fma gives RNE(V), V = s_p P + s_z Q exactly. They agree when
      - P and Q are whole numbers (T = V): their mantissas' trailing zeros reach the unit (and an exact
        zero is +0 on both unless both terms are -0);
      - Q is an even whole number and |V| > 2**25: T is RO(V) (or, for P < 1, Q itself, a float),
        and rounding to odd two bits below the 24 kept rounds as V does (Boldo and Melquiond);
      - P is an even whole number, Q >= 1 (E - ze <= 26), |V| > 2**25: the same, the other way round;
      - P is a 24-bit float (P >= 2**26 with 4 spare trailing zeros) and Q < 1 vanishes: T = P = RNE(V).
    |V| > 2**25 is read from the result (above 2**25 units, V is too). Infinite and NaN operands and a
    product past the range follow fma_model_bh's rule; zero and denormal operands its zero product;
    a product below the range (pe < 0) and a nonzero result within a factor 2 of the denormals are
    unsafe. Each condition is a word whose sign bit holds it, so that the lanes' logic stays in
    vector registers."""
    fx, fy, fz = _flushed(x), _flushed(y), _flushed(z)
    ze = exponent(z)
    pp = _w(exponent(x) + exponent(y))  # pe + 127 (pe itself would be `e - 1` for a constant in [0.5, 1))
    special = (not _finite(x)) | (not _finite(y)) | (not _finite(z)) | (pp >= 382)
    r = _bits(_fma(_float(fx), _float(fy), _float(fz)))
    r = _special(x, y, z, fx, fy) if special else r
    no_product = _zero(fx) | _zero(fy)
    zp = _w(ze + 127)
    ep = pp if pp > zp else zp  # E + 127 (a ternary: numba's max keeps LLVM from vectorising the loop)
    product_units = _w(_w(_trailing_zeros(x | HIDDEN) + _trailing_zeros(y | HIDDEN)) - _w(20 + ep - pp))
    z_shift = _w(0) if _zero(fz) else _w(ep - zp)  # E - ze (a zero z: Q = 0, a whole even number)
    sum_units = _w(_w(_trailing_zeros(z | HIDDEN) + 3) - z_shift)
    magnitude = _w(r & ABS)
    big = _w(_w(ep << 23) - _w(magnitude + (128 << 23)))  # |result| above 2**25 units
    whole = _w(~(product_units | sum_units))
    alike = (big & ~_w(sum_units - 1)) | (big & ~_w(product_units - 1) & _w(z_shift - 27)) | \
        (~_w(product_units - 4) & ~_w(pp - zp) & ~_w(z_shift - 27))
    normal_result = _w(1 - exponent(r))
    zero_result = _word((magnitude == 0) & (ep >= 131))  # (from E = 4 up a unit is a nonzero float)
    in_range = ~_w(pp - 127)  # pe >= 0
    safe = _word(special | no_product) | (in_range & ((whole & (normal_result | zero_result)) | (alike & normal_result)))
    return r, _w(unsafe | ~safe)


@njit(forceinline=True)
def mad_exact(x, y, z, unsafe):  # pragma: no cover (compiled)
    """SFPMAD x * y + z as vector_unit.mad_numpy states it, lane by lane: the product exact in f64,
    both terms rounded to odd in units of u (int64), summed and rounded to nearest even; special
    operands by fma_model_bh's rule. Only a result near the denormal range is unsafe (fma_model_bh's
    steps decide it). About 3x `mad`'s work: for multiply-adds that cancel, where `mad` lacks its proof."""
    fx, fy, fz = _flushed(x), _flushed(y), _flushed(z)
    ze = exponent(z)
    pp = _w(exponent(x) + exponent(y))  # pe + 127, as in `mad`
    ps, zs = _w((x ^ y) & SIGN), _w(z & SIGN)
    signed_zero = _w(ps & zs)
    zp = _w(ze + 127)
    ep = pp if pp > zp else zp  # E + 127
    to_units = _f64(np.int64(1303 - ep) << 52)  # 2**(153 - E)
    unit = _f64(np.int64(743 + ep) << 52)  # 2**(E - 153)
    p = abs(np.float64(_float(fx)) * np.float64(_float(fy))) * to_units
    q = abs(np.float64(_float(fz))) * to_units
    pi, qi = np.int64(p), np.int64(q)
    pi = pi | np.int64((pi != 0) & (np.float64(pi) != p))
    qi = qi | np.int64((qi != 0) & (np.float64(qi) != q))
    total = (pi if ps == 0 else -pi) + (qi if zs == 0 else -qi)
    r = signed_zero if total == 0 else _bits(np.float32(np.float64(total) * unit))
    no_product = _zero(fx) | _zero(fy) | (pp < 127)
    steps = (not no_product) & ((r & INF) == 0) & (total != 0)
    r = (fz if not _zero(fz) else signed_zero) if no_product else r
    special = (not _finite(x)) | (not _finite(y)) | (not _finite(z)) | (pp >= 382)
    return (_special(x, y, z, fx, fy) if special else r), _w(unsafe | _word(steps & (not special)))


@njit(forceinline=True)
def add(a, b, unsafe):  # pragma: no cover (compiled)
    """SFPADD: 1.0 * a + b."""
    return mad(_w(ONE), a, b, unsafe)


@njit(forceinline=True)
def add_exact(a, b, unsafe):  # pragma: no cover (compiled)
    """SFPADD by mad_exact: for a sum that cancels."""
    return mad_exact(_w(ONE), a, b, unsafe)


@njit(forceinline=True)
def mul(a, b, unsafe):  # pragma: no cover (compiled)
    """SFPMUL: a * b + 0.0. With no addend the product alone is rounded: T = RO(P) with P >= 2**26
    units, rounding to odd two bits below the 24 kept, so the host's product has its bits wherever
    the operands and the result are normal."""
    fa, fb = _flushed(a), _flushed(b)
    pp = _w(exponent(a) + exponent(b))  # pe + 127, as in `mad`
    special = (not _finite(a)) | (not _finite(b)) | (pp >= 382)
    r = _bits(_fma(_float(fa), _float(fb), _float(_w(0))))
    r = _special(a, b, _w(0), fa, fb) if special else r
    safe = _word(special | _zero(fa) | _zero(fb)) | (~_w(pp - 127) & _w(1 - exponent(r)))
    return r, _w(unsafe | ~safe)


# --- fields, integers, conversions (vector_unit's functions of the same names) ----------------------

@njit(forceinline=True)
def neg(x):  # pragma: no cover (compiled)
    return _w(x ^ SIGN)


@njit(forceinline=True)
def exexp(x):  # pragma: no cover (compiled)
    """SFPEXEXP: the exponent less 127 (int32); `exponent` is its NODEBIAS mode."""
    return _w(exponent(x) - 127)


@njit(forceinline=True)
def exman(x, hidden_one):  # pragma: no cover (compiled)
    return _w((x & 0x7FFFFF) | HIDDEN) if hidden_one else _w(x & 0x7FFFFF)


@njit(forceinline=True)
def setexp(x, e):  # pragma: no cover (compiled)
    return _w((x & 0x807FFFFF) | ((e & 255) << 23))


@njit(forceinline=True)
def setman_zero(x):  # pragma: no cover (compiled)
    return _w(x & 0xFF800000)


@njit(forceinline=True)
def setsgn(x, sign_of):  # pragma: no cover (compiled)
    return _w((x & ABS) | (sign_of & SIGN))


@njit(forceinline=True)
def clear_sign(x):  # pragma: no cover (compiled)
    return _w(x & ABS)


@njit(forceinline=True)
def fabs(x):  # pragma: no cover (compiled)
    """SFPABS (float): the sign cleared, except of a negative NaN."""
    return _w(x & ABS) if unsigned(x) <= 0xFF800000 else x


@njit(forceinline=True)
def iabs(x):  # pragma: no cover (compiled)
    return _w(abs(np.int64(x)))


@njit(forceinline=True)
def addexp(x, k):  # pragma: no cover (compiled)
    """SFPDIVP2: k added to the exponent field (mod 256), unless it is 255."""
    e = exponent(x)
    e = _w((e + (k & 255)) & 255) if e != 255 else e
    return _w((x & 0x807FFFFF) | (e << 23))


@njit(forceinline=True)
def iadd(a, b):  # pragma: no cover (compiled)
    return _w(np.int64(a) + b)


@njit(forceinline=True)
def shift(x, amount):  # pragma: no cover (compiled)
    """SFPSHFT: left by `amount` (int32) when it is >= 0, else logically right (mod 32)."""
    count = abs(np.int64(amount)) & 31
    return _w(np.int64(x) << count) if amount >= 0 else _w(unsigned(x) >> count)


@njit(forceinline=True)
def cast(x):  # pragma: no cover (compiled)
    """SFPCAST: a sign-magnitude integer to f32, rounded to nearest even."""
    return setsgn(_bits(np.float32(np.int64(x) & ABS)), x)


@njit(forceinline=True)
def sign_magnitude(x):  # pragma: no cover (compiled)
    return x if x >= 0 else _w(SIGN | _w(-np.int64(x)))


@njit(forceinline=True)
def to_bf16(x):  # pragma: no cover (compiled)
    """SFP_STOCH_RND FP32_TO_FP16B as ttsim executes it (vector_unit.to_bf16)."""
    e = exponent(x)
    rounded = _w((unsigned(x) & 0xFFFF0000) + (0x10000 if (x & 0xFFFF) >= 0x8000 else 0))
    return _w(0) if e == 0 else (_w(x & 0xFF800000) if e == 255 else rounded)


@njit(forceinline=True)
def to_int(x, maximum, signed):  # pragma: no cover (compiled)
    """SFP_STOCH_RND FP32_TO_[U]INT8/16 (vector_unit.to_int): the mantissa rounded half up at the
    binary point, in 32 bits (below 2**16, where the result does not saturate)."""
    sign = _w(x & SIGN) if signed else _w(0)
    e = exexp(x)
    mag = _w(_w(_w((x & 0x7FFFFF) | HIDDEN) + _w(1 << ((22 - e) & 31))) >> ((23 - e) & 31))
    mag = _w(0) if e < -1 else (_w(maximum) if e >= 16 else (mag if mag < maximum else _w(maximum)))
    return _w((_w(0) if mag == 0 else sign) | mag)


@njit(forceinline=True)
def to_int16(x):  # pragma: no cover (compiled)
    return to_int(x, 32767, True)


@njit(forceinline=True)
def approx_recip(x):  # pragma: no cover (compiled)
    """SFPARECIP (vector_unit.approx_recip)."""
    mag = _w(x & ABS)
    out = _w(((253 - (mag >> 23)) << 23) | (_RECIP[(mag >> 16) & 0x7F] << 16))
    out = _w(INF) if mag < HIDDEN else (out if mag < 0x7E800000 else _w(0))
    return _w((x & SIGN) | out)


@njit(forceinline=True)
def bf16_rne(x):  # pragma: no cover (compiled)
    """float32_to_bf16_rne (sfpu.bf16_rne)."""
    return _w((unsigned(x) + 0x7FFF + ((x >> 16) & 1)) & 0xFFFF0000)


# --- comparisons --------------------------------------------------------------------------------------

@njit(forceinline=True)
def _order(x):  # pragma: no cover (compiled)
    return _w(x ^ ABS) if x < 0 else x


@njit(forceinline=True)
def gt(d, c):  # pragma: no cover (compiled)
    return _order(d) > _order(c)


@njit(forceinline=True)
def le(d, c):  # pragma: no cover (compiled)
    return _order(d) <= _order(c)


@njit(forceinline=True)
def minmax(c, d):  # pragma: no cover (compiled)
    """SFPSWAP VEC_MIN_MAX: (the larger, the smaller), equal negative values counting c the smaller."""
    c_smaller = (_order(c) < _order(d)) | ((c == d) & (c < 0))
    return (d, c) if c_smaller else (c, d)


@njit(forceinline=True)
def negative(x):  # pragma: no cover (compiled)
    return x < 0


@njit(forceinline=True)
def unpack(x, dest32, source_f32):  # pragma: no cover (compiled)
    """vector_unit.unpack: what copy_tile leaves in Dst of a value stored as f32 or bf16 (its bits)."""
    if source_f32 and dest32:
        return x
    v = x if source_f32 else _w(x & 0xFFFF0000)
    return _w(0) if (v & INF) == 0 else v


@njit(forceinline=True)
def store(x, dest32):  # pragma: no cover (compiled)
    """vector_unit.store: SFPSTORE's default mode."""
    v = _w(x & SIGN) if (x & ABS) < HIDDEN else x
    return v if dest32 else _w(v & 0xFFFF0000)


@njit(forceinline=True)
def pack(d, dest32, out_f32):  # pragma: no cover (compiled)
    """vector_unit.pack: the packer from Dst into f32 or bf16 (the bits of the f32 value)."""
    if dest32 and out_f32:
        return d
    d = _w((d & SIGN) | INF) if (d & ABS) > INF else d
    d = _w(((unsigned(d) + 0x8000) >> 16) << 16) if dest32 else _w(d & 0xFFFF0000)
    return _w(0) if (d & ABS) < HIDDEN else d


# --- the kernels --------------------------------------------------------------------------------

ZERO = np.int32(0)
NEG_ZERO = np.uint32(SIGN).view(np.int32)
I_ONE = np.int32(ONE)
I_INF = np.int32(INF)
I_NAN = np.int32(NAN)
TWO = np.float32(2.0).view(np.int32)
NEG_TWO = np.float32(-2.0).view(np.int32)
LN2_RECIP = np.int32(0x3FB8AA3B)
ROUNDING_BIAS = np.int32(0x4B400000)  # 1.5 * 2**23: adding it rounds to an integer
NEG_ROUNDING_BIAS = np.uint32(0xCB400000).view(np.int32)


# Constants as the kernels load them (folded at compile time): numba code cannot call numpy's
# conversions, so these restate vector_unit.const / bf16_const / fp16_const for a lane.

@njit(forceinline=True)
def _c(bits):  # pragma: no cover (compiled)
    """A register constant from its 32 bits."""
    return np.int32(bits)


@njit(forceinline=True)
def _f(value):  # pragma: no cover (compiled)
    """An f32 constant's bits (vector_unit.const)."""
    return _bits(np.float32(value))


@njit(forceinline=True)
def _bf16(upper):  # pragma: no cover (compiled)
    """SFPLOADI FLOATB (vector_unit.bf16_const)."""
    return np.int32(upper << 16)


@njit(forceinline=True)
def _fp16(imm):  # pragma: no cover (compiled)
    """SFPLOADI FLOATA: an fp16 immediate, rebiased (vector_unit.fp16_const)."""
    return np.int32(((imm & 0x8000) << 16) | (((imm & 0x7FFF) + (112 << 10)) << 13))


@njit(forceinline=True)
def _used(unsafe, flag, used):  # pragma: no cover (compiled)
    """A lane's flag, an instruction's flag counted only where the lane uses its result."""
    return unsafe | (flag if used else ZERO)


# --- pieces several kernels share -------------------------------------------------------------------

@njit(forceinline=True)
def recip_iter2(d, u):  # pragma: no cover (compiled)
    y = approx_recip(d)
    t, u = mad_exact(d, y, NEG_TWO, u)
    step = gt(ZERO, t)
    y1, flag = mad(neg(t), y, NEG_ZERO, ZERO)
    neg_t2, flag = mad_exact(neg(d), y1, TWO, flag)
    refined, flag = mad(y1, neg_t2, NEG_ZERO, flag)
    return (refined if step else y), _used(u, flag, step)


@njit(forceinline=True)
def exp_fp32(a, u):  # pragma: no cover (compiled)
    j, u = mul(LN2_RECIP, a, u)
    sm = to_int16(j)
    jf = cast(sm)
    f, u = mad(jf, _f(-6.93145752e-1), a, u)
    f, u = mad(jf, _f(-1.42860677e-6), f, u)
    r, u = mad(_fp16(0x15A5), f, _f(8.37312452e-3), u)
    r, u = mad(r, f, _f(4.16695364e-2), u)
    r, u = mad(r, f, _f(1.66664720e-1), u)
    r, u = mad(r, f, _f(4.99999851e-1), u)
    i = setsgn(iabs(sm), jf)
    y, u = mad(r, f, I_ONE, u)
    r, u = mad(y, f, I_ONE, u)
    y, u = mul(y, I_INF, u)
    e = iadd(exponent(r), i)
    return ((ZERO if e < 1 else setexp(r, e)) if e < 255 else y), u


@njit(forceinline=True)
def float_to_int32_positive(v):  # pragma: no cover (compiled)
    e = exexp(v)
    shifted = shift(exman(v, True), e - 23)
    return ZERO if e < 0 else (np.int32(0x7FFFFFFF) if e > 30 else shifted)


@njit(forceinline=True)
def _sqrt_start(x, u):  # pragma: no cover (compiled)
    y = np.int32(0x5F1110A0 - (unsigned(x) >> 1))
    xy, u = mul(x, y, u)
    c, u = mul(neg(y), xy, u)
    step, u = add(_f(2.2533049), c, u)
    step, u = mad_exact(c, step, _f(2.2825186), u)
    y, u = mul(y, step, u)
    xy, u = mul(x, y, u)
    return y, xy, u


@njit(forceinline=True)
def _exponent_sign_magnitude(x):  # pragma: no cover (compiled)
    """sign_magnitude(exexp(x)), its sign read from the bits in place (LLVM would fuse the exponent's
    `e - 127` with the test `e < 127` into an overflow intrinsic it cannot vectorise)."""
    e = exexp(x)
    return np.int32(SIGN | -np.int64(e)) if (x & 0x7FFFFFFF) < ONE else e


@njit(forceinline=True)
def _power_21f(base, pw, u):  # pragma: no cover (compiled)
    absbase = clear_sign(base)
    x = setexp(absbase, 127)
    s, u = mad(x, _c(0x3E111CD0), _c(0xBF5E712A), u)
    s, u = mad_exact(x, s, _c(0x4013D4E2), u)  # (log2 of the mantissa: the cubic cancels near 1)
    s, u = mad_exact(x, s, _c(0xBFCA94C9), u)
    log2, u = mad_exact(s, LN2_RECIP, cast(_exponent_sign_magnitude(base)), u)
    z, u = mul(pw, log2, u)
    z = _f(-127.0) if gt(_f(-127.0), z) else z
    zi, u = add(_bf16(0x4E7E), addexp(z, 23), u)
    zi = float_to_int32_positive(zi)
    zif = exman(zi, False)
    d2, u = mul(_c(0x332CA418), cast(iadd(zif, 0xF94EE7)), u)
    zif, u = mul(d2, cast(iadd(zif, 0x560E)), u)
    zif = float_to_int32_positive(zif)
    y = setexp(zif, iadd(exexp(zi), 127))
    pow_int = to_int16(pw)
    signed = I_NAN if cast(pow_int) != pw else setsgn(y, np.int32(np.int64(pow_int) << 31))
    return (signed if gt(ZERO, base) else y), absbase == 0, u


@njit(forceinline=True)
def _log_m(abs_base, start_hi, start_lo, u):  # pragma: no cover (compiled)
    m = setexp(abs_base, 127)
    ex = exexp(abs_base)
    big = le(_c(0x3FB504F3), m)
    m = addexp(m, -1) if big else m
    ex = iadd(ex, 1) if big else ex
    m1, u = add(m, I_ONE, u)
    rc, u = mad_exact(neg(m1), start_hi, start_lo, u)
    for _ in range(3):
        step, u = mad_exact(neg(m1), rc, TWO, u)
        rc, u = mul(rc, step, u)
    z, u = add(m, _f(-1.0), u)
    z, u = mul(z, rc, u)
    z2, u = mul(z, z, u)
    p, u = mad(z2, _c(0x3DBA2E8C), _c(0x3DE38E39), u)
    p, u = mad(z2, p, _c(0x3E124925), u)
    p, u = mad(z2, p, _c(0x3E4CCCCD), u)
    p, u = mad(z2, p, _c(0x3EAAAAAB), u)
    p, u = mad(z2, p, I_ONE, u)
    zp, u = mul(z, p, u)
    ln_m, u = mul(TWO, zp, u)
    return ln_m, cast(sign_magnitude(ex)), u


@njit(forceinline=True)
def _pow_split(pw, exp_f32, ln_m, u):  # pragma: no cover (compiled)
    pc, u = mul(pw, _c(0x45800800), u)
    t, u = add(neg(pw), pc, u)
    pow_hi, u = mad(_f(-1.0), t, pc, u)
    pow_lo, u = add(pw, neg(pow_hi), u)
    z_hi, u = mul(pow_hi, exp_f32, u)
    t, u = mul(ln_m, LN2_RECIP, u)
    t, u = mul(pw, t, u)
    z_lo, u = mad(pow_lo, exp_f32, t, u)
    return z_hi, z_lo, u


@njit(forceinline=True)
def _negative_base(y, base, pw):  # pragma: no cover (compiled)
    pow_int = to_int16(pw)
    signed = I_NAN if cast(pow_int) != pw else setsgn(y, np.int32(np.int64(pow_int) << 31))
    return signed if gt(ZERO, base) else y


@njit(forceinline=True)
def _pow2_hilo(z_hi, z_lo, u):  # pragma: no cover (compiled)
    s, u = add(z_hi, z_lo, u)
    e, u = add(z_hi, neg(s), u)
    e, u = add_exact(z_lo, e, u)  # the sum's rounding error
    s, _ = minmax(s, _c(0xC2FDFFFF))
    tmp, u = add(ROUNDING_BIAS, s, u)
    k_int = np.int32(np.int64(tmp) - ROUNDING_BIAS)
    f, u = add(NEG_ROUNDING_BIAS, tmp, u)
    f, u = mad(_f(-1.0), f, s, u)
    f, u = add(f, e, u)
    r, u = mul(f, _c(0xB95E8083), u)
    r, u = mad_exact(f, _fp16(0x398C), r, u)  # f ln2 as a high and a low part: both round
    p, u = mad(r, _c(0x39500D01), _c(0x3AB60B61), u)
    p, u = mad(r, p, _c(0x3C088889), u)
    p, u = mad(r, p, _c(0x3D2AAAAB), u)
    p, u = mad(r, p, _c(0x3E2AAAAB), u)
    p, u = mad(r, p, _c(0x3F000000), u)
    p, u = mad(r, p, _c(0x3F800000), u)
    p, u = mad(r, p, _c(0x3F800000), u)
    result = setexp(p, iadd(exponent(p), k_int))
    return (I_INF if le(_f(128.0), s) else result), u


# --- unary kernels (a 32-bit Dst) ---------------------------------------------------------------------

@njit(forceinline=True)
def exp(x, u):  # pragma: no cover (compiled)
    return exp_fp32(x, u)


@njit(forceinline=True)
def log(a, u):  # pragma: no cover (compiled)
    a, u = add(a, ZERO, u)
    e = np.int32((np.int64(a) - _bf16(0x3F40)) & 0xFF800000)
    m, u = add(np.int32(np.int64(a) - e), _f(-1.0), u)
    s, u = mul(m, m, u)
    r, u = mad(_c(0xBD496000), m, _c(0x3DDC2000), u)  # -0x1.92cp-5, 0x1.b84p-4
    r, u = mad(r, m, _c(0xBE062000), u)  # -0x1.0c4p-3
    r, u = mad(r, m, _c(0x3E13A000), u)  # 0x1.274p-3
    r, u = mad(r, m, _c(0xBE2A8000), u)  # -0x1.55p-3
    r, u = mad(r, m, _c(0x3E4CC000), u)  # 0x1.998p-3
    r, u = mad(r, m, _c(0xBE80000D), u)  # -0x1.00001ap-2
    r, u = mad(r, m, _c(0x3EAAAAB9), u)  # 0x1.555572p-2
    r, u = mad(r, m, _c(0xBF000000), u)  # -0x1p-1
    e_float = setsgn(cast(iabs(e)), e)
    halved = addexp(a, -1)
    r, u = mad(r, s, m, u)
    result, u = mad(e_float, _c(0x33B17218), r, u)
    infinite = exponent(halved) == 255
    scaled, flag = mul(result, halved, ZERO)
    result, u = (scaled if infinite else result), _used(u, flag, infinite)
    return (result if le(ZERO, a) else I_NAN), u


@njit(forceinline=True)
def sqrt(x, u):  # pragma: no cover (compiled)
    y, xy, u = _sqrt_start(x, u)
    t, u = mad_exact(neg(y), xy, I_ONE, u)
    half_xy, u = mul(_f(0.5), xy, u)
    refined, u = mad(t, half_xy, xy, u)
    y = refined if negative(np.int32(np.int64(x) - INF)) else y
    return (x if (x & ABS) == 0 else (I_NAN if gt(ZERO, x) else y)), u



@njit(forceinline=True)
def rsqrt(x, u):  # pragma: no cover (compiled)
    y, xy, u = _sqrt_start(x, u)
    t, u = mad_exact(neg(y), xy, I_ONE, u)
    refined, u = mad(t, addexp(y, -1), y, u)
    refined = I_NAN if gt(ZERO, x) else refined
    inf_minus_x = np.int32(INF - np.int64(x))
    return (refined if (inf_minus_x != 0) & ((x & ABS) != 0) else inf_minus_x), u


@njit(forceinline=True)
def sigmoid(x, u):  # pragma: no cover (compiled)
    e, u = exp_fp32(neg(x), u)
    d, u = add(e, I_ONE, u)
    return recip_iter2(d, u)


@njit(forceinline=True)
def tanh(x, u):  # pragma: no cover (compiled)
    m, u = mul(x, _c(0x4038AA3B), u)
    m = to_int(m, 255, False)
    a, u = add(x, x, u)
    a = clear_sign(a)
    y, u = mad(iadd(a, -1), ZERO, I_ONE, u)
    # (e^2|x| - 1) / (e^2|x| + 1), which a lane uses below m = 61 only: its flags count there
    f, v = mad_exact(cast(m), _c(0xBF317218), a, ZERO)
    r, v = mad(_bf16(0x394F), f, _fp16(0x15B5), v)
    r, v = mad(r, f, _fp16(0x2044), v)
    r, v = mad(r, f, _c(0x3D2AAACF), v)
    r, v = mad(r, f, _c(0x3E2AAAAE), v)
    r, v = mad(r, f, _f(0.5), v)
    f2, v = mul(f, f, v)
    r, v = mad(r, f2, f, v)
    scale = setexp(ZERO, iadd(m, 126))
    x0, v = add(_f(-0.5), scale, v)
    x0, v = mad(r, scale, x0, v)
    x1, v = add(x0, I_ONE, v)
    rcp = approx_recip(x1)
    t, v = mad_exact(neg(x1), rcp, I_ONE, v)
    rcp, v = mad(rcp, t, rcp, v)
    y0, v = mul(x0, rcp, v)
    t, v = mad_exact(neg(x1), y0, x0, v)
    refine = exponent(x) >= 115
    refined, w = mad(t, rcp, y0, ZERO)
    inner = refined if refine else x
    used = m < 61
    return setsgn(inner if used else y, x), _used(_used(u, v, used), w, used & refine)


@njit(forceinline=True)
def power_scalar(base, pw, nonnegative, u):  # pragma: no cover (compiled)
    """sfpu.power_scalar's kernel for an exponent other than 0, 1, 2, 3 (pw: its bits; nonnegative:
    the exponent >= 0, -0.0 included)."""
    ln_m, exp_f32, u = _log_m(fabs(base), _c(0x3E79DB23), _c(0x3F80624E), u)
    z_hi, z_lo, u = _pow_split(pw, exp_f32, ln_m, u)
    y, u = _pow2_hilo(z_hi, z_lo, u)
    y = _negative_base(y, base, pw)
    zero = fabs(base) == 0
    if nonnegative:
        return (ZERO if zero & gt(pw, ZERO) else y), u
    return (I_NAN if zero else y), u


@njit(forceinline=True)
def power_iterative(base, n, u):  # pragma: no cover (compiled)
    """sfpu.power_scalar's kernel for the exponents 2 and 3 (n): products of x."""
    square, u = mul(base, base, u)
    if n == 2:
        return square, u
    return mul(base, square, u)


# --- binary kernels -----------------------------------------------------------------------------------

@njit(forceinline=True)
def add_binary(a, b, dest32, u):  # pragma: no cover (compiled)
    return add(a, b, u)


@njit(forceinline=True)
def sub_binary(a, b, dest32, u):  # pragma: no cover (compiled)
    return add(neg(b), a, u)


@njit(forceinline=True)
def mul_binary(a, b, dest32, u):  # pragma: no cover (compiled)
    r, u = mul(a, b, u)
    if dest32:
        return r, u
    return (bf16_rne(r) if (a != 0) & (b != 0) else ZERO), u


@njit(forceinline=True)
def div_binary(a, b, dest32, u):  # pragma: no cover (compiled)
    if not dest32:
        y, u = recip_iter2(b, u)
        result, u = mul(a, y, u)
        result = ((I_NAN if a == 0 else setsgn(I_INF, a)) if b == 0 else result)
        return bf16_rne(result), u
    ma, mb = setexp(a, 127), setexp(b, 127)
    y = approx_recip(mb)
    t, flag = mad_exact(neg(mb), y, TWO, ZERO)
    r, flag = mad(y, t, NEG_ZERO, flag)
    q, flag = mul(ma, r, flag)
    t, flag = mad_exact(neg(q), mb, ma, flag)
    q, flag = mad(t, r, q, flag)
    ea = exponent(a)
    eb = exexp(b)
    e = np.int32(np.int64(ea) - eb + exponent(q))
    half = np.int32(unsigned(e) >> 1)
    result, flag = mul(setexp(q, half), setexp(I_ONE, np.int32(np.int64(e) - half)), flag)
    normal = (ea >= 1) & (ea < 255) & (eb >= -126) & (eb < 128)
    nan_divisor = np.int32(-1) if gt(clear_sign(b), I_INF) else ZERO
    special, special_flag = mad(neg(a), setman_zero(np.int32(~b)), nan_divisor, ZERO)
    u = _used(_used(u, flag, normal), special_flag, not normal)
    return (result if normal else special), u


@njit(forceinline=True)
def power_binary(base, pw, dest32, u):  # pragma: no cover (compiled)
    if not dest32:
        y, zero, u = _power_21f(base, pw, u)
        y = (I_NAN if gt(ZERO, pw) else ZERO) if zero & (pw != 0) else y
        return to_bf16(y), u
    ln_m, exp_f32, u = _log_m(fabs(base), _c(0x3E7876CD), _c(0x3F800000), u)
    z_hi, z_lo, u = _pow_split(pw, exp_f32, ln_m, u)
    s, u = add(z_hi, z_lo, u)
    e, u = add(z_hi, neg(s), u)
    e, u = add_exact(z_lo, e, u)  # the sum's rounding error
    clamp = gt(_f(-127.0), s)
    s, e = (_f(-127.0) if clamp else s), (ZERO if clamp else e)
    tmp, u = add(ROUNDING_BIAS, s, u)
    frac, u = add(NEG_ROUNDING_BIAS, tmp, u)
    frac, u = mad(_f(-1.0), frac, s, u)
    frac, u = add(frac, e, u)
    frac, u = mul(frac, _c(0x3F317218), u)
    y, u = exp_fp32(frac, u)
    out_exp = iadd(exponent(y), np.int32(np.int64(tmp) - ROUNDING_BIAS))
    y = I_INF if out_exp >= 255 else setexp(y, out_exp)
    abs_pow = fabs(pw)
    y = _negative_base(y, base, abs_pow)
    zero = fabs(base) == 0
    filled = setsgn(ZERO, y)
    filled = setsgn(I_INF, filled) if gt(ZERO, pw) else filled
    y = filled if zero & (abs_pow != 0) else y
    pow_nan = (exponent(pw) == 255) & ((pw & 0x7FFFFF) != 0)
    return (I_NAN if zero & pow_nan else y), u


@njit(forceinline=True)
def max_binary(a, b, dest32, u):  # pragma: no cover (compiled)
    return minmax(b, a)[0], u


@njit(forceinline=True)
def min_binary(a, b, dest32, u):  # pragma: no cover (compiled)
    return minmax(b, a)[1], u


@njit(forceinline=True)
def _compare(in0, in1, kind, u):  # pragma: no cover (compiled)
    """sfpu.compare's kernel; kind 0..5: eq, ne, gt, ge, lt, le."""
    if kind <= 1:
        total, u = add(clear_sign(in0), clear_sign(in1), u)
        same = le(in0, in1) & le(in1, in0)
        difference = np.int32(INF - np.int64(total))
        equal = (same & (not negative(difference))) | ((difference if same else total) == 0)
        return (I_ONE if equal == (kind == 0) else ZERO), u
    a, b = (in1, in0) if kind <= 3 else (in0, in1)
    total, u = add(clear_sign(a), clear_sign(b), u)
    number = not negative(np.int32(INF - np.int64(total)))
    if kind == 2 or kind == 4:
        return (I_ONE if gt(b, a) & (total != 0) & number else ZERO), u
    return (ZERO if (gt(a, b) & (total != 0)) | (not number) else I_ONE), u


@njit(forceinline=True)
def eq_binary(a, b, dest32, u):  # pragma: no cover (compiled)
    return _compare(a, b, 0, u)


@njit(forceinline=True)
def ne_binary(a, b, dest32, u):  # pragma: no cover (compiled)
    return _compare(a, b, 1, u)


@njit(forceinline=True)
def gt_binary(a, b, dest32, u):  # pragma: no cover (compiled)
    return _compare(a, b, 2, u)


@njit(forceinline=True)
def ge_binary(a, b, dest32, u):  # pragma: no cover (compiled)
    return _compare(a, b, 3, u)


@njit(forceinline=True)
def lt_binary(a, b, dest32, u):  # pragma: no cover (compiled)
    return _compare(a, b, 4, u)


@njit(forceinline=True)
def le_binary(a, b, dest32, u):  # pragma: no cover (compiled)
    return _compare(a, b, 5, u)


# --- a kernel over a tile -----------------------------------------------------------------------------

@njit(forceinline=True)
def _unary_rows(kernel, x, out, unsafe, out_f32):  # pragma: no cover (compiled)
    """Each lane of x (f32 data, a 32-bit Dst): unpack, the kernel, SFPSTORE, the packer."""
    for i in range(x.size):
        r, u = kernel(x[i], ZERO)
        out[i] = pack(store(r, True), True, out_f32)
        unsafe[i] = u < 0


@njit(forceinline=True)
def _binary_rows(kernel, a, b, out, unsafe, dest32, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    """Each pair of lanes (stored as f32 or bf16: a_f32, b_f32): unpack into Dst, the kernel,
    SFPSTORE, the packer."""
    for i in range(a.size):
        r, u = kernel(unpack(a[i], dest32, a_f32), unpack(b[i], dest32, b_f32), dest32, ZERO)
        out[i] = pack(store(r, dest32), dest32, out_f32)
        unsafe[i] = u < 0


@njit(cache=True)
def exp_f32(x, out, unsafe, out_f32):  # pragma: no cover (compiled)
    _unary_rows(exp, x, out, unsafe, out_f32)


@njit(cache=True)
def log_f32(x, out, unsafe, out_f32):  # pragma: no cover (compiled)
    _unary_rows(log, x, out, unsafe, out_f32)


@njit(cache=True)
def sqrt_f32(x, out, unsafe, out_f32):  # pragma: no cover (compiled)
    _unary_rows(sqrt, x, out, unsafe, out_f32)


@njit(cache=True)
def rsqrt_f32(x, out, unsafe, out_f32):  # pragma: no cover (compiled)
    _unary_rows(rsqrt, x, out, unsafe, out_f32)


@njit(cache=True)
def sigmoid_f32(x, out, unsafe, out_f32):  # pragma: no cover (compiled)
    _unary_rows(sigmoid, x, out, unsafe, out_f32)


@njit(cache=True)
def tanh_f32(x, out, unsafe, out_f32):  # pragma: no cover (compiled)
    _unary_rows(tanh, x, out, unsafe, out_f32)


@njit(cache=True)
def power_scalar_f32(x, out, unsafe, out_f32, pw, nonnegative):  # pragma: no cover (compiled)
    for i in range(x.size):
        r, u = power_scalar(x[i], pw, nonnegative, ZERO)
        out[i] = pack(store(r, True), True, out_f32)
        unsafe[i] = u < 0


@njit(cache=True)
def power_iterative_f32(x, out, unsafe, out_f32, n):  # pragma: no cover (compiled)
    for i in range(x.size):
        r, u = power_iterative(x[i], n, ZERO)
        out[i] = pack(store(r, True), True, out_f32)
        unsafe[i] = u < 0


@njit(cache=True)
def add_f32(a, b, out, unsafe, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(add_binary, a, b, out, unsafe, True, a_f32, b_f32, out_f32)


@njit(cache=True)
def sub_f32(a, b, out, unsafe, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(sub_binary, a, b, out, unsafe, True, a_f32, b_f32, out_f32)


@njit(cache=True)
def mul_f32(a, b, out, unsafe, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(mul_binary, a, b, out, unsafe, True, a_f32, b_f32, out_f32)


@njit(cache=True)
def mul_bf16(a, b, out, unsafe, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(mul_binary, a, b, out, unsafe, False, a_f32, b_f32, out_f32)


@njit(cache=True)
def div_f32(a, b, out, unsafe, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(div_binary, a, b, out, unsafe, True, a_f32, b_f32, out_f32)


@njit(cache=True)
def div_bf16(a, b, out, unsafe, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(div_binary, a, b, out, unsafe, False, a_f32, b_f32, out_f32)


@njit(cache=True)
def pow_f32(a, b, out, unsafe, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(power_binary, a, b, out, unsafe, True, a_f32, b_f32, out_f32)


@njit(cache=True)
def pow_bf16(a, b, out, unsafe, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(power_binary, a, b, out, unsafe, False, a_f32, b_f32, out_f32)


@njit(cache=True)
def max_any(a, b, out, unsafe, dest32, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(max_binary, a, b, out, unsafe, dest32, a_f32, b_f32, out_f32)


@njit(cache=True)
def min_any(a, b, out, unsafe, dest32, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(min_binary, a, b, out, unsafe, dest32, a_f32, b_f32, out_f32)


@njit(cache=True)
def eq_any(a, b, out, unsafe, dest32, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(eq_binary, a, b, out, unsafe, dest32, a_f32, b_f32, out_f32)


@njit(cache=True)
def ne_any(a, b, out, unsafe, dest32, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(ne_binary, a, b, out, unsafe, dest32, a_f32, b_f32, out_f32)


@njit(cache=True)
def gt_any(a, b, out, unsafe, dest32, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(gt_binary, a, b, out, unsafe, dest32, a_f32, b_f32, out_f32)


@njit(cache=True)
def ge_any(a, b, out, unsafe, dest32, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(ge_binary, a, b, out, unsafe, dest32, a_f32, b_f32, out_f32)


@njit(cache=True)
def lt_any(a, b, out, unsafe, dest32, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(lt_binary, a, b, out, unsafe, dest32, a_f32, b_f32, out_f32)


@njit(cache=True)
def le_any(a, b, out, unsafe, dest32, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(le_binary, a, b, out, unsafe, dest32, a_f32, b_f32, out_f32)


@njit(cache=True)
def add_bf16(a, b, out, unsafe, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(add_binary, a, b, out, unsafe, False, a_f32, b_f32, out_f32)


@njit(cache=True)
def sub_bf16(a, b, out, unsafe, a_f32, b_f32, out_f32):  # pragma: no cover (compiled)
    _binary_rows(sub_binary, a, b, out, unsafe, False, a_f32, b_f32, out_f32)


@njit(cache=True)
def lookup(table, x, out):  # pragma: no cover (compiled)
    """out[i] = table[the upper 16 bits of x[i]]: a 16-bit Dst's unary result, read from its table."""
    for i in range(x.size):
        out[i] = table[(x[i] >> 16) & 0xFFFF]


UnaryRun = Callable[[np.ndarray, np.ndarray, np.ndarray, bool], None]
BinaryRun = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool, bool, bool, bool], None]

# sfpu's unary kernels compiled for a 32-bit Dst: run(x, out, unsafe, out_f32), x and out f32 bits (int32)
UNARY_F32: dict[str, UnaryRun] = {"exp": exp_f32, "log": log_f32, "sqrt": sqrt_f32, "rsqrt": rsqrt_f32,
                                  "sigmoid": sigmoid_f32, "tanh": tanh_f32}


def _by_dest(on_32: Callable, on_16: Callable) -> BinaryRun:
    def run(a: np.ndarray, b: np.ndarray, out: np.ndarray, unsafe: np.ndarray, dest32: bool, a_f32: bool,
            b_f32: bool, out_f32: bool) -> None:
        (on_32 if dest32 else on_16)(a, b, out, unsafe, a_f32, b_f32, out_f32)
    return run


# sfpu's BINARY_KERNELS compiled: run(a, b, out, unsafe, dest32, a_f32, b_f32, out_f32)
BINARY: dict[str, BinaryRun] = {
    "add": _by_dest(add_f32, add_bf16), "subtract": _by_dest(sub_f32, sub_bf16),
    "multiply": _by_dest(mul_f32, mul_bf16), "divide": _by_dest(div_f32, div_bf16),
    "pow": _by_dest(pow_f32, pow_bf16), "maximum": max_any, "minimum": min_any,
    "eq": eq_any, "ne": ne_any, "gt": gt_any, "ge": ge_any, "lt": lt_any, "le": le_any,
}


@njit(cache=True)
def multiply_add(x, y, z, out, unsafe, exact):  # pragma: no cover (compiled)
    """SFPMAD over arrays (`mad`, or `mad_exact` where `exact`): how a test holds it to
    vector_unit.mad_numpy."""
    for i in range(x.size):
        r, u = mad_exact(x[i], y[i], z[i], ZERO) if exact else mad(x[i], y[i], z[i], ZERO)
        out[i] = r
        unsafe[i] = u < 0
