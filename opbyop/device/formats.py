"""Tensix data formats, numerically: what a value becomes when the chip stores or multiplies it.

- bf16 (FP16-B): round to nearest even at 7 mantissa bits.
- TF32: srcA/srcB registers hold 10 mantissa bits (truncated), so FPU math never sees full f32.
- Block floating point (bfp8/4/2 with 7/3/1 magnitude bits), as tt-metal packs it
  (tt_metal/impl/data_format/blockfloat_common.cpp, convert_u32_to_bfp with its default
  truncate_bfp_mantissa = false): each row of a 16x16 tile face (16 consecutive elements of a tile
  row) shares the largest exponent among them; each element's mantissa, hidden 1 made explicit,
  is shifted right by its distance to the shared exponent and ROUNDED to nearest even (clamped to
  the largest magnitude, never carried into the exponent). The B formats (bfp_bf*) keep f32's
  8-bit exponent; the A formats (bfp_f*) rebias it to 5 bits (bias 15): exponents above 31
  saturate to the largest value, below 0 become 2**-15 (the packer keeps the hidden 1). Small
  values beside a large one lose their low bits or flush to zero.
- Math fidelity: the multiplier consumes operand mantissas in phases (srcA: hidden bit + 4 bits,
  then the next 5; srcB: hidden bit + 6 bits, then the last 4); LoFi multiplies only the high
  parts, HiFi2 adds srcA's low part, HiFi3 srcB's low part, HiFi4 all four partial products
  (ttsim's mvmul). srcA's last TF32 mantissa bit never takes part.
- A matmul small enough is computed bit for bit as the matrix engine sums (opbyop.device.fpu:
  products aligned in groups of 8, the destination rounded after every MVMUL); above
  EXACT_PRODUCTS the phases' products are summed by BLAS in f64 and rounded to f32 once: an exact
  sum, where the engine rounds each product to its group's largest exponent, so the two differ by
  about 2**-11 of the output's scale; the BLAS sum does not change with the CPU or the blocking.
"""

from __future__ import annotations

from typing import Callable

import ml_dtypes
import numpy as np

from opbyop.device import fpu

BFP_MANTISSA_BITS = {"bfp_bf8": 7, "bfp_bf4": 3, "bfp_bf2": 1, "bfp_f8": 7, "bfp_f4": 3, "bfp_f2": 1}
BFP_BLOCK = 16
BFP_A_FORMATS = {"bfp_f8", "bfp_f4", "bfp_f2"}  # 5-bit shared exponent (bias 15); bfp_bf* keep 8 bits
FIDELITY_PHASES = {"lofi": 1, "hifi2": 2, "hifi3": 3, "hifi4": 4}
BYTES_PER_ELEMENT = {"f32": 4.0, "tf32": 4.0, "f16": 2.0, "bf16": 2.0, "si32": 4.0, "u32": 4.0, "u16": 2.0,
                     "u8": 1.0, "bfp_bf8": 1.0 + 1 / 16, "bfp_f8": 1.0 + 1 / 16, "bfp_bf4": 0.5 + 1 / 16,
                     "bfp_f4": 0.5 + 1 / 16, "bfp_bf2": 0.25 + 1 / 16, "bfp_f2": 0.25 + 1 / 16, "i1": 1.0}
INTEGER_FORMATS = {"si32": np.int32, "u32": np.uint32, "u16": np.uint16, "u8": np.uint8}
BF16 = np.dtype(ml_dtypes.bfloat16)
# Elements converted at once where a whole-tensor conversion would need full-size temporaries
# (a 70B model's lm_head weight is 1G elements: one f32 copy is 4 GiB).
CHUNK_ELEMENTS = 1 << 22


def _bits(x: np.ndarray) -> np.ndarray:
    # reshape: np.ascontiguousarray makes a rank-0 array rank 1
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).reshape(np.shape(x))


