"""The vector unit (SFPU) of a Blackhole Tensix core, instruction by instruction, on numpy arrays.

A lane of a vector register (LReg) holds 32 bits; here one element of an np.uint32 array holds them.
Each function is one SFPU instruction, or one mode of one, as ttsim executes it (tenstorrent/ttsim
v1.10.0, src/tensix.cpp `TENSIX_EXECUTE_<INSTRUCTION>`, and src/fma.cpp `fma_model_bh` for every
floating-point operation), which follows Tenstorrent's ISA pages (tenstorrent/tt-isa-documentation,
BlackholeA0/TensixTile/TensixCoprocessor/<INSTRUCTION>.md). A kernel's `v_if` (lane enables) is
np.where on the result: a disabled lane keeps its register.

The destination register (Dst) and the packer are modelled where a tile enters and leaves the vector
unit: `unpack` (what copy_tile leaves in Dst), `store` (SFPSTORE) and `pack` (the packer into the
output's format).
"""

from __future__ import annotations

import numpy as np
from numba import njit

U32 = np.uint32
SIGN = U32(0x80000000)
ONE = U32(0x3F800000)
ZERO = U32(0)
NEG_ZERO = U32(0x80000000)
INF = U32(0x7F800000)
NAN = U32(0x7FC00000)  # the NaN every SFPMAD returns, and tt-metal's quiet_NaN()
_ABS = U32(0x7FFFFFFF)
_SMALLEST_NORMAL = U32(0x800000)
_EDGE = np.float32(2.0 ** -125)  # below this, a sum or product may be a denormal the unit flushes


def const(x: float) -> np.uint32:
    """The bit pattern of an f32 constant (what a kernel's SFPLOADI pair loads)."""
    return np.float32(x).view(U32)


def bf16_const(upper: int) -> np.uint32:
    """SFPLOADI mode 0 (FLOATB): a bf16 immediate as the upper half of the register."""
    return U32(upper << 16)


def fp16_const(imm: int) -> np.uint32:
    """SFPLOADI mode 1 (FLOATA): an fp16 immediate, its exponent rebiased by 112 (no inf or NaN)."""
    return U32(((imm & 0x8000) << 16) | (((imm & 0x7FFF) + (112 << 10)) << 13))


def words(hi: int, lo: int) -> np.uint32:
    """A register loaded by SFPLOADI's two halves, as a disassembly shows them (signed 16-bit each)."""
    return U32(((hi & 0xFFFF) << 16) | (lo & 0xFFFF))


# --- SFPMAD: the unit's one floating-point operation (SFPADD, SFPMUL, SFPADDI, SFPMULI are its forms) --

