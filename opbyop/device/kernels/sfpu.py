"""The vector unit's (SFPU) functions as tt-metal's kernels compute them, bit for bit.

Each kernel is the instruction sequence tt-metal's compiled kernel runs on one Dst row, written with
opbyop.device.vector_unit's instructions (SFPMAD as ttsim's fma_model_bh, SFPARECIP's table,
SFP_STOCH_RND's roundings ...), in the order the kernel's compiler emitted them where that order
shows in the result (a fused multiply-add, a negated operand). The kernels are those of PyPI's
`ttnn` 0.81.1 for Blackhole: tt_metal/hw/ckernels/blackhole/metal/llk_api/llk_sfpu/ckernel_sfpu_*.h
and tt_metal/tt-llk/tt_llk_blackhole/common/inc/sfpu/ckernel_sfpu_*.h, the accurate path
(`fast_and_approximate_mode` false: what ttnn runs when a TTNN program does not ask otherwise).

A kernel takes the lanes SFPLOAD read (f32 bit patterns, np.uint32) and `dest32`: whether
fp32_dest_acc_en holds (tt-metal enables it for f32 and 32-bit integer data), which picks between the
bf16 and the f32 form of most kernels. It returns the lanes SFPSTORE writes, or (value, stored lanes)
where the kernel stores to some lanes only (relu). `unary` and `binary` run a kernel as a tile runs
through a core: copy_tile into Dst, the kernel, SFPSTORE, the packer (vector_unit.unpack / store /
pack). On a 16-bit Dst a unary function's result depends on the 65,536 bf16 inputs alone: it is
computed once per function and parameters, then looked up.

These functions are the statement of each kernel. The busiest (exp, log, sqrt, rsqrt, sigmoid, tanh,
pow on f32; add, subtract, multiply, divide, pow, maximum, minimum and the compares) also run
compiled whole, lane by lane (opbyop.device.kernels.sfpu_lanes: the same instructions in the same
order, vectorised over a tile); `unary` and `binary` take the compiled results and compute here the
lanes the compiled form cannot vouch for, so the bits are this statement's either way.

Not modelled bit for bit: the approximate paths (exp_fast, gelu_fast: fast_and_approximate_mode) and
the functions no TTNN program of this compiler has been seen to carry (gelu, silu, erf ...): these
keep their f32 formulas.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Union

import numpy as np
from scipy import special

from opbyop.device import vector_unit as vu
from opbyop.device.formats import round_bf16
from opbyop.device.kernels import sfpu_lanes as lanes
from opbyop.device.vector_unit import (INF, NAN, NEG_ZERO, ONE, U32, ZERO, add, bf16_const, const, fp16_const, mad,
                                       mul, words)

Bits = np.ndarray
UnaryKernel = Callable[[Bits, bool], Union[Bits, tuple[Bits, Bits]]]
BinaryKernel = Callable[[Bits, Bits, bool], Bits]

APPROXIMATION_ATTRIBUTES = ("fast_and_approximate_mode", "approximate_mode", "approx")
LN2_RECIP = U32(0x3FB8AA3B)  # 1.4426950 (vConstFloatPrgm0 of exp, pow)
TWO = const(2.0)
ROUNDING_BIAS = bf16_const(0x4B40)  # 1.5 * 2**23: adding it rounds to an integer
NEG_ROUNDING_BIAS = bf16_const(0xCB40)
HALF_PI = U32(0x3FC90FDB)


def asks_for_approximation(attrs: dict) -> bool:
    return any(attrs.get(name) is True for name in APPROXIMATION_ATTRIBUTES)


def _neg(x: Bits) -> Bits:
    return vu.neg(x)


def _select(mask: np.ndarray, a: Bits | np.uint32, b: Bits | np.uint32) -> Bits:
    return np.where(mask, a, b).astype(U32)


# --- pieces several kernels share ---------------------------------------------------------------

def bf16_rne(x: Bits) -> Bits:
    """float32_to_bf16_rne (ckernel_sfpu_conversions.h): bits + 0x7FFF + their bit 16, the low half
    cleared, in integer arithmetic (a NaN may carry into the sign)."""
    x = np.asarray(x, U32)
    return (x + U32(0x7FFF) + ((x >> U32(16)) & U32(1))) & U32(0xFFFF0000)


def recip_iter1(d: Bits) -> Bits:
    """sfpu_reciprocal_iter<1> (ckernel_sfpu_recip.h): SFPARECIP, then one Newton step where
    t = d * y - 2 is negative."""
    y = vu.approx_recip(d)
    t = mad(d, y, _neg(TWO))
    return _select(vu.gt(ZERO, t), mad(_neg(t), y, NEG_ZERO), y)


def recip_iter2(d: Bits) -> Bits:
    """sfpu_reciprocal_iter<2> (ckernel_sfpu_recip.h) as compiled: the second step's -t computed as
    -d * y1 + 2, both steps only where the first t is negative."""
    y = vu.approx_recip(d)
    t = mad(d, y, _neg(TWO))
    y1 = mad(_neg(t), y, NEG_ZERO)
    neg_t2 = mad(_neg(d), y1, TWO)
    return _select(vu.gt(ZERO, t), mad(y1, neg_t2, NEG_ZERO), y)


def exp_21f(x: Bits, clamp_below: bool = True) -> Bits:
    """_sfpu_exp_21f_bf16_ (ckernel_sfpu_exp.h, sfpi form, Moroz et al. 2022 exp_21f): x / ln2 + 127
    clamped to [0, 255] by two SFPSWAPs, its integer part made an exponent, its fraction through a
    degree-2 polynomial; no rounding to bf16 (callers that want it round)."""
    xlog2 = mad(x, LN2_RECIP, const(127.0))
    if clamp_below:
        xlog2, _ = vu.minmax(xlog2, ZERO)
    _, xlog2 = vu.minmax(const(255.0), xlog2)
    z = vu.shift(vu.exman(xlog2, True), vu.exexp(xlog2))
    exponent = vu.exexp(z, debias=False)
    frac = vu.cast(vu.exman(z, False))
    poly = mad(frac, U32(0x27ACA418), U32(0x33A85ADA))
    poly = mad(frac, poly, const(1.0017248))
    return vu.setexp(poly, exponent)


def exp_21f_tti(x: Bits) -> Bits:
    """_sfpu_exp_21f_bf16_tti_ (ckernel_sfpu_exp.h, ttnn.exp on a 16-bit Dst): exp_21f with its upper
    clamp by SFPSWAP, its lower one by masking the integer part (SFPGT, SFPAND), c0 loaded as fp16,
    and the result rounded to bf16 (SFP_STOCH_RND) before SFPSTORE would truncate it."""
    xlog2 = mad(x, LN2_RECIP, bf16_const(0x42FE))
    _, xlog2 = vu.minmax(bf16_const(0x437F), xlog2)
    z = vu.shift(vu.exman(xlog2, True), vu.exexp(xlog2))
    frac = vu.cast(vu.exman(z, False))
    poly = mad(frac, U32(0x27ACA418), U32(0x33A85ADA))
    poly = mad(poly, frac, fp16_const(0x3C02))
    z = _select(vu.gt(xlog2, ZERO), z, ZERO)
    return vu.to_bf16(vu.setexp_of(poly, z))


def exp_fp32(a: Bits) -> Bits:
    """_sfpu_exp_fp32_accurate_ (ckernel_sfpu_exp.h, after Norbert Juffa): j = rint(a / ln2) through
    int16, a two-part Cody-Waite reduction, a degree-7 polynomial, the exponent added by integer;
    infinity above the range, zero below it."""
    j = mul(LN2_RECIP, a)
    sm = vu.to_int16(j)
    jf = vu.cast(sm)
    f = mad(jf, const(-6.93145752e-1), a)
    f = mad(jf, const(-1.42860677e-6), f)
    r = fp16_const(0x15A5)
    for c in (8.37312452e-3, 4.16695364e-2, 1.66664720e-1, 4.99999851e-1):
        r = mad(r, f, const(c))
    i = vu.setsgn(vu.iabs(sm), jf)
    y = mad(r, f, ONE)
    r = mad(y, f, ONE)
    y = mul(y, INF)
    e = vu.iadd(vu.exexp(r, debias=False), i).view(np.int32)
    return _select(e < 255, _select(e < 1, ZERO, vu.setexp(r, e.view(U32))), y)


def float_to_int32_positive(v: Bits) -> Bits:
    """_float_to_int32_positive_ (ckernel_sfpu_conversions.h): the mantissa shifted by the exponent;
    0 below 1, 0x7FFFFFFF from 2**31."""
    e = vu.exexp(v).view(np.int32)
    shifted = vu.shift(vu.exman(v, True), e - 23)
    return _select(e < 0, ZERO, _select(e > 30, U32(0x7FFFFFFF), shifted))


def _trunc(x: Bits) -> Bits:
    """The integer part (ckernel_sfpu_rounding_ops.h): the mantissa bits below the point cleared."""
    e = vu.exexp(x).view(np.int32)
    mask = np.where(e < 0, U32(0x80000000), np.where(e > 23, U32(0xFFFFFFFF),
                                                     U32(0xFFFFFFFF) << np.clip(23 - e, 0, 31).astype(U32)))
    return np.asarray(x, U32) & mask


def dest_round_trip(x: Bits, dest32: bool) -> Bits:
    """SFPSTORE then SFPLOAD: what a kernel that stores and reloads a row sees the second time."""
    return vu.store(x, dest32)


# --- unary kernels ------------------------------------------------------------------------------

def exp(x: Bits, dest32: bool) -> Bits:
    """calculate_exponential (ckernel_sfpu_exp.h), accurate: exp_fp32 on a 32-bit Dst, exp_21f_tti
    on a 16-bit one."""
    return exp_fp32(x) if dest32 else exp_21f_tti(x)


def log(a: Bits, dest32: bool) -> Bits:
    """calculate_log_body (llk_sfpu/ckernel_sfpu_log.h, after Norbert Juffa): a = m * 2**e with m in
    [0.75, 1.5) by integer arithmetic, log(m) by a polynomial in m - 1 (degree 8 on a 32-bit Dst,
    3 on a 16-bit one), e * ln2 added; NaN below 0, a non-finite input passed through."""
    a = add(a, ZERO)
    e = vu.isub(a, bf16_const(0x3F40)) & U32(0xFF800000)
    m = add(vu.isub(a, e), const(-1.0))
    s = mul(m, m)
    if dest32:
        r = const(float.fromhex("-0x1.92cp-5"))
        for c in ("0x1.b84p-4", "-0x1.0c4p-3", "0x1.274p-3", "-0x1.55p-3", "0x1.998p-3", "-0x1.00001ap-2",
                  "0x1.555572p-2", "-0x1p-1"):
            r = mad(r, m, const(float.fromhex(c)))
    else:
        r = mad(const(-0.25), m, fp16_const(0x35D1))
        r = mad(r, m, fp16_const(0xB802))
    e_float = vu.setsgn(vu.cast(vu.iabs(e)), e)
    halved = vu.addexp(a, -1)
    r = mad(r, s, m)
    result = mad(e_float, U32(0x33B17218), r)
    result = _select(((halved >> U32(23)) & U32(255)) == 255, mul(result, halved), result)
    result = _select(vu.le(ZERO, a), result, NAN)
    return result if dest32 else vu.to_bf16(result)


def log1p(a: Bits, dest32: bool) -> Bits:
    """calculate_log1p_fp32 (ckernel_sfpu_log1p.h, after Norbert Juffa): log of u = a + 1 with the
    rounding of u corrected, the same polynomials as log; NaN below -1, u itself from infinity up."""
    u = add(a, ONE)
    e = vu.isub(u, bf16_const(0x3F40)) & U32(0xFF800000)
    m = vu.isub(a, e)
    t = mad(const(-0.25), vu.isub(bf16_const(0xC080), e), const(-1.0))
    e_float = vu.setsgn(vu.cast(vu.iabs(e)), e)
    m = add(m, t)
    if dest32:
        r = const(float.fromhex("-0x1.92cp-5"))
        for c in ("0x1.b84p-4", "-0x1.0c4p-3", "0x1.274p-3", "-0x1.55p-3", "0x1.998p-3"):
            r = mad(r, m, const(float.fromhex(c)))
        r = mad(r, m, U32(0xBE80000D))
        s = mul(m, m)
        r = mad(r, m, U32(0x3EAAAAB9))
        r = mad(r, m, const(-0.5))
    else:
        r = mad(const(-0.25), m, fp16_const(0x35D1))
        s = mul(m, m)
        r = mad(r, m, fp16_const(0xB802))
    r = mad(e_float, U32(0x33B17218), mad(r, s, m))
    r = _select(vu.at_least(u, INF), u, r)
    r = _select(vu.le(ZERO, u), r, NAN)
    return r if dest32 else vu.to_bf16(r)


def expm1(a: Bits, dest32: bool) -> Bits:
    """_sfpu_expm1_ (ckernel_sfpu_expm1.h, after Norbert Juffa): j = rint(a / ln2), r = expm1(f) by a
    polynomial, then 2 * (r * t + t - 0.5) with t = 2**(j - 1); -1 and infinity by int8 saturation."""
    j_biased = mad(LN2_RECIP, a, ROUNDING_BIAS)
    j = add(NEG_ROUNDING_BIAS, j_biased)
    scale = vu.iadd(j_biased << U32(23), 0x3F000000)
    if not dest32:
        f = mad(j, U32(0xBF317218), a)
        r = mad(bf16_const(0x3C09), f, fp16_const(0x2959))
        s = mul(f, f)
        r = mad(r, f, fp16_const(0x3155))
        r = mad(r, f, const(0.5))
        r = mad(r, s, f)
        jm2 = add(const(-2.0), j)
        out = mad(scale, r, add(const(-0.5), scale))
        big = vu.to_int(vu.fabs(jm2), 127, signed=True).view(np.int32) >= 127
        out = _select(big, _select(vu.gt(ZERO, jm2), const(-0.5), mul(INF, jm2)), out)
        return vu.to_bf16(_select(j != 0, mul(TWO, out), r))
    f = mad(j, U32(0xBF317200), a)
    f = mad(j, U32(0xB5BFBE8E), f)
    s = mul(f, f)
    r = mad(bf16_const(0x394F), f, U32(0x3AB698F2))
    for c in (0x3C0888FB, 0x3D2AAACF, 0x3E2AAAAE):
        r = mad(r, f, U32(c))
    jm1 = add(j, const(-1.0))
    r = mad(r, f, U32(0x3EFFFFFF))
    r = mad(r, s, _select(jm1 == 0, add(const(0.5), f), f))
    y = add(const(-0.5), scale)
    x = add(const(-0.5), mad(const(-1.0), y, scale))
    jm2 = add(jm1, const(-1.0))
    inner = add(mad(r, scale, x), y)
    big = vu.to_int(vu.fabs(jm2), 127, signed=True).view(np.int32) >= 127
    inner = _select(big, _select(vu.gt(ZERO, jm2), const(-0.5), mul(INF, jm2)), inner)
    return _select(j != 0, mul(TWO, _select(jm1 != 0, inner, r)), r)


def _sqrt_start(x: Bits) -> tuple[Bits, Bits]:
    """_calculate_sqrt_body_'s first steps (ckernel_sfpu_sqrt.h): 1/sqrt(x) from the magic constant
    0x5f1110a0, one Newton step of degree 2; returns (y, x * y)."""
    y = vu.isub(U32(0x5F1110A0), np.asarray(x, U32) >> U32(1))
    c = mul(_neg(y), mul(x, y))
    y = mul(y, mad(c, add(const(2.2533049), c), const(2.2825186)))
    return y, mul(x, y)


def sqrt(x: Bits, dest32: bool) -> Bits:
    """_calculate_sqrt_body_ (ckernel_sfpu_sqrt.h), not reciprocal: x * y refined once more below
    infinity (an integer compare of the bits); x for +-0, NaN below 0."""
    y, xy = _sqrt_start(x)
    refined = mad(mad(_neg(y), xy, ONE), mul(const(0.5), xy), xy)
    y = _select(vu.negative(vu.isub(x, INF)), refined, y)
    y = _select((np.asarray(x, U32) << U32(1)) == 0, x, _select(vu.gt(ZERO, x), NAN, y))
    return y if dest32 else vu.to_bf16(y)


def rsqrt(x: Bits, dest32: bool) -> Bits:
    """_calculate_sqrt_body_ (ckernel_sfpu_sqrt.h), reciprocal: y refined once more; infinity minus
    x's bits (+-inf, 0) for +-0 and infinity, NaN below 0."""
    y, xy = _sqrt_start(x)
    refined = mad(mad(_neg(y), xy, ONE), vu.addexp(y, -1), y)
    refined = _select(vu.gt(ZERO, x), NAN, refined)
    inf_minus_x = vu.isub(INF, x)
    y = _select((inf_minus_x != 0) & ((np.asarray(x, U32) << U32(1)) != 0), refined, inf_minus_x)
    return y if dest32 else vu.to_bf16(y)