def round_bf16(x: np.ndarray) -> np.ndarray:
    """f32 -> nearest-even bf16, returned as f32 (NaN and inf preserved)."""
    b = _bits(x)
    rounded = (b + np.uint32(0x7FFF) + ((b >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
    out = rounded.view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out).astype(np.float32)


def truncate_mantissa(x: np.ndarray, bits: int) -> np.ndarray:
    """Keep the top `bits` of the 23 mantissa bits (round toward zero), as f32."""
    mask = np.uint32((0xFFFFFFFF << (23 - bits)) & 0xFFFFFFFF)
    return (_bits(x) & mask).view(np.float32)


def to_tf32(x: np.ndarray) -> np.ndarray:
    """What an f32 value becomes in srcA/srcB: 10 mantissa bits, truncated."""
    return truncate_mantissa(x, 10)


def quantize_bfp(x: np.ndarray, fmt: str) -> np.ndarray:
    """Round-trip f32 values through a block floating point format as tt-metal's packer converts
    them (blockfloat_common.cpp: get_max_exp, convert_u32_to_bfp, convert_bfp_to_u32). Blocks are
    16 consecutive elements of the last dimension, counted from its start (a tile row is two face
    rows of 16; the tile's padding is zeros, which never raise a block's exponent)."""
    width = BFP_MANTISSA_BITS[fmt]
    exp_a = fmt in BFP_A_FORMATS
    x = np.asarray(x, dtype=np.float32)
    shape = x.shape
    rows = x.reshape(-1, shape[-1]) if x.ndim else x.reshape(1, 1)
    padded = -(-rows.shape[1] // BFP_BLOCK) * BFP_BLOCK
    blocks = np.zeros((rows.shape[0], padded), np.float32)
    blocks[:, :rows.shape[1]] = rows
    blocks = blocks.reshape(-1, BFP_BLOCK)

    bits = blocks.view(np.uint32).astype(np.int64)
    sign = bits >> 31
    exponent = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    zero = (bits & 0x7FFFFFFF) == 0
    if exp_a:  # rebias 127 -> 15; out of range saturates (high) or keeps only the hidden 1 (low)
        exponent = exponent - 127 + 15
        mantissa = np.where(exponent > 31, 0x7FFFFF, np.where(exponent < 0, 0, mantissa))
        exponent = np.clip(exponent, 0, 31)
    shared = exponent.max(axis=1, keepdims=True)
    mantissa = (mantissa | (1 << 23)) >> np.minimum(shared - exponent, 63)
    shift = 24 - width  # keep `width` bits: the hidden 1 and width - 1 fraction bits at the shared exponent
    rounding = mantissa & ((1 << shift) - 1)
    kept = mantissa >> shift
    tie = 1 << (shift - 1)
    kept = kept + ((rounding > tie) | ((rounding == tie) & ((kept & 1) == 1)))
    kept = np.where(zero, 0, np.minimum(kept, (1 << width) - 1))
    unbiased = shared - (15 if exp_a else 127)
    with np.errstate(over="ignore"):  # a block whose shared exponent is inf/NaN's
        values = np.ldexp(kept.astype(np.float64), (unbiased - (width - 1)).astype(np.int32)).astype(np.float32)
    values = np.where((sign == 1) & (kept != 0), -values, values)  # a zero result drops its sign
    values = np.where(np.isfinite(blocks), values, blocks)  # inf and NaN keep their encoding
    out = values.reshape(rows.shape[0], padded)[:, :rows.shape[1]]
    return out.reshape(shape)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """Nearest-even bf16 values held as bf16 (ml_dtypes): half the bytes of f32, the same values
    as round_bf16; converted chunk by chunk, so no full-size temporary is made."""
    x = np.asarray(x)
    if x.dtype == BF16:
        return x
    out = np.empty(x.shape, BF16)
    flat_in, flat_out = x.reshape(-1), out.reshape(-1)
    for start in range(0, flat_in.size, CHUNK_ELEMENTS):
        # ml_dtypes rounds f32 to nearest even as round_bf16 does (checked bit for bit over f32's range)
        with np.errstate(invalid="ignore"):
            flat_out[start:start + CHUNK_ELEMENTS] = np.asarray(flat_in[start:start + CHUNK_ELEMENTS], np.float32)
    return out


def store(x: np.ndarray, fmt: str, chip_numerics: bool = True) -> np.ndarray:
    """The values a tensor holds once stored in format `fmt` (bf16 as bf16 arrays, other float
    formats as f32 holding the format's values). Without the chip's numerics a float format keeps
    f32 values unrounded (integer formats and booleans are the program's types: kept)."""
    if not chip_numerics and (fmt in ("bf16", "f16") or fmt in BFP_MANTISSA_BITS):
        return np.asarray(x, dtype=np.float32)
    if fmt == "bf16":
        return to_bf16(x)
    if np.asarray(x).dtype == BF16:  # bf16 storage read in another format: through its f32 values
        x = np.asarray(x, dtype=np.float32)
    if fmt in ("f32", "tf32"):
        return np.asarray(x, dtype=np.float32)
    if fmt == "f16":
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)
    if fmt in BFP_MANTISSA_BITS:
        return quantize_bfp(x, fmt)
    if fmt in INTEGER_FORMATS:
        dtype = INTEGER_FORMATS[fmt]
        info = np.iinfo(dtype)
        values = np.asarray(x)
        if values.dtype.kind in "iub":  # integer results keep their low bits (two's complement)
            return values.astype(dtype)
        values = np.trunc(np.nan_to_num(values, nan=0.0, posinf=info.max, neginf=info.min))
        return np.clip(values, info.min, info.max).astype(dtype)  # floats saturate
    if fmt == "i1":
        return np.asarray(x).astype(bool)
    raise ValueError(f"no data format {fmt!r} on Tensix")


# The multiplier's operand phases (5b x 7b multipliers; ttsim src/tensix.cpp, mvmul): srcA gives its
# hidden bit and 4 mantissa bits, then its next 5 (bits 5..1 of TF32's 10); srcB its hidden bit
# and 6, then its last 4. LoFi multiplies the high parts, HiFi2 adds srcA's low part, HiFi3 srcB's
# low part, HiFi4 both.
SRCA_PHASE_BITS = (4, 5)
SRCB_PHASE_BITS = (6, 4)


def split_operand(x: np.ndarray, bits: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """A value as srcA/srcB hold it -> (high phase part, low phase part) of its mantissa."""
    t = to_tf32(x)
    high = truncate_mantissa(t, bits[0])
    return high, truncate_mantissa(t, bits[0] + bits[1]) - high


# The phases in the order the multiplier runs them, as (srcA part, srcB part), 0 the high part and 1
# the low: a fidelity runs the first FIDELITY_PHASES of them.
PHASES = ((0, 0), (1, 0), (0, 1), (1, 1))


def _phase_terms(src_a: np.ndarray, src_b: np.ndarray, fidelity: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(srcA part, srcB part) products the fidelity's phases add up."""
    a_parts, b_parts = split_operand(src_a, SRCA_PHASE_BITS), split_operand(src_b, SRCB_PHASE_BITS)
    return [(a_parts[i], b_parts[j]) for i, j in PHASES[:FIDELITY_PHASES[fidelity]]]


def fidelity_multiply(a: np.ndarray, b: np.ndarray, fidelity: str) -> np.ndarray:
    """a * b element-wise on the FPU (ELWMUL): a in srcA, b in srcB, the fidelity's phases."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if fidelity == "exact":  # the chip's numerics off (kernels.base.EXACT)
        with np.errstate(all="ignore"):
            return np.multiply(a, b, dtype=np.float32)
    with np.errstate(all="ignore"):
        product = sum(x * y for x, y in _phase_terms(a, b, fidelity)).astype(np.float32)
        return np.where(np.isfinite(a) & np.isfinite(b), product, np.multiply(a, b, dtype=np.float32))


# Matmuls with at most this many products (M x N x K x fidelity phases) are computed bit for bit
# (opbyop.device.mvmul, about 0.5 ns a product: 17 ms at the limit); larger ones by BLAS, an exact
# sum where the engine rounds each product to its group of 8's largest exponent: they differ by about
# 2**-11 of the output's scale (agreement's "rounding"), a price the speed of a large matmul pays.
EXACT_PRODUCTS = 1 << 25
# A convolution's limit (a 1x1 one, a matmul on the chip, included): the engine's own sum up to about
# 2 s of it (resnet50's largest convolutions are about 2**31 products), so that convolutions agree
# with tt-metal's bit for bit; past it, its blocks are summed by BLAS and reloaded as the chip does.
CONV_EXACT_PRODUCTS = 1 << 32


def fidelity_matmul(a: np.ndarray, b: np.ndarray, fidelity: str, fp32_acc: bool, k_tile: int = 32,
                    bit_exact: bool = True, finish: Finish | None = None,
                    out_dtype: np.dtype = np.float32, exact_limit: int = EXACT_PRODUCTS) -> np.ndarray:
    """a @ b as the FPU computes it (MVMUL): in0 `a` sits in srcB and in1 `b` in srcA (the
    unpacker's matmul mapping), partial products per fidelity phase, and the running sum kept in
    f32 (fp32_dest_acc_en) or in bf16. Without fp32_dest_acc_en the unpacker holds f32 operands
    as bf16 (truncated). Up to EXACT_PRODUCTS the result is the matrix engine's, bit for bit.

    Operands may be held in any storage format (a bf16 weight stays bf16). A large call is taken
    block by block: groups of batch elements (broadcast batch dimensions are never copied), rows of
    `a` and columns of `b`, each converted to f32 and split into its phases on its own, and each
    block's result written into the output in place: every output element is the same sum over K as
    in one call, so memory is bounded by a block and the output, not by the operands' f64 copies.
    `finish(block, index)` turns a block of results (f32) into what the output holds at `index` (a
    bias, an activation, the packer's rounding), so that no full-size f32 temporary is made for them;
    `out_dtype` is the output's (bf16 when `finish` packs to bf16). `bit_exact=False` skips the
    bit-exact path (for a caller whose whole computation is above EXACT_PRODUCTS though this part is not);
    `exact_limit` moves the limit (a 1x1 convolution keeps CONV_EXACT_PRODUCTS)."""
    finish = finish or _as_is
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    products = int(np.prod(batch, dtype=np.int64)) * m * n * k
    if fidelity != "exact" and bit_exact and products * FIDELITY_PHASES[fidelity] <= exact_limit:
        storage = "f32" if fp32_acc else "bf16"
        whole = fpu.as_f32(fpu.matmul_bits(np.asarray(a, np.float32), np.asarray(b, np.float32), (storage, storage),
                                           fidelity, fp32_acc))
        return np.asarray(finish(whole, (...,)), out_dtype)
    if a.size <= CHUNK_ELEMENTS and b.size <= CHUNK_ELEMENTS:  # one block: no copy of the output
        return np.asarray(finish(_block_matmul(a, b, fidelity, fp32_acc, k_tile), (...,)), out_dtype)
    out = np.empty(batch + (m, n), out_dtype)
    wide_a, wide_b = np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:])
    for index in _batch_blocks(batch, max(m * k, k * n)):
        part_a, part_b = wide_a[index], wide_b[index]
        elements = int(np.prod(part_a.shape[:-2], dtype=np.int64))
        rows, cols = _block(m, k, elements * m * k), _block(n, k, elements * k * n)
        for i, i_end in _spans(m, rows):
            a_rows = part_a[..., i:i_end, :]
            for j, j_end in _spans(n, cols):
                where = index + (slice(i, i_end), slice(j, j_end))
                out[where] = finish(_block_matmul(a_rows, part_b[..., j:j_end], fidelity, fp32_acc, k_tile), where)
    return out


# What a matmul's caller does to a block of its results before it is stored: (block, its index in the
# output) -> the values the output holds there.
Finish = Callable[[np.ndarray, tuple], np.ndarray]


def _as_is(block: np.ndarray, index: tuple) -> np.ndarray:
    return block


def _block_matmul(a: np.ndarray, b: np.ndarray, fidelity: str, fp32_acc: bool, k_tile: int) -> np.ndarray:
    """One block's products: exact (the chip's numerics off: f32 products summed by BLAS in f64, an
    order a block of the batch does not change) or the FPU's."""
    if fidelity == "exact":
        return np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64)).astype(np.float32)
    return _fidelity_matmul(np.asarray(a, np.float32), np.asarray(b, np.float32), fidelity, fp32_acc, k_tile)


def _batch_blocks(batch: tuple[int, ...], per_element: int) -> list[tuple]:
    """Indices into the batch dimensions, each a group of batch elements whose operands hold at
    most CHUNK_ELEMENTS (at least one element): the leading dimensions one index at a time, the next
    in slices, the rest whole. A batch that fits is one index."""
    inner = per_element
    depth = len(batch)
    while depth > 0 and inner * batch[depth - 1] <= CHUNK_ELEMENTS:  # trailing dimensions taken whole
        depth -= 1
        inner *= batch[depth]
    if depth == 0:
        return [()]
    group = max(1, CHUNK_ELEMENTS // inner)  # elements of dimension depth - 1 per block
    return [lead + (slice(start, min(start + group, batch[depth - 1])),)
            for lead in np.ndindex(*batch[:depth - 1]) for start in range(0, batch[depth - 1], group)]


def _spans(extent: int, step: int) -> list[tuple[int, int]]:
    """[start, end) blocks of `step`; a short last block joins the one before it (fewer BLAS calls)."""
    starts = list(range(0, extent, step))
    if len(starts) > 1 and extent - starts[-1] < step:
        starts.pop()
    return [(start, starts[i + 1] if i + 1 < len(starts) else extent) for i, start in enumerate(starts)]


def _block(extent: int, inner: int, size: int) -> int:
    """How many rows (or columns) of an operand to convert at once: all of them when the operand
    is at most CHUNK_ELEMENTS, else a multiple of a tile's 32 that keeps a block near that size."""
    if size <= CHUNK_ELEMENTS:
        return extent
    batch = max(1, size // max(1, extent * inner))
    return max(32, CHUNK_ELEMENTS // max(1, inner * batch) // 32 * 32)


def _phase_operands(src_a: np.ndarray, src_b: np.ndarray, fidelity: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The fidelity's phase products as the fewest (srcA, srcB) pairs whose products sum to the same.
    An operand's phase parts add up exactly (to the operand truncated to their bits), so the srcB
    parts that meet the same srcA parts share one product of sums: HiFi4's four products are one."""
    phases = PHASES[:FIDELITY_PHASES[fidelity]]
    meets: dict[tuple[int, ...], list[int]] = {}  # the srcA parts a srcB part meets -> those srcB parts
    for j in sorted({j for _, j in phases}):
        meets.setdefault(tuple(i for i, jj in phases if jj == j), []).append(j)
    return [(_parts_sum(src_a, SRCA_PHASE_BITS, a_side), _parts_sum(src_b, SRCB_PHASE_BITS, tuple(b_side)))
            for a_side, b_side in meets.items()]


def _parts_sum(x: np.ndarray, bits: tuple[int, int], parts: tuple[int, ...]) -> np.ndarray:
    """The sum of an operand's phase parts `parts` (split_operand's), made in fewer passes: for finite
    values both parts sum exactly to the operand truncated to both phases' bits, the high part is
    its truncation to the first phase's, the low part the difference; plus 0 as the sum of parts
    starts from 0 (a -0.0 sums to +0.0). An operand with an infinity or a NaN sums the parts
    themselves (inf - inf and NaN payloads): the same bits either way."""
    t = to_tf32(x)
    if not np.isfinite(t).all():
        split = split_operand(t, bits)
        return sum(split[i] for i in parts)
    both = truncate_mantissa(t, bits[0] + bits[1])
    if parts == (0, 1):
        return both + np.float32(0)
    high = truncate_mantissa(t, bits[0])
    return high + np.float32(0) if parts == (0,) else (both - high) + np.float32(0)


def _fidelity_matmul(a: np.ndarray, b: np.ndarray, fidelity: str, fp32_acc: bool, k_tile: int) -> np.ndarray:
    """The phases' products summed by BLAS in f64 and rounded to f32 once. A product has at most 21
    significant bits, so the f64 sums are exact but for extreme ranges of magnitude, and do not
    depend on the order BLAS sums in, which changes with the CPU's kernels and the operands' shapes:
    a block of rows or columns gives the whole call's bits on any machine."""
    if not fp32_acc:  # the unpacker holds f32 operands as bf16 (truncated) without fp32 accumulation
        a, b = truncate_mantissa(a, 7), truncate_mantissa(b, 7)
    # in0 `a` sits in srcB, in1 `b` in srcA
    pairs = [(a_part.astype(np.float64), b_part.astype(np.float64))
             for b_part, a_part in _phase_operands(b, a, fidelity)]
    if fp32_acc:
        return sum(np.matmul(x, y) for x, y in pairs).astype(np.float32)
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], dtype=np.float32) if a.ndim == b.ndim else None
    for start in range(0, a.shape[-1], k_tile):
        part = sum(np.matmul(x[..., start:start + k_tile], y[..., start:start + k_tile, :])
                   for x, y in pairs).astype(np.float32)
        acc = round_bf16(part if acc is None else acc + part)
    return acc