def _mad_steps(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """fma_model_bh step by step (ttsim src/fma.cpp): used for the special values and for results near
    the denormal range, where its shortcuts decide the bits."""
    x, y, z = (np.asarray(v, U32).astype(np.int64) for v in (x, y, z))
    xe, ye, ze = (x >> 23) & 255, (y >> 23) & 255, (z >> 23) & 255
    xm = np.where(xe == 0, 0, (x & 0x7FFFFF) | 0x800000)
    ym = np.where(ye == 0, 0, (y & 0x7FFFFF) | 0x800000)
    zm = np.where(ze == 0, 0, (z & 0x7FFFFF) | 0x800000) << 3
    zs, ps = z & 0x80000000, (x ^ y) & 0x80000000
    pm = (xm * ym) << 3
    pm = (pm >> 23) | ((pm & 0x7FFFFF) != 0)
    pe = xe + ye - 127
    special = (xe == 255) | (ye == 255) | (pe >= 255) | (ze == 255)
    nan = (((xe == 255) & ((xm != 0x800000) | (ym == 0))) | ((ye == 255) & ((ym != 0x800000) | (xm == 0)))
           | ((ze == 255) & (zm != 0x4000000)) | ((ze == 255) & ((xe == 255) | (ye == 255)) & (zs != ps)))
    special_out = np.where(nan, 0x7FC00000, np.where(ze == 255, z, ps | 0x7F800000))
    shortcut = (pm == 0) | (pe < 0)
    shortcut_out = np.where(zm != 0, z, zs & ps)
    re = np.maximum(pe, ze)

    def semi_sticky(v: np.ndarray, s: np.ndarray) -> np.ndarray:
        shifted = v >> np.minimum(s, 63)
        return np.where(shifted != 0, shifted | ((shifted << np.minimum(s, 63)) != v), 0)

    pm = np.where(pe < re, semi_sticky(pm, re - pe), pm)
    zm = np.where(ze < re, semi_sticky(zm, re - ze), zm)
    rs = np.where(pm >= zm, ps, zs)
    zm = np.where(zs != rs, ~zm, zm)
    pm = np.where(ps != rs, ~pm, pm)
    rm = (zm + pm + (ps != zs)) & 0xFFFFFFFF
    n = np.frexp(rm.astype(np.float64))[1].astype(np.int64) - 27  # 5 - clz32(rm)
    re = re + n
    overflow, low = re >= 255, re <= 0
    n = np.where(low, n + 1, n)
    re = np.where(low, 0, re)
    right = np.maximum(n, 0)
    rm = np.where(n <= 0, (rm << np.maximum(-n, 0)) & 0xFFFFFFFF, (rm >> right) | ((rm & (right | 1)) != 0))
    r = (re << 23) + ((rm >> 3) & 0x7FFFFF)
    r = r + (((rm & 7) + (r & 1)) > 4)
    r = np.where((r >> 23) == 0, 0, r)
    out = np.where(overflow, rs | 0x7F800000, rs | r)
    out = np.where(rm == 0, zs & ps, out)
    out = np.where(shortcut, shortcut_out, out)
    return np.where(special, special_out, out).astype(U32)


def _special(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """fma_model_bh where an operand is infinite or NaN, or the product overflows: NaN for NaN
    operands, 0 * inf and inf - inf; else z when it is infinite, else the product's infinity."""
    xe, ye, ze = (x >> U32(23)) & U32(255), (y >> U32(23)) & U32(255), (z >> U32(23)) & U32(255)
    x_nan, y_nan, z_nan = ((v & _ABS) > INF for v in (x, y, z))
    ps, zs = (x ^ y) & SIGN, z & SIGN
    nan = x_nan | y_nan | z_nan | ((xe == 255) & (ye == 0)) | ((ye == 255) & (xe == 0)) | \
        ((ze == 255) & ((xe == 255) | (ye == 255)) & (zs != ps))
    return np.where(nan, NAN, np.where(ze == 255, z, ps | INF)).astype(U32)


def _with_steps(out: np.ndarray, hard: np.ndarray, x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """`out`, with the lanes `hard` marks computed as fma_model_bh computes them: the special values by
    their rule, the rest (results near the denormal range) step by step."""
    if not hard.any():
        return out
    out = np.array(out, U32)
    x, y, z = x[hard], y[hard], z[hard]
    xe, ye, ze = (x >> U32(23)) & U32(255), (y >> U32(23)) & U32(255), (z >> U32(23)) & U32(255)
    special = (xe == 255) | (ye == 255) | (ze == 255) | (xe.astype(np.int64) + ye - 127 >= 255)
    out[hard] = np.where(special, _special(x, y, z), _mad_steps(x, y, z) if not special.all() else ZERO)
    return out


_POW2 = np.ldexp(1.0, np.arange(-512, 512))  # 2**k at [k + 512]: scaling by a table read, not a libm call


@njit(cache=True)
def _mad_lanes(x: np.ndarray, y: np.ndarray, z: np.ndarray, xf: np.ndarray, yf: np.ndarray, zf: np.ndarray,
               out: np.ndarray, outf: np.ndarray, hard: np.ndarray) -> None:  # pragma: no cover (compiled)
    """`mad_numpy`'s rule lane by lane, compiled: x, y, z the bit patterns (xf, yf, zf the same
    memory as f32), written to out (outf: its f32 view); `hard` marks the lanes fma_model_bh's
    special or denormal-range steps must decide."""
    for i in range(x.size):
        xe, ye, ze = (x[i] >> 23) & 255, (y[i] >> 23) & 255, (z[i] >> 23) & 255
        pe = np.int64(xe) + np.int64(ye) - 127
        ps, zs = ((x[i] ^ y[i]) >> 31) != 0, (z[i] >> 31) != 0
        signed_zero = np.uint32(0x80000000) if ps and zs else np.uint32(0)
        if xe == 255 or ye == 255 or ze == 255 or pe >= 255:
            hard[i] = True
            out[i] = 0
            continue
        if xe == 0 or ye == 0 or pe < 0:
            out[i] = z[i] if ze != 0 else signed_zero
            continue
        larger = max(pe, np.int64(ze))
        to_units = _POW2[153 - larger + 512]
        p = abs(np.float64(xf[i]) * np.float64(yf[i])) * to_units
        pi = np.int64(p)
        if pi != 0 and pi != p:
            pi |= 1
        qi = np.int64(0)
        if ze != 0:
            q = abs(np.float64(zf[i])) * to_units
            qi = np.int64(q)
            if qi != 0 and qi != q:
                qi |= 1
        total = (-pi if ps else pi) + (-qi if zs else qi)
        if total == 0:
            out[i] = signed_zero
            continue
        outf[i] = np.float32(np.float64(total) * _POW2[larger - 153 + 512])
        hard[i] = (out[i] & np.uint32(0x7F800000)) == 0


def mad(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """SFPMAD, compiled (`_mad_lanes`): the same bits as `mad_numpy`, several times faster."""
    x, y, z = np.broadcast_arrays(np.asarray(x, U32), np.asarray(y, U32), np.asarray(z, U32))
    shape = x.shape
    x, y, z = (np.ascontiguousarray(v).reshape(-1) for v in (x, y, z))
    out = np.empty(x.size, U32)
    hard = np.zeros(x.size, np.bool_)
    _mad_lanes(x, y, z, x.view(np.float32), y.view(np.float32), z.view(np.float32), out, out.view(np.float32), hard)
    return _with_steps(out, hard, x, y, z).reshape(shape)


def mad_numpy(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """SFPMAD: x * y + z as Blackhole's vector unit computes it (ttsim fma_model_bh).

    Not IEEE's fused multiply-add: denormal inputs count as zero; the product keeps 3 bits beyond
    25 and a sticky bit before it is aligned with z; the smaller of the two is shifted to the larger's
    exponent, keeping a sticky bit only while any bit remains; the sum is rounded to nearest even; a
    result below the smallest normal is a signed zero. So, for finite inputs,
    x * y + z = RNE(s_p * RO(|x * y| / u) + s_z * RO(|z| / u)) * u, with u = 2**(E - 26), E the larger
    of the two biased exponents (the product's taken as x's plus y's less 127, before it is
    normalised) and RO rounding to an odd integer (to 0 below 1), computed here in float64 and int64
    exactly; special values and results near the denormal range take fma_model_bh's steps."""
    x, y, z = np.broadcast_arrays(np.asarray(x, U32), np.asarray(y, U32), np.asarray(z, U32))
    xe, ye, ze = (x >> U32(23)) & U32(255), (y >> U32(23)) & U32(255), (z >> U32(23)) & U32(255)
    pe = xe.astype(np.int64) + ye - 127
    larger = np.maximum(pe, ze)
    to_units = ((1023 + 153 - larger) << 52).view(np.float64)  # 2**(153 - E), built from its bits
    unit = ((1023 - 153 + larger) << 52).view(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.abs(x.view(np.float32).astype(np.float64) * y.view(np.float32)) * to_units
        q = np.abs(z.view(np.float32).astype(np.float64)) * to_units
        pi, qi = p.astype(np.int64), q.astype(np.int64)
        pi |= (pi != 0) & (pi != p)
        qi |= (qi != 0) & (qi != q)
        qi = np.where(ze == 0, 0, qi)
        ps, zs = ((x ^ y) & SIGN) != 0, (z & SIGN) != 0
        total = np.where(ps, -pi, pi) + np.where(zs, -qi, qi)
        out = (total * unit).astype(np.float32).view(U32)
    no_product = (xe == 0) | (ye == 0) | (pe < 0)
    signed_zero = np.where(ps & zs, SIGN, ZERO)
    out = np.where(total == 0, signed_zero, out)
    out = np.where(no_product, np.where(ze != 0, z, signed_zero), out)
    hard = (xe == 255) | (ye == 255) | (ze == 255) | (pe >= 255) | \
        (~no_product & (total != 0) & ((out & INF) == 0))
    return _with_steps(out, hard, x, y, z)


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SFPADD (1.0 * a + b): an exact product, so IEEE f32 addition, but for denormals (inputs count as
    zero, results flush) and the sign of an exact zero (negative only when both are)."""
    a, b = np.broadcast_arrays(np.asarray(a, U32), np.asarray(b, U32))
    with np.errstate(all="ignore"):
        r = a.view(np.float32) + b.view(np.float32)
    ae, be = (a >> U32(23)) & U32(255), (b >> U32(23)) & U32(255)
    hard = (ae == 0) | (be == 0) | (ae == 255) | (be == 255) | ~(np.abs(r) >= _EDGE)
    return _with_steps(r.view(U32), hard, np.broadcast_to(ONE, a.shape), a, b)


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SFPMUL (a * b + 0.0): the product rounded to nearest even (its sticky bit keeps IEEE's
    rounding), but for denormals and tiny products (fma_model_bh's own rules)."""
    a, b = np.broadcast_arrays(np.asarray(a, U32), np.asarray(b, U32))
    with np.errstate(all="ignore"):
        r = a.view(np.float32) * b.view(np.float32)
    ae, be = (a >> U32(23)) & U32(255), (b >> U32(23)) & U32(255)
    hard = (ae == 0) | (be == 0) | (ae == 255) | (be == 255) | ~(np.abs(r) >= _EDGE) | ~np.isfinite(r)
    return _with_steps(r.view(U32), hard, a, b, np.broadcast_to(ZERO, a.shape))


def sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a - b as SFPADD with its first operand negated (-1.0 * b + a)."""
    return add(np.asarray(b, U32) ^ SIGN, a)


def neg(x: np.ndarray) -> np.ndarray:
    """SFPMOV with its negate mode: the sign bit flipped (a negated SFPMAD operand is the same)."""
    return np.asarray(x, U32) ^ SIGN


# --- exponent, mantissa and sign fields ---------------------------------------------------------

def exexp(x: np.ndarray, debias: bool = True) -> np.ndarray:
    """SFPEXEXP: the exponent field, less 127 unless mode NODEBIAS (int32 bits)."""
    e = ((np.asarray(x, U32) >> U32(23)) & U32(255)).astype(np.int32)
    return (e - 127 if debias else e).view(U32)


def exman(x: np.ndarray, hidden_one: bool) -> np.ndarray:
    """SFPEXMAN: the 23 mantissa bits, with the implicit one at bit 23 (PAD8) or without (PAD9)."""
    m = np.asarray(x, U32) & U32(0x7FFFFF)
    return m | U32(0x800000) if hidden_one else m


def setexp(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """SFPSETEXP (mode 0): x's sign and mantissa with the low 8 bits of `exponent` as its exponent."""
    return (np.asarray(x, U32) & U32(0x807FFFFF)) | ((np.asarray(exponent, U32) & U32(0xFF)) << U32(23))


def setexp_imm(x: np.ndarray, exponent: int) -> np.ndarray:
    """SFPSETEXP (mode 1): x's sign and mantissa with an immediate exponent."""
    return (np.asarray(x, U32) & U32(0x807FFFFF)) | U32(exponent << 23)


def setexp_of(x: np.ndarray, source: np.ndarray) -> np.ndarray:
    """SFPSETEXP (mode 2): x's sign and mantissa with `source`'s exponent field."""
    return (np.asarray(x, U32) & U32(0x807FFFFF)) | (np.asarray(source, U32) & INF)


def setman_zero(x: np.ndarray) -> np.ndarray:
    """SFPSETMAN with an immediate 0: the mantissa cleared."""
    return np.asarray(x, U32) & U32(0xFF800000)


def setsgn(x: np.ndarray, sign_of: np.ndarray) -> np.ndarray:
    """SFPSETSGN (mode 0): x's magnitude with `sign_of`'s sign bit (copysgn)."""
    return (np.asarray(x, U32) & _ABS) | (np.asarray(sign_of, U32) & SIGN)


def clear_sign(x: np.ndarray) -> np.ndarray:
    """SFPSETSGN (mode 1, immediate 0): the sign cleared."""
    return np.asarray(x, U32) & _ABS


def fabs(x: np.ndarray) -> np.ndarray:
    """SFPABS (float mode): the sign cleared, except of a negative NaN."""
    x = np.asarray(x, U32)
    return np.where(x <= U32(0xFF800000), x & _ABS, x)


def iabs(x: np.ndarray) -> np.ndarray:
    """SFPABS (integer mode): the two's complement magnitude."""
    return np.abs(np.asarray(x, U32).view(np.int32)).view(U32)


def addexp(x: np.ndarray, k: int) -> np.ndarray:
    """SFPDIVP2 (mode 1): k added to the exponent field (mod 256), unless it is 255."""
    x = np.asarray(x, U32)
    e = (x >> U32(23)) & U32(255)
    e = np.where(e != 255, (e + U32(k & 255)) & U32(255), e)
    return (x & U32(0x807FFFFF)) | (e << U32(23))


def iadd(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """SFPIADD: 32-bit two's complement sum."""
    return (np.asarray(a, U32).view(np.int32) + np.asarray(b, np.int64).astype(np.int32)).view(U32)


def isub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SFPIADD's ARG_2SCOMP_LREG_DST mode: a - b in 32 bits."""
    return (np.asarray(a, U32).astype(np.int64) - np.asarray(b, U32)).astype(U32)


def shift(x: np.ndarray, amount: np.ndarray | int) -> np.ndarray:
    """SFPSHFT: left by `amount` when it is >= 0, else logically right (amounts taken mod 32)."""
    x = np.asarray(x, U32)
    amount = np.asarray(amount).astype(np.int64)
    amount = np.where(amount >= 2 ** 31, amount - 2 ** 32, amount)  # register contents are int32
    count = (np.abs(amount) & 31).astype(U32)
    return np.where(amount >= 0, x << count, x >> count)


def cast(x: np.ndarray) -> np.ndarray:
    """SFPCAST (mode 0): a sign-magnitude integer to f32, rounded to nearest even."""
    x = np.asarray(x, U32)
    return setsgn((x & _ABS).astype(np.float64).astype(np.float32).view(U32), x)


def sign_magnitude(x: np.ndarray) -> np.ndarray:
    """SFPCAST (mode 3): a two's complement integer to sign and magnitude."""
    x = np.asarray(x, U32)
    sign = x & SIGN
    return sign | np.where(sign != 0, (-(x.view(np.int32).astype(np.int64))).astype(U32), x)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """SFP_STOCH_RND FP32_TO_FP16B with RND_EVEN, as ttsim executes it: zero and denormals become +0,
    infinity and NaN the infinity of their sign, and the rest round half away from zero (ttsim's
    own note: this disagrees with the ISA page's pseudocode, which rounds to nearest even)."""
    x = np.asarray(x, U32)
    e = (x >> U32(23)) & U32(255)
    rounded = (x & U32(0xFFFF0000)) + np.where((x & U32(0xFFFF)) >= U32(0x8000), U32(0x10000), ZERO)
    return np.where(e == 0, ZERO, np.where(e == 255, x & U32(0xFF800000), rounded))


def to_int(x: np.ndarray, maximum: int, signed: bool) -> np.ndarray:
    """SFP_STOCH_RND FP32_TO_[U]INT8/16 (modes 2, 3, 6, 7): rounded half up to a magnitude of at most
    `maximum`, in sign and magnitude (the sign dropped when unsigned, and for a zero)."""
    x = np.asarray(x, U32)
    sign = (x & SIGN) if signed else np.zeros_like(x)
    e = ((x >> U32(23)) & U32(255)).astype(np.int64) - 127
    mag = (U32(0x800000) | (x & U32(0x7FFFFF))).astype(np.int64)
    mag = np.where(e >= 0, mag << np.clip(e, 0, 40), mag >> np.clip(-e, 0, 63))
    mag = np.minimum((mag >> 23) + ((mag & 0x7FFFFF) >= 0x400000), maximum)
    mag = np.where(e < -1, 0, np.where(e >= 16, maximum, mag)).astype(U32)
    return np.where(mag == 0, ZERO, sign) | mag


def to_int16(x: np.ndarray) -> np.ndarray:
    """convert<vSMag16>: SFP_STOCH_RND FP32_TO_INT16."""
    return to_int(x, 32767, signed=True)


def approx_recip(x: np.ndarray) -> np.ndarray:
    """SFPARECIP: 1/x to 7 bits from a 128-entry table of the mantissa's top 7 bits; infinity for zero
    and denormals, zero from 2**126 up; the sign kept (ttsim approx_recip)."""
    x = np.asarray(x, U32)
    mag = x & _ABS
    out = ((U32(253) - (mag >> U32(23))) << U32(23)) | (_RECIP_LUT[(mag >> U32(16)) & U32(0x7F)] << U32(16))
    out = np.where(mag < _SMALLEST_NORMAL, INF, np.where(mag < U32(0x7E800000), out, ZERO))
    return (x & SIGN) | out


_RECIP_LUT = np.array([
    127, 125, 123, 121, 119, 117, 116, 114, 112, 110, 109, 107, 105, 104, 102, 100, 99,
    97, 96, 94, 93, 91, 90, 88, 87, 85, 84, 83, 81, 80, 79, 77, 76, 75, 74, 72, 71, 70,
    69, 68, 66, 65, 64, 63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48,
    47, 46, 45, 44, 43, 42, 41, 40, 40, 39, 38, 37, 36, 35, 35, 34, 33, 32, 31, 31, 30,
    29, 28, 28, 27, 26, 25, 25, 24, 23, 23, 22, 21, 21, 20, 19, 19, 18, 17, 17, 16, 15,
    15, 14, 14, 13, 12, 12, 11, 11, 10, 9, 9, 8, 8, 7, 7, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1,
    1, 0], U32)


# --- comparisons (the lane flags a v_if sets) ---------------------------------------------------

def _order(x: np.ndarray) -> np.ndarray:
    """f32 bit patterns as int32 in sign-magnitude order (-0 below +0, NaNs beyond the infinities)."""
    x = np.asarray(x, U32).view(np.int32)
    return np.where(x < 0, x ^ np.int32(0x7FFFFFFF), x)


def gt(d: np.ndarray, c: np.ndarray) -> np.ndarray:
    """SFPGT: d > c in sign-magnitude order."""
    return _order(d) > _order(c)


def le(d: np.ndarray, c: np.ndarray) -> np.ndarray:
    """SFPLE: d <= c in sign-magnitude order."""
    return _order(d) <= _order(c)


def minmax(c: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SFPSWAP (VEC_MIN_MAX): (the larger, into VC; the smaller, into VD) in sign-magnitude order,
    equal negative values counting VC the smaller (mode 9 writes them the other way round)."""
    c, d = np.asarray(c, U32), np.asarray(d, U32)
    c_smaller = (_order(c) < _order(d)) | ((c == d) & ((c & SIGN) != 0))
    return np.where(c_smaller, d, c), np.where(c_smaller, c, d)


def negative(x: np.ndarray) -> np.ndarray:
    """SFPSETCC LT0 (and SFPIADD's sign test): the sign bit set."""
    return (np.asarray(x, U32) & SIGN) != 0


def at_least(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """SFPIADD a - b with CC_GTE0: the 32-bit difference's sign bit clear (not a signed compare: it
    wraps for operands 2**31 apart)."""
    return ~negative(isub(a, np.asarray(b, np.int64).astype(U32)))


# --- the destination register and the packer ----------------------------------------------------

def unpack(stored: np.ndarray, dest32: bool, source: str) -> np.ndarray:
    """What copy_tile leaves in Dst, as SFPLOAD's default mode reads it back (f32 bits). f32 data
    goes straight to a 32-bit Dst (unpack to dest: unchanged); bf16 and block floats go through srcA,
    whose MOVA2D flushes zero-exponent values (denormals, -0) to +0 (ttsim TENSIX_EXECUTE_MOVA2D)."""
    x = np.asarray(stored, np.float32).view(U32)
    if source == "f32" and dest32:
        return x
    x = x & U32(0xFFFF0000) if source != "f32" else x
    return np.where((x & INF) == 0, ZERO, x)


def store(x: np.ndarray, dest32: bool) -> np.ndarray:
    """SFPSTORE in its default mode: denormals to signed zero; a 16-bit Dst keeps the upper half."""
    x = np.asarray(x, U32)
    x = np.where((x & _ABS) < _SMALLEST_NORMAL, x & SIGN, x)
    return x if dest32 else x & U32(0xFFFF0000)


def pack(dest: np.ndarray, dest32: bool, out: str) -> np.ndarray:
    """The packer from Dst into the output's format (ttsim TENSIX_EXECUTE_PACR), as f32 values: into
    bf16 a NaN becomes the infinity of its sign and a result below the smallest normal +0; from a
    32-bit Dst it rounds half away from zero. f32 from a 32-bit Dst is unchanged."""
    d = np.asarray(dest, U32)
    if dest32 and out == "f32":
        return d.view(np.float32)
    d = np.where((d & _ABS) > INF, (d & SIGN) | INF, d)
    if dest32:
        d = ((d.astype(np.uint64) + 0x8000) >> 16).astype(U32) << U32(16)
    else:
        d = d & U32(0xFFFF0000)
    return np.where((d & _ABS) < _SMALLEST_NORMAL, ZERO, d).view(np.float32)
