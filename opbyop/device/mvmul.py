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
from numba import njit

ZERO_EXP = -8000  # a zero operand's lanes: never a group's largest exponent (fpu.ZERO_EXP)
FAR = 13  # a product (at most 12 bits) shifted this far right rounds to 0


@njit(cache=True, inline="always")
def _shift_round(man, diff, minus):
    """man >> diff rounding half up (less `minus` at the tie), 0 once diff >= 31; diff >= 0."""
    clamped = min(diff, 62)
    half = (np.int64(1) << clamped) >> 1
    return ((man + half - minus * np.int64(clamped > 0)) >> clamped) * np.int64(diff < 31)


@njit(cache=True)
def mvmul_block(src_b: np.ndarray, exp_b: np.ndarray, src_a: np.ndarray, exp_a: np.ndarray,
                adjusts: np.ndarray, dst: np.ndarray, fp32_acc: bool, rows_in_src_a: bool) -> None:  # pragma: no cover
    """dst (M, N; f32 bit patterns, int64) += rows @ columns as the engine sums it, in place.
    src_b: (2, M, K) the rows' signed mantissa parts (high phase part, low), exp_b (M, K) their
    exponents; src_a: (2, K, N) and exp_a (K, N) the columns'; K a whole number of 16-wide faces;
    adjusts: the exponent adjust of each phase the fidelity runs, in order (fpu._phase_adjust).
    The rows are in0 in srcB and the columns in1 in srcA, or the other way round (`rows_in_src_a`:
    dst is then the transposed result, the work vectorised over the longer side)."""
    m_size, k_size = exp_b.shape
    n_size = exp_a.shape[1]
    distance = np.empty((32, n_size), np.int32)
    top = np.empty((4, n_size), np.int32)
    sums = np.empty((2, n_size), np.int32)
    magnitude = np.empty(n_size, np.int64)
    floats = np.empty(n_size, np.float64)
    float_bits = floats.view(np.int64)
    exponent = np.empty(n_size, np.int64)
    sign = np.empty(n_size, np.int64)
    for m in range(m_size):
        row = dst[m]
        for start in range(0, k_size, 32):
            faces = min(32, k_size - start) // 16
            for g in range(2 * faces):  # each group's largest exponent, each lane's distance to it
                group_top = top[g]
                group_top[:] = ZERO_EXP
                for lane in range(8):
                    k = start + 8 * g + lane
                    e_b, e_a = exp_b[m, k], exp_a[k]
                    if e_b == ZERO_EXP:  # a zero (a padding channel, say): its products are skipped below
                        continue
                    for n in range(n_size):
                        group_top[n] = max(group_top[n], e_b + e_a[n])
                for lane in range(8):
                    k = start + 8 * g + lane
                    e_b, e_a, far = exp_b[m, k], exp_a[k], distance[8 * g + lane]
                    if e_b == ZERO_EXP:
                        continue
                    for n in range(n_size):
                        far[n] = min(group_top[n] - (e_b + e_a[n]), FAR)
            for phase in range(adjusts.shape[0]):
                adjust = adjusts[phase]
                src_b_part, src_a_part = (phase >> 1) & 1, phase & 1  # srcB's part by phase bit 1, srcA's by bit 0
                part_b = src_b[src_a_part if rows_in_src_a else src_b_part]
                part_a = src_a[src_b_part if rows_in_src_a else src_a_part]
                for face in range(faces):
                    for half in range(2):
                        g = 2 * face + half
                        total = sums[half]
                        total[:] = 0
                        for lane in range(8):
                            k = start + 8 * g + lane
                            b = part_b[m, k]
                            if b == 0:
                                continue
                            a, far = part_a[k], distance[8 * g + lane]
                            for n in range(n_size):
                                product = b * a[n]
                                aligned = ((abs(product) << 1) + (1 << far[n])) >> (far[n] + 1)
                                total[n] += aligned if product >= 0 else -aligned
                    top0, top1 = top[2 * face], top[2 * face + 1]
                    for n in range(n_size):  # fpu_accum_normalize_encode: align, add ...
                        value = row[n]
                        sign_d = (value >> 31) & 1
                        exp_d = (value >> 23) & 255
                        man_d = ((value & 0x7FFFFF) | 0x800000) * np.int64(exp_d != 0)
                        e0, e1 = np.int64(top0[n]) + adjust, np.int64(top1[n]) + adjust
                        s0, s1 = np.int64(sums[0, n]), np.int64(sums[1, n])
                        live0, live1 = np.int64(e0 > 0), np.int64(e1 > 0)
                        sign0, sign1 = live0 & np.int64(s0 < 0), live1 & np.int64(s1 < 0)
                        man0, man1 = (abs(s0) << 13) * live0, (abs(s1) << 13) * live1
                        e0, e1 = e0 * live0, e1 * live1
                        exp = max(exp_d, max(e0, e1))
                        man_d = _shift_round(man_d, exp - exp_d, 0)
                        man0 = _shift_round(man0, exp - e0, sign0)
                        man1 = _shift_round(man1, exp - e1, sign1)
                        if not fp32_acc:
                            man_d = (man_d + 4096) & ~0x1FFF
                            man0 = (man0 + 4096 - sign0) & ~0x1FFF
                            man1 = (man1 + 4096 - sign1) & ~0x1FFF
                        summed = man_d + man0 * (1 - 2 * (sign0 ^ sign_d)) + man1 * (1 - 2 * (sign1 ^ sign_d))
                        magnitude[n] = abs(summed)
                        exponent[n] = exp
                        sign[n] = sign_d ^ np.int64(summed < 0)
                        floats[n] = float(abs(summed))
                    for n in range(n_size):  # ... renormalise and round
                        man = magnitude[n]
                        shift = 24 - max((float_bits[n] >> 52) - 1022, 1)  # 24 less the sum's bit length
                        exp = exponent[n] - shift
                        if not fp32_acc:
                            shift -= 16
                        man = _shift_round(man, max(-shift, 0), 0) << max(shift, 0)
                        if not fp32_acc:
                            man = man << 16
                        exp += (man >> 24) & 1
                        man &= 0x7FFFFF
                        encoded = (sign[n] << 31) | (min(exp, 255) << 23) | (man * np.int64(exp < 255))
                        row[n] = encoded * np.int64(exp > 0) * np.int64(magnitude[n] != 0)
