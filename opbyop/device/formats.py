"""Tensix data formats, numerically: what a value becomes when the chip stores or multiplies it.

- bf16 (FP16-B): round to nearest even at 7 mantissa bits.
- TF32: srcA/srcB registers hold 10 mantissa bits (truncated), so FPU math never sees full f32.
- Block floating point (bfp8/4/2, B variant: 8-bit shared exponent): blocks of 16 consecutive
  elements of a row share the block's largest exponent; each element keeps a sign and 7/3/1
  magnitude bits, its hidden 1 made explicit and shifted right by its exponent's distance to the
  shared one (truncated), so small values next to a large one lose low bits or flush to zero
  (TT-Buda 'Data Formats' page).
- Math fidelity: the multiplier consumes operand mantissas in phases (srcA 5 high + 6 low bits,
  srcB 7 high + 4 low bits); LoFi multiplies only the high parts, HiFi2 adds srcA's low part,
  HiFi3 srcB's low part, HiFi4 all four partial products (the exact TF32 product).
"""

from __future__ import annotations

import numpy as np

BFP_MANTISSA_BITS = {"bfp_bf8": 7, "bfp_bf4": 3, "bfp_bf2": 1, "bfp_f8": 7, "bfp_f4": 3, "bfp_f2": 1}
BFP_BLOCK = 16
FIDELITY_PHASES = {"lofi": 1, "hifi2": 2, "hifi3": 3, "hifi4": 4}
BYTES_PER_ELEMENT = {"f32": 4.0, "tf32": 4.0, "f16": 2.0, "bf16": 2.0, "si32": 4.0, "u32": 4.0, "u16": 2.0,
                     "u8": 1.0, "bfp_bf8": 1.0 + 1 / 16, "bfp_f8": 1.0 + 1 / 16, "bfp_bf4": 0.5 + 1 / 16,
                     "bfp_f4": 0.5 + 1 / 16, "bfp_bf2": 0.25 + 1 / 16, "bfp_f2": 0.25 + 1 / 16, "i1": 1.0}
INTEGER_FORMATS = {"si32": np.int32, "u32": np.uint32, "u16": np.uint16, "u8": np.uint8}


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


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
    """Round-trip through a block floating point format; blocks run along the last dimension."""
    bits = BFP_MANTISSA_BITS[fmt]
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 0:
        x = x.reshape(1)
    shape = x.shape
    width = shape[-1]
    padded_width = -(-width // BFP_BLOCK) * BFP_BLOCK
    flat = np.zeros(shape[:-1] + (padded_width,), dtype=np.float32)
    flat[..., :width] = x
    blocks = flat.reshape(-1, BFP_BLOCK)
    finite = np.where(np.isfinite(blocks), blocks, 0.0)
    _, exponents = np.frexp(finite)  # |v| = m * 2**e with m in [0.5, 1)
    shared = exponents.max(axis=1, keepdims=True)
    # `bits` magnitude bits per element, the hidden 1 among them: |v| < 2**shared in steps of
    # 2**(shared - bits)
    step = np.ldexp(np.float32(1.0), (shared - bits).astype(np.int32))
    limit = np.ldexp(np.float32(1.0), shared.astype(np.int32)) - step
    quantized = np.clip(np.trunc(finite / step) * step, -limit, limit)
    quantized = np.where(np.isfinite(blocks), quantized, blocks)
    return quantized.reshape(flat.shape)[..., :width].reshape(shape).astype(np.float32)


def store(x: np.ndarray, fmt: str) -> np.ndarray:
    """The values a tensor holds once stored in format `fmt`."""
    if fmt in ("f32", "tf32"):
        return np.asarray(x, dtype=np.float32)
    if fmt == "bf16":
        return round_bf16(np.asarray(x, dtype=np.float32))
    if fmt == "f16":
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)
    if fmt in BFP_MANTISSA_BITS:
        return quantize_bfp(x, fmt)
    if fmt in INTEGER_FORMATS:
        dtype = INTEGER_FORMATS[fmt]
        info = np.iinfo(dtype)
        values = np.asarray(x)
        if values.dtype.kind == "f":
            values = np.trunc(np.nan_to_num(values, nan=0.0, posinf=info.max, neginf=info.min))
        return np.clip(values, info.min, info.max).astype(dtype)
    if fmt == "i1":
        return np.asarray(x).astype(bool)
    raise ValueError(f"no data format {fmt!r} on Tensix")


def split_operand(x: np.ndarray, high_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """TF32 value -> (high part with `high_bits` mantissa bits incl. hidden, remainder)."""
    t = to_tf32(x)
    high = truncate_mantissa(t, high_bits - 1)
    return high, t - high


def fidelity_matmul(a: np.ndarray, b: np.ndarray, fidelity: str, fp32_acc: bool, k_tile: int = 32) -> np.ndarray:
    """a @ b as the FPU computes it: TF32 operands, partial products per fidelity phase, and the
    running sum kept in f32 (fp32_dest_acc_en) or rounded to bf16 after every K tile."""
    a_hi, a_lo = split_operand(a, 5)
    b_hi, b_lo = split_operand(b, 7)
    phases = FIDELITY_PHASES[fidelity]
    terms = [(a_hi, b_hi), (a_lo, b_hi), (a_hi, b_lo), (a_lo, b_lo)][:phases]
    k = a.shape[-1]
    if fp32_acc:
        return sum(np.matmul(x, y, dtype=np.float32) for x, y in terms).astype(np.float32)
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], dtype=np.float32) if a.ndim == b.ndim else None
    for start in range(0, k, k_tile):
        part = sum(np.matmul(x[..., start:start + k_tile], y[..., start:start + k_tile, :], dtype=np.float32)
                   for x, y in terms)
        acc = round_bf16(part if acc is None else acc + part)
    return acc
