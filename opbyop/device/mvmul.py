"""The matrix engine's MVMUL over a block of a matmul, compiled (numba): the rule opbyop.device.fpu
states, taken output by output at a fraction of a nanosecond a product, so a convolution's whole
reduction can be summed as the chip sums it (tenstorrent/ttsim src/tensix.cpp: mvmul,
fpu_accum_normalize_encode).

Per output, per 32-wide K tile, per fidelity phase in order, per 16-wide K face: the face's 16
products in two groups of 8, each product rounded half up (in magnitude) to its group's largest
exponent and summed as integers; the two group sums and the destination aligned to their largest
exponent (rounded again, the group sums less their sign at the tie), added, and renormalised to 24
mantissa bits (fp32 destination) or 8 (bf16), rounding half away from zero. A product's exponent
does not depend on the phase (only the fixed adjust does), so each face's alignment distances are
found once and serve every phase.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

ZERO_EXP = -8000  # a zero operand's lanes: never a group's largest exponent (fpu.ZERO_EXP)
FAR = 13  # a product (at most 12 bits) shifted this far right rounds to 0
I32 = np.int32


@intrinsic
def _leading_zeros(typingctx, x):  # pragma: no cover (compiled)
    """The number of leading zero bits of an int32 (32 for 0: llvm.ctlz)."""
    def codegen(context, builder, signature, args):
        return builder.ctlz(args[0], ir.Constant(ir.IntType(1), 0))
    return types.int32(types.int32), codegen


@njit(cache=True, forceinline=True)
def _shl(x, count):  # pragma: no cover (compiled)
    """x << count in 32 bits, 0 <= count < 32 (the mask tells LLVM so: it keeps the shift 32 bits wide)."""
    return I32(x << (count & 31))


@njit(cache=True, forceinline=True)
def _sar(x, count):  # pragma: no cover (compiled)
    """x >> count (arithmetic) in 32 bits, 0 <= count < 32."""
    return I32(x >> (count & 31))


@njit(cache=True, forceinline=True)
def _shift_round(man, diff, minus):  # pragma: no cover (compiled)
    """man >> diff rounding half up (less `minus` at the tie), 0 once diff >= 31; 0 <= man < 2**30, diff >= 0."""
    clamped = I32(min(diff, 30))
    half = _sar(_shl(I32(1), clamped), 1)
    return _sar(I32(man + half - minus * I32(clamped > 0)), clamped) * I32(diff < 31)


@njit(cache=True, forceinline=True)
def _group_sum(part_b, part_a, far, m, k0, n):  # pragma: no cover (compiled)
    """One group's 8 products for output n, each rounded half up in magnitude to the group's largest
    exponent (`far`: each lane's distance to it), summed as integers."""
    total = I32(0)
    for lane in range(8):
        product = I32(part_b[m, k0 + lane] * part_a[k0 + lane, n])
        negative = product >> 31  # 0 or -1
        distance = I32(far[k0 % 32 + lane, n])
        aligned = _sar(I32(I32(I32(product ^ negative) - negative) + _sar(_shl(I32(1), distance), 1)), distance)
        total = I32(total + I32(I32(aligned ^ negative) - negative))
    return total


@njit(cache=True, forceinline=True)
def _accumulate(value, s0, s1, e0, e1, fp32_acc):  # pragma: no cover (compiled)
    """fpu_accum_normalize_encode: the two group sums (exponents e0, e1) and the destination's bits
    `value` aligned to their largest exponent (rounded again), added, renormalised and rounded."""
    sign_d = (value >> 31) & 1
    exp_d = (value >> 23) & 255
    man_d = I32((value & 0x7FFFFF) | 0x800000) if exp_d != 0 else I32(0)
    live0, live1 = e0 > 0, e1 > 0
    sign0, sign1 = I32(live0 & (s0 < 0)), I32(live1 & (s1 < 0))
    man0 = _shl(I32(abs(s0)), 13) if live0 else I32(0)
    man1 = _shl(I32(abs(s1)), 13) if live1 else I32(0)
    e0, e1 = (e0 if live0 else I32(0)), (e1 if live1 else I32(0))
    exp = max(exp_d, max(e0, e1))
    man_d = _shift_round(man_d, I32(exp - exp_d), I32(0))
    man0 = _shift_round(man0, I32(exp - e0), sign0)
    man1 = _shift_round(man1, I32(exp - e1), sign1)
    if not fp32_acc:
        man_d = I32(man_d + 4096) & ~0x1FFF
        man0 = I32(man0 + 4096 - sign0) & ~0x1FFF
        man1 = I32(man1 + 4096 - sign1) & ~0x1FFF
    summed = I32(I32(man_d + (man0 if sign0 == sign_d else -man0)) + (man1 if sign1 == sign_d else -man1))
    magnitude = I32(abs(summed))
    sign = sign_d ^ I32(summed < 0)
    shift = I32(24 - max(I32(32 - _leading_zeros(magnitude)), 1))  # 24 less the sum's bit length
    exp = I32(exp - shift)
    if not fp32_acc:
        shift = I32(shift - 16)
    man = _shl(_shift_round(magnitude, I32(max(-shift, 0)), I32(0)), I32(max(shift, 0)))
    if not fp32_acc:
        man = _shl(man, 16)
    exp = I32(exp + ((man >> 24) & 1))
    man &= 0x7FFFFF
    encoded = _shl(sign, 31) | _shl(I32(min(exp, 255)), 23) | (man if exp < 255 else I32(0))
    return encoded if (exp > 0) & (magnitude != 0) else I32(0)


@njit(cache=True)
def mvmul_block(src_b: np.ndarray, exp_b: np.ndarray, src_a: np.ndarray, exp_a: np.ndarray,
                adjusts: np.ndarray, dst: np.ndarray, fp32_acc: bool, rows_in_src_a: bool) -> None:  # pragma: no cover
    """dst (M, N; f32 bit patterns, int64) += rows @ columns as the engine sums it, in place.
    src_b: (2, M, K) the rows' signed mantissa parts (high phase part, low), exp_b (M, K) their
    exponents; src_a: (2, K, N) and exp_a (K, N) the columns'; K a whole number of 16-wide faces;
    adjusts: the exponent adjust of each phase the fidelity runs, in order (fpu._phase_adjust).
    The rows are in0 in srcB and the columns in1 in srcA, or the other way round (`rows_in_src_a`:
    dst is then the transposed result, the work vectorised over the longer side). Every quantity
    fits 32 bits (a product 12, a group sum 16, an aligned mantissa 30), so the lanes are int32; each
    output takes a face's 16 products and its accumulation in one pass, in registers."""
    m_size, k_size = exp_b.shape
    n_size = exp_a.shape[1]
    far = np.empty((32, n_size), np.int8)  # each lane's distance to its group's largest exponent
    top = np.empty((4, n_size), np.int32)
    row = np.empty(n_size, np.int32)
    for m in range(m_size):
        for n in range(n_size):
            row[n] = I32(dst[m, n])
        for start in range(0, k_size, 32):
            faces = min(32, k_size - start) // 16
            for g in range(2 * faces):  # each group's largest exponent, each lane's distance to it
                group_top = top[g]
                group_top[:] = ZERO_EXP
                for lane in range(8):
                    k = start + 8 * g + lane
                    e_b, e_a = exp_b[m, k], exp_a[k]
                    if e_b == ZERO_EXP:  # a zero (a padding channel, say): never the largest, always FAR away
                        continue
                    for n in range(n_size):
                        group_top[n] = max(group_top[n], I32(e_b + e_a[n]))
                for lane in range(8):
                    k = start + 8 * g + lane
                    e_b, e_a, lane_far = exp_b[m, k], exp_a[k], far[8 * g + lane]
                    for n in range(n_size):
                        lane_far[n] = min(I32(group_top[n] - I32(e_b + e_a[n])), FAR)
            for phase in range(adjusts.shape[0]):
                adjust = I32(adjusts[phase])
                src_b_part, src_a_part = (phase >> 1) & 1, phase & 1  # srcB's part by phase bit 1, srcA's by bit 0
                part_b = src_b[src_a_part if rows_in_src_a else src_b_part]
                part_a = src_a[src_b_part if rows_in_src_a else src_a_part]
                if faces == 2:
                    for n in range(n_size):
                        value = row[n]
                        for face in range(2):
                            k0 = start + 16 * face
                            value = _accumulate(value, _group_sum(part_b, part_a, far, m, k0, n),
                                                _group_sum(part_b, part_a, far, m, k0 + 8, n),
                                                I32(top[2 * face, n] + adjust), I32(top[2 * face + 1, n] + adjust),
                                                fp32_acc)
                        row[n] = value
                else:
                    for n in range(n_size):
                        row[n] = _accumulate(row[n], _group_sum(part_b, part_a, far, m, start, n),
                                             _group_sum(part_b, part_a, far, m, start + 8, n),
                                             I32(top[0, n] + adjust), I32(top[1, n] + adjust), fp32_acc)
        for n in range(n_size):
            dst[m, n] = np.int64(row[n]) & 0xFFFFFFFF
