"""The matrix engine (FPU) bit for bit: MVMUL, ELWADD and the packer's rounding, as Tenstorrent's
ttsim models the silicon (tenstorrent/ttsim src/tensix.cpp: mvmul, elwadd,
fpu_accum_normalize_encode, the packer's fp32 -> bf16 path).

What the chip does that a float matmul does not:
- srcA/srcB hold 19 bits: sign, 8-bit exponent, 10 mantissa bits. An f32 operand is unpacked as
  TF32 with its low 13 bits dropped (no rounding), a bf16 one as is; exponent 0 is zero.
- Each fidelity phase multiplies 5 bits of srcA's mantissa by 7 of srcB's: phase bit 0 takes
  srcA's next 5 bits (bits 5..1; bit 0 never takes part) instead of its hidden bit and top 4,
  phase bit 1 srcB's low 4 bits instead of its hidden bit and top 6.
- One MVMUL adds 16 products (K = 16) per output in two groups of 8: each group's products are
  aligned to the group's largest exponent, each rounded half up (in magnitude) to that grid,
  then summed as integers. The two group sums and the destination register are aligned to their
  largest exponent (rounded again), added, and renormalised to 24 mantissa bits (fp32 dest) or 8
  (bf16 dest), rounding half away from zero.
- The packer rounds an fp32 destination to bf16 half away from zero, and flushes bf16 denormals.

A matmul's destination takes, per 32-wide K tile, every fidelity phase over the tile's two
16-wide K faces (phase by phase: the LLK's MOP loops the phases outside the tile's MVMULs).
The MVMULs themselves run compiled (opbyop.device.mvmul, about 0.5 ns a product on one core): exact,
and work grows with M x N x K x phases, so fidelity_matmul uses them up to EXACT_PRODUCTS and a
convolution up to CONV_EXACT_PRODUCTS (formats.py)."""

from __future__ import annotations

import numpy as np

from opbyop.device.mvmul import ZERO_EXP, mvmul_block

FACE = 16  # K per MVMUL
PHASE_ORDER = {"lofi": (0,), "hifi2": (0, 1), "hifi3": (0, 1, 2), "hifi4": (0, 1, 2, 3)}


def u32(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.int64)


def src_register(x: np.ndarray, storage: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sign, exponent, 11-bit mantissa with the hidden 1; 0 where the value is zero) of values as
    srcA/srcB hold them: TF32 truncated from f32, bf16 as stored (`storage` names which)."""
    bits = u32(x) & (0xFFFFE000 if storage in ("f32", "tf32") else 0xFFFF0000)
    v = bits >> 13  # the 19-bit register value
    sign = v >> 18
    exp = (v >> 10) & 255
    zero = (v & 0x3FFFF) < 0x400
    man = np.where(zero, 0, (v & 0x3FF) | 0x400)
    return sign, np.where(zero, 0, exp), man


def _phase_adjust(phase: int) -> int:
    return -127 - (5 if phase & 1 else 0) - (7 if phase & 2 else 0)


def _bit_length(x: np.ndarray) -> np.ndarray:
    """Bits of non-negative integers below 2**53 (0 -> 0)."""
    return np.frexp(x.astype(np.float64))[1].astype(np.int64)


def _shift_round(man: np.ndarray, diff: np.ndarray, minus: np.ndarray | int = 0) -> np.ndarray:
    """man >> diff rounding half up (less `minus` at the tie), 0 once diff >= 31; diff >= 0."""
    safe = np.minimum(diff, 31)
    half = np.where(safe > 0, np.left_shift(1, np.maximum(safe - 1, 0)), 0)
    shifted = np.where(safe > 0, (man + half - np.where(safe > 0, minus, 0)) >> safe, man)
    return np.where(diff >= 31, 0, shifted)


def accumulate(sops: list[tuple[np.ndarray, np.ndarray, np.ndarray]], dst: np.ndarray, fp32_acc: bool) -> np.ndarray:
    """fpu_accum_normalize_encode: group sums (sign, exponent, 25-bit-scale mantissa) added into the
    destination's f32 bit patterns `dst` (bf16 ones in the high half without fp32_acc)."""
    sign_d = dst >> 31
    exp_d = (dst >> 23) & 255
    man_d = np.where(exp_d == 0, 0, (dst & 0x7FFFFF) | 0x800000)
    exp = exp_d
    for _, e, _ in sops:
        exp = np.maximum(exp, e)
    man_d = _shift_round(man_d, exp - exp_d)
    if not fp32_acc:
        man_d = (man_d + (1 << 12)) & ~0x1FFF
    total = man_d.copy()
    for s, e, m in sops:
        m = _shift_round(m, exp - e, s)
        if not fp32_acc:
            m = (m + (1 << 12) - s) & ~0x1FFF
        total = np.where(s == sign_d, total + m, total - m)
    sign = np.where(total < 0, sign_d ^ 1, sign_d)
    man = np.abs(total)
    shift = 24 - _bit_length(man)
    exp = exp - shift
    if not fp32_acc:
        shift = shift - 16
    right = np.maximum(-shift, 0)
    man = np.where(shift < 0, _shift_round(man, right), man << np.maximum(shift, 0))
    if not fp32_acc:
        man = man << 16
    exp = exp + ((man >> 24) & 1)
    man = man & 0x7FFFFF
    out = (sign << 31) | (np.minimum(exp, 255) << 23) | np.where(exp >= 255, 0, man)
    return np.where((total == 0) | (exp <= 0), 0, out)