def sigmoid(x: Bits, dest32: bool) -> Bits:
    """_sfpu_sigmoid_ (ckernel_sfpu_sigmoid.h): 1 / (1 + exp(-x)), exp_fp32 and two reciprocal steps
    on a 32-bit Dst, exp_21f and one step on a 16-bit one (then rounded to bf16)."""
    if dest32:
        return recip_iter2(add(exp_fp32(_neg(x)), ONE))
    return vu.to_bf16(recip_iter1(add(exp_21f(_neg(x)), ONE)))


def tanh(x: Bits, dest32: bool) -> Bits:
    """calculate_tanh (ckernel_sfpu_tanh.h), accurate: on a 16-bit Dst a degree-6 polynomial in |x|
    capped at 1 (_sfpu_tanh_polynomial_); on a 32-bit one _sfpu_tanh_fp32_accurate_ (after Norbert
    Juffa): (e^2|x| - 1) / (e^2|x| + 1) through expm1's reduction and a refined reciprocal."""
    x = np.asarray(x, U32)
    if not dest32:
        a = vu.fabs(x)
        r = mad(U32(0x3BC0919E), a, U32(0xBD887F48))
        for c in (0x3E905782, 0xBEFA66DB, 0x3CFD1CA0, 0x3F7FBEC0):
            r = mad(r, a, U32(c))
        _, r = vu.minmax(ONE, mul(r, a))
        return vu.to_bf16(vu.setsgn(r, x))
    m = vu.to_int(mul(x, U32(0x4038AA3B)), 255, signed=False)
    a = vu.clear_sign(add(x, x))
    f = mad(vu.cast(m), U32(0xBF317218), a)
    r = bf16_const(0x394F)
    for c in (fp16_const(0x15B5), fp16_const(0x2044), U32(0x3D2AAACF), U32(0x3E2AAAAE), const(0.5)):
        r = mad(r, f, c)
    r = mad(r, mul(f, f), f)
    scale = vu.setexp(ZERO, vu.iadd(m, 126))
    x0 = mad(r, scale, add(const(-0.5), scale))
    y = mad(vu.iadd(a, -1), ZERO, ONE)
    x1 = add(x0, ONE)
    rcp = vu.approx_recip(x1)
    rcp = mad(rcp, mad(_neg(x1), rcp, ONE), rcp)
    y0 = mul(x0, rcp)
    t = mad(_neg(x1), y0, x0)
    inner = _select(vu.exexp(x, debias=False).view(np.int32) >= 115, mad(t, rcp, y0), x)
    return vu.setsgn(_select(m.view(np.int32) < 61, inner, y), x)


def _sine_polynomial(a: Bits, q: Bits, dest32: bool) -> Bits:
    s = mul(a, a)
    a = a ^ q
    if dest32:
        r = mad(words(13870, -7036), s, words(-18097, -18312))
        r = mad(r, s, words(15368, -30867))
        c = mul(a, s)
        return mad(mad(r, s, words(-16854, -21850)), c, a)
    r = mad(words(-18107, -30638), s, words(15368, 24913))
    c = mul(a, s)
    return vu.to_bf16(mad(mad(r, s, words(-16854, -21934)), c, a))


def _reduce(v: Bits, j: Bits, p0: np.uint32, p1: np.uint32, p2: np.uint32, p3: np.uint32) -> Bits:
    """v - j * pi (or pi/2), pi in four parts (the trigonometry kernels' Cody-Waite reduction)."""
    a = mad(j, p0, v)
    a = mad(j, p1, a)
    a = mad(j, p2, a)
    return mad(j, p3, a)


def sin(v: Bits, dest32: bool) -> Bits:
    """calculate_sine (ckernel_sfpu_trigonometry.h): j = rint(v / pi) by adding 1.5 * 2**23, v - j pi,
    an odd polynomial, the sign flipped for odd j."""
    j = mad(v, U32(0x3EA2F983), ROUNDING_BIAS)
    a = _reduce(v, add(NEG_ROUNDING_BIAS, j), bf16_const(0xC049), fp16_const(0x93EC), U32(0xB5288000),
                U32(0xAF05A309))
    return _sine_polynomial(a, j << U32(31), dest32)