def operand(x: np.ndarray, storage: str, is_src_a: bool, k_axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """A matmul operand as the multiplier takes it, K zero-padded to whole faces along `k_axis`:
    ((high phase part, low phase part) of the signed mantissa (stacked first), exponent), int32; a
    zero's lanes have part 0 and exponent mvmul.ZERO_EXP. srcA's parts are its hidden bit and top 4
    mantissa bits, then bits 5..1; srcB's its hidden bit and top 6, then its low 4 (<< 3)."""
    x = np.asarray(x, np.float32)
    pad = -x.shape[k_axis] % FACE
    if pad:
        widths = [(0, 0)] * x.ndim
        widths[k_axis] = (0, pad)
        x = np.pad(x, widths)
    # the 19-bit register value (TF32 or bf16 truncated), in int32 throughout
    v = (np.ascontiguousarray(x).view(np.int32) & np.int32(-8192 if storage in ("f32", "tf32") else -65536)) >> 13
    magnitude = v & 0x3FFFF
    live = magnitude >= 0x400
    man = (v & 0x3FF) | 0x400
    negative = (v >> 18) & 1 == 1  # the sign (v is an arithmetic shift of the pattern: its sign bit)
    parts = np.empty((2,) + x.shape, np.int32)
    if is_src_a:
        np.right_shift(man, 6, out=parts[0]), np.bitwise_and(man >> 1, 31, out=parts[1])
    else:
        np.right_shift(man, 4, out=parts[0]), np.left_shift(man & 15, 3, out=parts[1])
    np.negative(parts, out=parts, where=negative)
    parts *= live
    return parts, np.where(live, (v >> 10) & 255, ZERO_EXP).astype(np.int32)


def mvmul_bits(in0: tuple[np.ndarray, np.ndarray], in1: tuple[np.ndarray, np.ndarray], fidelity: str,
               fp32_acc: bool, dst: np.ndarray | None = None) -> np.ndarray:
    """in0 (M, K) @ in1 (K, N), both as `operand` gives them (in0 sits in srcB, in1 in srcA), in the
    destination register as f32 bit patterns (int64), on top of `dst` when given; per K tile of 32,
    every fidelity phase over the tile's two faces (opbyop.device.mvmul, its work vectorised over
    the longer of M and N)."""
    (src_b, exp_b), (src_a, exp_a) = in0, in1
    adjusts = np.array([_phase_adjust(p) for p in PHASE_ORDER[fidelity]], np.int64)
    shape = (exp_b.shape[0], exp_a.shape[1])
    out = np.zeros(shape, np.int64) if dst is None else np.array(np.broadcast_to(dst, shape), np.int64)
    if shape[1] >= shape[0]:
        mvmul_block(_plain(src_b), _plain(exp_b), _plain(src_a), _plain(exp_a), adjusts, out, fp32_acc, False)
        return out
    transposed = np.ascontiguousarray(out.T)
    mvmul_block(_plain(np.swapaxes(src_a, -1, -2)), _plain(exp_a.T), _plain(np.swapaxes(src_b, -1, -2)),
                _plain(exp_b.T), adjusts, transposed, fp32_acc, True)
    return np.ascontiguousarray(transposed.T)


def _plain(x: np.ndarray) -> np.ndarray:
    """A C-contiguous, writable array (a copy only where `x` is neither): numba compiles the kernel
    once per kind of array it is given, and a read-only view (a broadcast operand) is another kind."""
    return np.require(x, requirements=["C", "W"])


def matmul_bits(a: np.ndarray, b: np.ndarray, storage: tuple[str, str], fidelity: str, fp32_acc: bool,
                dst: np.ndarray | None = None) -> np.ndarray:
    """a @ b in the destination register as f32 bit patterns (int64), K zero-padded to whole faces,
    accumulated onto `dst` (bit patterns already in the register) when given (mvmul_bits, batch
    element by batch element)."""
    src_b, exp_b = operand(a, storage[0], is_src_a=False)  # in0 sits in srcB
    src_a, exp_a = operand(b, storage[1], is_src_a=True, k_axis=-2)  # in1 in srcA
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    shape = batch + (a.shape[-2], b.shape[-1])
    out = np.zeros(shape, np.int64) if dst is None else np.array(np.broadcast_to(dst, shape), np.int64)
    src_b, exp_b = np.broadcast_to(src_b, (2,) + batch + exp_b.shape[-2:]), np.broadcast_to(exp_b, batch + exp_b.shape[-2:])
    src_a, exp_a = np.broadcast_to(src_a, (2,) + batch + exp_a.shape[-2:]), np.broadcast_to(exp_a, batch + exp_a.shape[-2:])
    for index in np.ndindex(*batch):
        out[index] = mvmul_bits((src_b[(slice(None),) + index], exp_b[index]), (src_a[(slice(None),) + index], exp_a[index]),
                                fidelity, fp32_acc, out[index])
    return out


def reload_through_src_a(bits: np.ndarray) -> np.ndarray:
    """Destination bit patterns packed to L1 and copied back through srcA: the low 13 bits dropped
    (TF32), as a kernel reloading its partial sums sees them (bf16 values pass unchanged)."""
    return np.asarray(bits, np.int64) & 0xFFFFE000


def pack_bf16(bits: np.ndarray) -> np.ndarray:
    """The packer's fp32 -> bf16: round half away from zero, NaN to inf, denormals to zero (as f32)."""
    bits = np.asarray(bits, np.int64)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    bits = np.where(nan, (bits & 0x80000000) | 0x7F800000, bits)
    value = (bits + 0x8000) >> 16
    value = np.where((value & 0x7FFF) < 0x80, 0, value)
    return (value << 16).astype(np.uint32).view(np.float32)


def as_f32(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, np.int64).astype(np.uint32).view(np.float32)


def add_bits(a: np.ndarray, b: np.ndarray, storage: tuple[str, str], fp32_acc: bool) -> np.ndarray:
    """ELWADD (a + b on the FPU) into a cleared destination, as f32 bit patterns (int64): the smaller
    operand's 11-bit mantissa aligned to the larger's exponent (rounded half up), added, then
    renormalised as the destination holds it."""
    sa, ea, ma = src_register(a, storage[0])
    sb, eb, mb = src_register(b, storage[1])
    swap = ((ea << 10) | (ma & 0x3FF)) < ((eb << 10) | (mb & 0x3FF))  # keep |a| >= |b|
    sa, sb = np.where(swap, sb, sa), np.where(swap, sa, sb)
    ea, eb = np.where(swap, eb, ea), np.where(swap, ea, eb)
    ma, mb = np.where(swap, mb, ma), np.where(swap, ma, mb)
    d = ea - eb
    mb = np.where(d >= 12, 0, _shift_round(mb, np.minimum(d, 12)))
    total = np.where(sa == sb, ma + mb, ma - mb) << 13
    dst = np.zeros(np.shape(total), np.int64)
    return accumulate([(sa, ea, total)], dst, fp32_acc)


def pack(x: np.ndarray, storage: str) -> np.ndarray:
    """Destination values (f32) as the packer writes them in `storage`: bf16 rounded half away from
    zero (a later nearest-even store leaves them as they are); other formats untouched here."""
    if storage != "bf16":
        return x
    return pack_bf16(u32(x))