def cos(v: Bits, dest32: bool) -> Bits:
    """calculate_cosine (ckernel_sfpu_trigonometry.h): sin(v - (2j - 1) pi/2) with j = rint(v / pi + 1/2)."""
    j = add(ROUNDING_BIAS, mad(v, U32(0x3EA2F983), const(0.5)))
    jj = mad(add(NEG_ROUNDING_BIAS, j), TWO, const(-1.0))
    a = _reduce(v, jj, bf16_const(0xBFC9), fp16_const(0x8FEC), U32(0xB4A88000), U32(0xAE85A309))
    return _sine_polynomial(a, j << U32(31), dest32)


def tan(v: Bits, dest32: bool) -> Bits:
    """calculate_tangent and sfpu_tan (ckernel_sfpu_trigonometry.h): j = rint(2v / pi), tan of the
    remainder by an odd polynomial, -1/tan by a refined reciprocal for odd j."""
    j = mad(v, U32(0x3F22F983), ROUNDING_BIAS)
    a = _reduce(v, add(NEG_ROUNDING_BIAS, j), bf16_const(0xBFC9), fp16_const(0x8FEC), U32(0xB4A88000),
                U32(0xAE85A309))
    odd = vu.negative(j << U32(31))
    s = mul(a, a)
    if not dest32:
        t = mad(words(15783, -28761), s, words(15873, 23744))
        t = mul(mad(t, s, words(16042, -13672)), s)
        r = mad(t, a, a)
        rc = vu.approx_recip(r)
        inverse = mad(_neg(rc), mad(_neg(r), rc, ONE), _neg(rc))
        return vu.to_bf16(_select(odd, inverse, r))
    t = words(15229, 20417)
    for c in (words(14997, -24544), words(15395, -15384), words(15537, 1374), words(15709, 11147),
              words(15880, -30663), words(16042, -21845)):
        t = mad(t, s, c)
    t = mul(t, s)
    r = mad(t, a, a)
    low = mad(t, a, mad(const(-1.0), r, a))
    rc = vu.approx_recip(r)
    rc = mad(_neg(rc), mad(_neg(r), rc, ONE), _neg(rc))
    inverse = mad(mad(low, rc, mad(r, rc, ONE)), rc, rc)
    return _select(odd, inverse, r)


def cbrt(x: Bits, dest32: bool) -> Bits:
    """calculate_cube_root (ckernel_sfpu_cbrt.h): a first guess from x's bits as an integer (SFPCAST)
    times -1/3 plus a magic constant, a polynomial step, and on a 32-bit Dst one more refinement."""
    x = np.asarray(x, U32)
    ax = vu.fabs(x)
    y = vu.shift(mad(vu.cast(ax), U32(0xBAAAAAAB), U32(0x4B548C2C)), 8)
    if not dest32:
        y2 = mul(y, y)
        axy2 = mul(ax, y2)
        c = mul(axy2, y)
        p = mad(c, mad(U32(0x3F0266D9), c, U32(0xBFA01F36)), U32(0x3FE04C03))
        return vu.to_bf16(mul(vu.setsgn(axy2, x), mul(p, p)))
    c = mul(mul(ax, y), mul(y, y))
    y = mul(y, mad(c, mad(U32(0x3F0266D9), c, U32(0xBFA01F36)), U32(0x3FE04C03)))
    axy2 = mul(ax, mul(y, y))
    err = mad(mad(axy2, y, const(-1.0)), vu.addexp(U32(0xBAAAAAAB), 8), ONE)
    return mul(vu.setsgn(axy2, x), mul(err, err))


def fabs(x: Bits, dest32: bool) -> Bits:
    """calculate_abs (ckernel_sfpu_abs.h): SFPABS, a negative NaN kept."""
    return vu.fabs(x)


def negative(x: Bits, dest32: bool) -> Bits:
    """calculate_negative (ckernel_sfpu_negative.h): SFPMOV with its negate mode."""
    return _neg(x)


def sign(x: Bits, dest32: bool) -> Bits:
    """calculate_sign (ckernel_sfpu_sign.h): 0 where |x|'s bits are 0, else 1 with x's sign."""
    return _select(vu.fabs(x) == 0, ZERO, vu.setsgn(ONE, x))


def floor(x: Bits, dest32: bool) -> Bits:
    """_calculate_floor_ (ckernel_sfpu_rounding_ops.h): the integer part, less 1 where it exceeds x."""
    t = _trunc(x)
    return _select(vu.gt(t, x), add(t, const(-1.0)), t)


def ceil(x: Bits, dest32: bool) -> Bits:
    """_calculate_ceil_ (ckernel_sfpu_rounding_ops.h): the integer part, plus 1 where x exceeds it."""
    t = _trunc(x)
    return _select(vu.gt(x, t), add(t, ONE), t)


def round_even(x: Bits, dest32: bool) -> Bits:
    """_calculate_round_ with 0 decimals (ckernel_sfpu_rounding_ops.h): |x| + 2**23 - 2**23 (SFPADDI)
    with x's sign, below 2**23."""
    m = add(const(-8388608.0), add(const(8388608.0), vu.clear_sign(x)))
    return _select(vu.exexp(x).view(np.int32) < 23, vu.setsgn(m, x), x)


def relu(x: Bits, dest32: bool) -> tuple[Bits, Bits]:
    """_relu_min_ (ckernel_sfpu_relu.h): LCONST_0 stored where 0 > x (SFPGT); the other lanes of Dst
    are left as copy_tile wrote them (not flushed by an SFPSTORE)."""
    return np.broadcast_to(ZERO, np.shape(x)), vu.gt(ZERO, x)


def isfinite(x: Bits, dest32: bool) -> Bits:
    """calculate_isfinite (ckernel_sfpu_isinf_isnan.h): 1.0 where the exponent is below 255."""
    return _select(vu.exexp(x, debias=False).view(np.int32) < 255, ONE, ZERO)


def clamp(lo: float, hi: float) -> UnaryKernel:
    """calculate_clamp (ckernel_sfpu_clamp.h): the larger of x and lo (SFPSWAP mode 9), stored and
    loaded again, then the smaller of that and hi."""
    def kernel(x: Bits, dest32: bool) -> Bits:
        low, _ = vu.minmax(const(lo), x)
        _, out = vu.minmax(const(hi), dest_round_trip(low, dest32))
        return out
    return kernel


def _power_21f(base: Bits, pw: Bits) -> tuple[Bits, Bits]:
    """The bf16 log2 / exp2 core of _sfpu_binary_power_21f_ (ckernel_sfpu_binary_pow.h) and
    _sfpu_unary_power_21f_ (ckernel_sfpu_unary_power.h): log2|base| by a cubic in the mantissa,
    2**(pow log2) by exp_21f's integer trick, the sign of an odd integer power, NaN for a negative
    base and a fractional power. Returns (y, where |base| is 0)."""
    absbase = vu.clear_sign(base)
    x = vu.setexp_imm(absbase, 127)
    s = mad(x, mad(x, mad(x, U32(0x3E111CD0), U32(0xBF5E712A)), U32(0x4013D4E2)), U32(0xBFCA94C9))
    log2 = mad(s, LN2_RECIP, vu.cast(vu.sign_magnitude(vu.exexp(base))))
    z = mul(pw, log2)
    z = _select(vu.gt(const(-127.0), z), const(-127.0), z)
    zi = float_to_int32_positive(add(bf16_const(0x4E7E), vu.addexp(z, 23)))
    zif = vu.exman(zi, False)
    d2 = mul(U32(0x332CA418), vu.cast(vu.iadd(zif, 0xF94EE7)))
    zif = float_to_int32_positive(mul(d2, vu.cast(vu.iadd(zif, 0x560E))))
    y = vu.setexp(zif, vu.iadd(vu.exexp(zi), 127))
    pow_int = vu.to_int16(pw)
    signed = _select(vu.cast(pow_int) != pw, NAN, vu.setsgn(y, pow_int << U32(31)))
    return _select(vu.gt(ZERO, base), signed, y), absbase == 0


def _log_m(abs_base: Bits, recip_start: tuple[int, int]) -> tuple[Bits, Bits]:
    """The f32 power kernels' log: m in [sqrt(2)/2, sqrt(2)), ln m = 2 atanh((m-1)/(m+1)) by a series in
    z**2 after a 3-step Newton reciprocal. Returns (ln m, the exponent as f32)."""
    m = vu.setexp_imm(abs_base, 127)
    ex = vu.exexp(abs_base)
    big = vu.le(U32(0x3FB504F3), m)
    m = _select(big, vu.addexp(m, -1), m)
    ex = _select(big, vu.iadd(ex, 1), ex)
    m1 = add(m, ONE)
    rc = mad(_neg(m1), U32(recip_start[0]), U32(recip_start[1]))
    for _ in range(3):
        rc = mul(rc, mad(_neg(m1), rc, TWO))
    z = mul(add(m, const(-1.0)), rc)
    z2 = mul(z, z)
    p = mad(z2, U32(0x3DBA2E8C), U32(0x3DE38E39))
    for c in (0x3E124925, 0x3E4CCCCD, 0x3EAAAAAB):
        p = mad(z2, p, U32(c))
    p = mad(z2, p, ONE)
    return mul(TWO, mul(z, p)), vu.cast(vu.sign_magnitude(ex))


def _pow_split(pw: Bits, exp_f32: Bits, ln_m: Bits) -> tuple[Bits, Bits]:
    """pow * log2|base| as z_hi + z_lo, pow split by Veltkamp (4097)."""
    pc = mul(pw, U32(0x45800800))
    pow_hi = mad(const(-1.0), add(_neg(pw), pc), pc)
    pow_lo = add(pw, _neg(pow_hi))
    return mul(pow_hi, exp_f32), mad(pow_lo, exp_f32, mul(pw, mul(ln_m, LN2_RECIP)))


def _negative_base(y: Bits, base: Bits, pw: Bits) -> Bits:
    pow_int = vu.to_int16(pw)
    signed = _select(vu.cast(pow_int) != pw, NAN, vu.setsgn(y, pow_int << U32(31)))
    return _select(vu.gt(ZERO, base), signed, y)


def power_scalar(exponent: float) -> UnaryKernel:
    """ttnn.pow(x, float) (ttnn's composite pow): power_iterative_tile for the exponents 0, 1, 2, 3
    (calculate_unary_power_iterative: products of x, stored as they are), else power_tile
    (calculate_unary_power, ckernel_sfpu_unary_power.h: _sfpu_unary_power_21f_ on a 16-bit Dst,
    _sfpu_unary_power_61f_updated_ on a 32-bit one)."""
    e = float(exponent)
    if e == np.floor(e) and int(e) in (0, 1, 2, 3):
        def iterative(x: Bits, dest32: bool) -> Bits:
            if int(e) == 0:
                return np.broadcast_to(ONE, np.shape(x)).copy()
            result, square, n = np.asarray(x, U32), np.asarray(x, U32), int(e) - 1
            while n:
                if n & 1:
                    result = mul(result, square)
                square, n = mul(square, square), n >> 1
            return result
        return iterative
    pw = const(e)

    def kernel(base: Bits, dest32: bool) -> Bits:
        if not dest32:
            y, zero = _power_21f(base, pw)
            y = _select(zero & vu.gt(pw, ZERO), ZERO, y) if e >= 0 else _select(zero, NAN, y)
            return vu.to_bf16(y)
        ln_m, exp_f32 = _log_m(vu.fabs(base), (0x3E79DB23, 0x3F80624E))
        y = _negative_base(_pow2_hilo(*_pow_split(pw, exp_f32, ln_m)), base, pw)
        zero = vu.fabs(base) == 0
        return _select(zero & vu.gt(pw, ZERO), ZERO, y) if e >= 0 else _select(zero, NAN, y)
    return kernel


def _pow2_hilo(z_hi: Bits, z_lo: Bits) -> Bits:
    """_sfpu_pow2_f32_accurate_hilo_ (ckernel_sfpu_unary_power.h): 2**(z_hi + z_lo), the integer part
    rounded by the 1.5 * 2**23 trick, the fraction by a degree-7 polynomial of exp."""
    s = add(z_hi, z_lo)
    e = add(z_lo, add(z_hi, _neg(s)))
    s, _ = vu.minmax(s, U32(0xC2FDFFFF))
    tmp = add(ROUNDING_BIAS, s)
    k_int = vu.isub(tmp, ROUNDING_BIAS)
    f = add(mad(const(-1.0), add(NEG_ROUNDING_BIAS, tmp), s), e)
    r = mad(f, fp16_const(0x398C), mul(f, U32(0xB95E8083)))
    p = mad(r, U32(0x39500D01), U32(0x3AB60B61))
    for c in (0x3C088889, 0x3D2AAAAB, 0x3E2AAAAB, 0x3F000000, 0x3F800000, 0x3F800000):
        p = mad(r, p, U32(c))
    result = vu.setexp(p, vu.iadd(vu.exexp(p, debias=False), k_int.view(np.int32)))
    return _select(vu.le(const(128.0), s), INF, result)


# --- binary kernels -----------------------------------------------------------------------------

def add_binary(a: Bits, b: Bits, dest32: bool) -> Bits:
    """calculate_sfpu_binary ADD (ckernel_sfpu_binary.h): SFPADD."""
    return add(a, b)


def sub_binary(a: Bits, b: Bits, dest32: bool) -> Bits:
    """calculate_sfpu_binary SUB: SFPADD with b negated."""
    return vu.sub(a, b)


def mul_binary(a: Bits, b: Bits, dest32: bool) -> Bits:
    """calculate_sfpu_binary_mul (ckernel_sfpu_binary.h): SFPMUL; on a 16-bit Dst rounded to bf16
    (float32_to_bf16_rne) and 0 where either operand's bits are 0."""
    r = mul(a, b)
    if dest32:
        return r
    return _select((np.asarray(a, U32) != 0) & (np.asarray(b, U32) != 0), bf16_rne(r), ZERO)


def div_binary(a: Bits, b: Bits, dest32: bool) -> Bits:
    """calculate_sfpu_binary_div (ckernel_sfpu_binary.h). A 32-bit Dst divides the mantissas (one
    reciprocal step and a residual correction) and puts the exponent back in two halves, special
    values by -a * scale + NaN-mask; a 16-bit one multiplies by recip_iter2 and rounds to bf16."""
    a, b = np.asarray(a, U32), np.asarray(b, U32)
    if not dest32:
        result = mul(a, recip_iter2(b))
        result = _select(b == 0, _select(a == 0, NAN, vu.setsgn(INF, a)), result)
        return bf16_rne(result)
    ma, mb = vu.setexp_imm(a, 127), vu.setexp_imm(b, 127)
    y = vu.approx_recip(mb)
    r = mad(y, mad(_neg(mb), y, TWO), NEG_ZERO)
    q = mul(ma, r)
    q = mad(mad(_neg(q), mb, ma), r, q)
    ea = vu.exexp(a, debias=False).view(np.int32)
    eb = vu.exexp(b).view(np.int32)
    exponent = (ea - eb + vu.exexp(q, debias=False).view(np.int32)).view(U32)
    half = exponent >> U32(1)
    result = mul(vu.setexp(q, half), vu.setexp(ONE, vu.isub(exponent, half)))
    normal = (ea >= 1) & (ea < 255) & (eb >= -126) & (eb < 128)
    nan_divisor = _select(vu.gt(vu.clear_sign(b), INF), U32(0xFFFFFFFF), ZERO)
    return _select(normal, result, mad(_neg(a), vu.setman_zero(~b), nan_divisor))


def power_binary(base: Bits, pw: Bits, dest32: bool) -> Bits:
    """calculate_sfpu_binary_pow (ckernel_sfpu_binary_pow.h): _sfpu_binary_power_21f_ on a 16-bit Dst
    (0 for a zero base, NaN if the power is negative), _sfpu_binary_power_f32_ on a 32-bit one."""
    base, pw = np.asarray(base, U32), np.asarray(pw, U32)
    if not dest32:
        y, zero = _power_21f(base, pw)
        y = _select(zero & (pw != 0), _select(vu.gt(ZERO, pw), NAN, ZERO), y)
        return vu.to_bf16(y)
    ln_m, exp_f32 = _log_m(vu.fabs(base), (0x3E7876CD, 0x3F800000))
    z_hi, z_lo = _pow_split(pw, exp_f32, ln_m)
    s = add(z_hi, z_lo)
    e = add(z_lo, add(z_hi, _neg(s)))
    clamp = vu.gt(const(-127.0), s)
    s, e = _select(clamp, const(-127.0), s), _select(clamp, ZERO, e)
    tmp = add(ROUNDING_BIAS, s)
    frac = add(mad(const(-1.0), add(NEG_ROUNDING_BIAS, tmp), s), e)
    y = exp_fp32(mul(frac, U32(0x3F317218)))
    out_exp = vu.iadd(vu.exexp(y, debias=False), vu.isub(tmp, ROUNDING_BIAS).view(np.int32))
    y = _select(out_exp.view(np.int32) >= 255, INF, vu.setexp(y, out_exp))
    abs_pow = vu.fabs(pw)
    y = _negative_base(y, base, abs_pow)
    zero = vu.fabs(base) == 0
    filled = vu.setsgn(ZERO, y)
    filled = _select(vu.gt(ZERO, pw), vu.setsgn(INF, filled), filled)
    y = _select(zero & (abs_pow != 0), filled, y)
    pow_nan = ((pw >> U32(23)) & U32(255) == 255) & ((pw & U32(0x7FFFFF)) != 0)
    return _select(zero & pow_nan, NAN, y)


def remainder_binary(a: Bits, b: Bits, dest32: bool) -> Bits:
    """calculate_sfpu_binary_remainder (ckernel_sfpu_binary_remainder.h): a - floor(a * recip(b)) * b,
    moved into b's sign and corrected by b once either way; NaN for b = 0."""
    a, b = np.asarray(a, U32), np.asarray(b, U32)
    r = mad(_neg(floor(mul(a, recip_iter2(b)), dest32)), b, a)
    r = _select((r != 0) & vu.negative(r ^ b), add(r, b), r)
    less_b = mad(const(-1.0), b, r)
    r = _select(vu.gt(b, ZERO) & vu.gt(a, ZERO) & vu.le(ZERO, less_b), less_b, r)
    less_b = mad(const(-1.0), b, r)
    r = _select(vu.gt(ZERO, b) & vu.gt(ZERO, a) & vu.le(less_b, ZERO), less_b, r)
    r = _select(b == 0, NAN, r)
    return r if dest32 else vu.to_bf16(r)


def atan2_binary(y: Bits, x: Bits, dest32: bool) -> Bits:
    """_sfpu_atan2_ (ckernel_sfpu_atan2.h): atan(min/max) by an odd polynomial (degree 17 on a 32-bit
    Dst with recip_iter2, 5 with SFPARECIP alone on a 16-bit one), folded into the octant by integer
    compares of the magnitudes; NaN when the larger magnitude is NaN."""
    y, x = np.asarray(y, U32), np.asarray(x, U32)
    ax = vu.clear_sign(x)
    larger, smaller = vu.minmax(vu.clear_sign(y), ax)
    a = mul(smaller, recip_iter2(larger) if dest32 else vu.approx_recip(larger))
    s = mul(a, a)
    if dest32:
        q = fp16_const(0x1C07)
        for c in (fp16_const(0xA52F), fp16_const(0x2A4C), fp16_const(0xAD23), fp16_const(0x2EF5),
                  bf16_const(0xBE12), U32(0x3E4CC9C5), U32(0xBEAAAAAC)):
            q = mad(q, s, c)
    else:
        q = mad(mad(fp16_const(0xAB7A), s, fp16_const(0x319A)), s, bf16_const(0xBEAA))
    r = mad(mul(q, s), a, a)
    folded = _select(vu.at_least(smaller, larger), _select(larger == 0, ZERO, vu.addexp(HALF_PI, -1)),
                     mad(const(-1.0), r, HALF_PI))
    r = _select(vu.at_least(smaller, ax), folded, r)
    r = _select(vu.gt(ZERO, x), mad(const(-1.0), r, vu.addexp(HALF_PI, 1)), r)
    r = vu.setsgn(r if dest32 else vu.to_bf16(r), y)
    return _select(vu.negative(vu.isub(INF, larger)), NAN, r)


def max_binary(a: Bits, b: Bits, dest32: bool) -> Bits:
    """calculate_binary_max_min (ckernel_sfpu_binary_max_min.h): SFPSWAP of b (VC) and a (VD), VC kept."""
    return vu.minmax(b, a)[0]


def min_binary(a: Bits, b: Bits, dest32: bool) -> Bits:
    """calculate_binary_max_min, the min: VD kept."""
    return vu.minmax(b, a)[1]


def compare(kind: str) -> BinaryKernel:
    """calculate_binary_comp_fp32 (ckernel_sfpu_binary_comp.h): 1.0 or 0.0 by SFPGT / SFPLE in
    sign-magnitude order, with |a| + |b| (an SFPMAD) telling equal zeros and denormals apart from
    the rest and NaN (the sum's bits above infinity's) from numbers."""
    def kernel(in0: Bits, in1: Bits, dest32: bool) -> Bits:
        in0, in1 = np.asarray(in0, U32), np.asarray(in1, U32)
        if kind in ("eq", "ne"):
            total = add(vu.clear_sign(in0), vu.clear_sign(in1))
            same = vu.le(in0, in1) & vu.le(in1, in0)
            difference = vu.isub(INF, total)  # SFPIADD writes its register, read again by SFPSETCC
            equal = (same & ~vu.negative(difference)) | (_select(same, difference, total) == 0)
            return _select(equal == (kind == "eq"), ONE, ZERO)
        a, b = (in1, in0) if kind in ("gt", "ge") else (in0, in1)
        total = add(vu.clear_sign(a), vu.clear_sign(b))
        number = ~vu.negative(vu.isub(INF, total))
        if kind in ("lt", "gt"):
            return _select(vu.gt(b, a) & (total != 0) & number, ONE, ZERO)
        return _select((vu.gt(a, b) & (total != 0)) | ~number, ZERO, ONE)
    return kernel


# --- conversions --------------------------------------------------------------------------------

def typecast_to_bf16(x: Bits, dest32: bool) -> Bits:
    """calculate_typecast_fp32_to_fp16b (ckernel_sfpu_typecast.h): float32_to_bf16_rne's integer
    rounding, stored as FP32 (the packer then takes the upper half)."""
    return bf16_rne(x)


def typecast_to_int32(x: Bits, dest32: bool) -> Bits:
    """calculate_typecast_fp32_to_int32 (ckernel_sfpu_typecast.h): the mantissa shifted by the
    exponent, truncated; INT_MIN from 2**31 (INT_MAX for a positive input), 0 below 1."""
    e = vu.exexp(x).view(np.int32)
    shifted = vu.shift(vu.exman(x, True), e - 23)
    r = _select(e < 0, ZERO, _select(e - 31 < 0, shifted, U32(0x80000000)))
    negative_input = vu.negative(x)
    r = _select(negative_input, (-(r.view(np.int32).astype(np.int64))).astype(U32), r)
    return _select(~negative_input & vu.negative(r), vu.iadd(r, -1), r)


# --- a tile through a core ------------------------------------------------------------------------

DEST32_FORMATS = frozenset({"f32", "si32", "u32"})


def dest_is_32bit(*storages: str) -> bool:
    """Whether tt-metal runs the op with fp32_dest_acc_en: ttnn's unary and binary_ng program factories
    enable it for f32 and 32-bit integer operands (the TTNN programs carry no compute config for
    element-wise ops)."""
    return any(s in DEST32_FORMATS for s in storages)


def _through_core(kernel: UnaryKernel, dest: Bits, dest32: bool) -> Bits:
    """Dst after the kernel: its stores, and the lanes it left untouched."""
    out = kernel(dest, dest32)
    if isinstance(out, tuple):
        value, stored = out
        return _select(stored, vu.store(value, dest32), dest)
    return vu.store(out, dest32)


@lru_cache(maxsize=256)
def _bf16_table(key: tuple) -> np.ndarray:
    """Every bf16 input's result (f32 values) of UNARY_KERNELS' kernel `key` on a 16-bit Dst."""
    kernel = make_unary(*key)
    x = (np.arange(65536, dtype=np.uint32) << U32(16)).view(np.float32)
    dest = vu.unpack(x, False, "bf16")
    return vu.pack(_through_core(kernel, dest, False), False, "bf16")


CHUNK = 1 << 16  # lanes computed at a time: numpy's passes over a kernel's registers stay in cache


def _in_chunks(compute: Callable[..., np.ndarray], *arrays: np.ndarray) -> np.ndarray:
    """compute(*arrays) over flat chunks of CHUNK elements, reassembled in the arrays' shape."""
    shape = arrays[0].shape
    flat = [a.reshape(-1) for a in arrays]
    if flat[0].size <= CHUNK:
        return compute(*flat).reshape(shape)
    return np.concatenate([compute(*(a[i:i + CHUNK] for a in flat))
                           for i in range(0, flat[0].size, CHUNK)]).reshape(shape)


def _unary_compiled(key: tuple) -> Callable[[np.ndarray, np.ndarray, np.ndarray, bool], None] | None:
    """The compiled form (sfpu_lanes) of UNARY_KERNELS' kernel `key` on a 32-bit Dst, if it has one."""
    name, *params = key
    if name in lanes.UNARY_F32:
        return lanes.UNARY_F32[name]
    if name == "pow":
        e = float(params[0])
        if e == np.floor(e) and int(e) in (2, 3):
            return lambda x, out, unsafe, out_f32: lanes.power_iterative_f32(x, out, unsafe, out_f32, int(e))
        if not (e == np.floor(e) and int(e) in (0, 1)):
            bits = const(e).view(np.int32)
            return lambda x, out, unsafe, out_f32: lanes.power_scalar_f32(x, out, unsafe, out_f32, bits, e >= 0)
    return None


def _compiled_with_statement(run: Callable, statement: Callable[..., np.ndarray], *operands: np.ndarray,
                             out_f32: bool) -> np.ndarray:
    """run's results (a compiled kernel over flat f32 operands), and the lanes it marks unsafe computed
    again by `statement` (the numpy pipeline of the same kernel)."""
    flat = [np.ascontiguousarray(v, np.float32).reshape(-1) for v in operands]
    result = np.empty(flat[0].size, np.float32)
    unsafe = np.empty(flat[0].size, np.bool_)
    run(*(v.view(np.int32) for v in flat), result.view(np.int32), unsafe, out_f32)
    if unsafe.any():
        result[unsafe] = statement(*(v[unsafe] for v in flat))
    return result


def unary(key: tuple, x: np.ndarray, source: str, out: str) -> np.ndarray:
    """The values a unary SFPU op stores for inputs `x` (f32 values held in format `source`): copy_tile,
    the kernel `key` (UNARY_KERNELS' name and parameters), SFPSTORE, the packer into `out`. The
    compiled form where there is one (sfpu_lanes), the lanes it cannot vouch for by this statement."""
    dest32 = dest_is_32bit(source)
    x = np.ascontiguousarray(x, np.float32)
    if not dest32 and x.size > 4096:  # a 16-bit Dst: each input's result, looked up
        result = np.empty(x.size, np.float32)
        lanes.lookup(_bf16_table(key).view(np.int32), x.reshape(-1).view(np.int32), result.view(np.int32))
        return result.reshape(x.shape)
    kernel = make_unary(*key)

    def compute(values: np.ndarray) -> np.ndarray:
        return vu.pack(_through_core(kernel, vu.unpack(values, dest32, source), dest32), dest32, out)
    run = _unary_compiled(key) if dest32 and source == "f32" else None
    if run is not None:
        return _compiled_with_statement(run, compute, x, out_f32=out == "f32").reshape(x.shape)
    return _in_chunks(compute, x)


def binary(kernel: BinaryKernel, a: np.ndarray, b: np.ndarray, sources: tuple[str, str], out: str,
           post: list[UnaryKernel] | None = None) -> np.ndarray:
    """The values a binary SFPU op stores (binary_ng's eltwise_binary_sfpu kernels): both operands
    copied into Dst, the kernel, SFPSTORE, any fused activations on Dst, the packer into `out`. The
    compiled form where there is one (sfpu_lanes, no fused activation), the lanes it cannot vouch
    for by this statement."""
    dest32 = dest_is_32bit(*sources)
    a, b = (np.ascontiguousarray(v) for v in np.broadcast_arrays(np.asarray(a, np.float32), np.asarray(b, np.float32)))

    def compute(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        dest = vu.store(kernel(vu.unpack(x, dest32, sources[0]), vu.unpack(y, dest32, sources[1]), dest32), dest32)
        for activation in post or []:
            dest = _through_core(activation, dest, dest32)
        return vu.pack(dest, dest32, out)
    run = _BINARY_COMPILED.get(kernel) if not post else None
    if run is not None:
        flags = (dest32, sources[0] == "f32", sources[1] == "f32")
        result = _compiled_with_statement(lambda x, y, r, unsafe, out_f32: run(x, y, r, unsafe, *flags, out_f32),
                                          compute, a, b, out_f32=out == "f32")
        return result.reshape(a.shape)
    return _in_chunks(compute, a, b)


def where(condition: np.ndarray, a: np.ndarray, b: np.ndarray, sources: tuple[str, str, str], out: str) -> np.ndarray:
    """_calculate_where_ (ckernel_sfpu_where.h): the raw bits of a where the condition's bits are not 0,
    of b elsewhere (no SFPSTORE conversion: LO16 / INT32 loads and stores)."""
    dest32 = dest_is_32bit(*sources)
    c, a, b = np.broadcast_arrays(*(np.asarray(v, np.float32) for v in (condition, a, b)))
    c, a, b = (vu.unpack(v, dest32, s) for v, s in zip((c, a, b), sources))
    return vu.pack(_select(c == 0, b, a), dest32, out)


UNARY_KERNELS: dict[str, UnaryKernel] = {
    "exp": exp, "log": log, "log1p": log1p, "expm1": expm1, "sqrt": sqrt, "rsqrt": rsqrt, "sigmoid": sigmoid,
    "tanh": tanh, "sin": sin, "cos": cos, "tan": tan, "cbrt": cbrt, "abs": fabs, "neg": negative, "sign": sign,
    "floor": floor, "ceil": ceil, "round": round_even, "relu": relu, "isfinite": isfinite,
}
UNARY_FACTORIES: dict[str, Callable[..., UnaryKernel]] = {"clamp": clamp, "pow": power_scalar}
BINARY_KERNELS: dict[str, BinaryKernel] = {
    "add": add_binary, "subtract": sub_binary, "multiply": mul_binary, "divide": div_binary, "pow": power_binary,
    "remainder": remainder_binary, "atan2": atan2_binary, "maximum": max_binary, "minimum": min_binary,
    **{kind: compare(kind) for kind in ("eq", "ne", "gt", "ge", "lt", "le")},
}


_BINARY_COMPILED = {BINARY_KERNELS[name]: run for name, run in lanes.BINARY.items()}


def make_unary(name: str, *params: float) -> UnaryKernel:
    """The unary kernel `name`, its parameters (clamp's bounds, pow's exponent) bound."""
    return UNARY_FACTORIES[name](*params) if name in UNARY_FACTORIES else UNARY_KERNELS[name]


# --- approximate paths and formulas (not bit for bit) --------------------------------------------

# calculate_gelu_appx: (slope, intercept) per |x| segment [0, .5) [.5, 1) [1, 1.5) [1.5, 2) [2, 3) [3, inf)
_GELU_LUT = np.array([(0.1928, -0.00010443), (0.4939, -0.1604), (0.6188, -0.2796), (0.6099, -0.2635),
                      (0.5402, -0.1194), (0.5, 0.0)], np.float64)
_GELU_EDGES = np.array([0.5, 1.0, 1.5, 2.0, 3.0])


def gelu_accurate(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + special.erf(x / np.sqrt(2.0)))).astype(np.float32)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """The tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (calculate_gelu_tanh)."""
    x = np.asarray(x, np.float32)
    return (0.5 * x * (1.0 + np.tanh(np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x ** 3))))


def gelu_fast(x: np.ndarray) -> np.ndarray:
    """0.5 x + LUT(|x|) (ckernel_sfpu_gelu.h, calculate_gelu_appx): GELU(x) - x/2 is even, one line
    per segment of |x|, the coefficients held in 16-bit LUT registers."""
    x = np.asarray(x, np.float32)
    coefficients = _GELU_LUT.astype(np.float16).astype(np.float32)
    segment = np.searchsorted(_GELU_EDGES, np.abs(x), side="right")
    slope, intercept = coefficients[segment, 0], coefficients[segment, 1]
    return (np.float32(0.5) * x + (slope * np.abs(x) + intercept)).astype(np.float32)


def exp_fast(x: np.ndarray) -> np.ndarray:
    """Schraudolph's bit trick (ckernel_sfpu_exp.h, exp_init<APPROXIMATION_MODE, CLAMP_NEGATIVE>): the
    float whose bits are round(A x + (B - C)) << 15, inputs clamped at -88.5."""
    x = np.maximum(np.asarray(x, np.float32), np.float32(-88.5))
    scaled = x * np.float32(256.0 * 1.4426950408889634) + np.float32(32500.818359375)
    integer = np.clip(np.rint(scaled), 0, 65535).astype(np.uint32)
    return (integer << np.uint32(15)).view(np.float32)


def gelu(x: np.ndarray, approximate: bool | str) -> np.ndarray:
    if approximate == "tanh":
        return gelu_tanh(x)
    return gelu_fast(x) if approximate is True else gelu_accurate(np.asarray(x, np.float32))


def exp_21f_rounded(x: np.ndarray) -> np.ndarray:
    """exp on a 16-bit Dst as values (exp_21f_tti), for callers outside the tile pipeline."""
    return round_bf16(exp_21f_tti(np.asarray(x, np.float32).view(U32)).view(np.float32))
