"""The vector unit's kernels compiled whole (opbyop.device.kernels.sfpu_lanes) give the bits of
their numpy statement (opbyop.device.kernels.sfpu), which tests/test_ttsim_sfpu.py holds to ttsim:
over every bf16 value and an f32 sample (the sweep's), for every kernel the compiled form covers, in
every data path (f32 or bf16 operands, a 32-bit or 16-bit Dst, f32 or bf16 out). And the compiled
multiply-add vouches for the lanes of ordinary data, so that the statement computes few of them again.

The compiled kernels are built by numba on their first call and cached beside their source: a cold
cache costs about 40 s over all of them once per machine (benchmarks/bench_sfpu_speed.py measures it).
"""

from __future__ import annotations

import numpy as np
import pytest

from opbyop.device import vector_unit as vu
from opbyop.device.kernels import sfpu
from opbyop.device.kernels import sfpu_lanes as lanes
from opbyop.device.ttsim.sweep import f32_sample

RNG = np.random.default_rng(3)
EVERY_BF16 = (np.arange(65536, dtype=np.uint32) << np.uint32(16)).view(np.float32)
VALUES = np.concatenate([EVERY_BF16, f32_sample().reshape(-1)])
ORDINARY = RNG.standard_normal(50000).astype(np.float32)
POSITIVE = (np.abs(ORDINARY) + np.float32(0.1)).astype(np.float32)

UNARY = [("exp",), ("log",), ("sqrt",), ("rsqrt",), ("sigmoid",), ("tanh",), ("pow", 2.0), ("pow", 3.0),
         ("pow", 2.5), ("pow", -0.5), ("pow", -3.0)]
BINARY = list(lanes.BINARY)


def statement_unary(key: tuple, x: np.ndarray, out: str) -> np.ndarray:
    """sfpu.unary's numpy pipeline alone: copy_tile, the kernel, SFPSTORE, the packer (f32 data)."""
    dest = sfpu._through_core(sfpu.make_unary(*key), vu.unpack(x, True, "f32"), True)
    return vu.pack(dest, True, out)


def statement_binary(name: str, a: np.ndarray, b: np.ndarray, sources: tuple[str, str], out: str) -> np.ndarray:
    dest32 = sfpu.dest_is_32bit(*sources)
    kernel = sfpu.BINARY_KERNELS[name]
    dest = vu.store(kernel(vu.unpack(a, dest32, sources[0]), vu.unpack(b, dest32, sources[1]), dest32), dest32)
    return vu.pack(dest, dest32, out)


def as_stored(x: np.ndarray, storage: str) -> np.ndarray:
    return (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32) if storage == "bf16" else x


def multiply_add(x: np.ndarray, y: np.ndarray, z: np.ndarray, exact: bool) -> tuple[np.ndarray, np.ndarray]:
    out, unsafe = np.empty(x.size, np.int32), np.empty(x.size, np.bool_)
    lanes.multiply_add(*(np.ascontiguousarray(v, np.uint32).view(np.int32) for v in (x, y, z)), out, unsafe, exact)
    return out.view(np.uint32), unsafe


def operands(kind: str, n: int) -> np.ndarray:
    """Multiply-add operands: random bit patterns, normal numbers, or mantissas of a few bits (bf16s,
    small integers: products whose low bits are zeros)."""
    if kind == "bits":
        return RNG.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    exponents = RNG.integers(100, 155, n).astype(np.uint32) << np.uint32(23)
    mantissas = RNG.integers(0, 2 ** 23, n).astype(np.uint32)
    if kind == "short":
        mantissas &= np.uint32(0x7FFFFF) << RNG.integers(8, 24, n).astype(np.uint32)
    signs = RNG.integers(0, 2, n).astype(np.uint32) << np.uint32(31)
    return signs | exponents | (mantissas & np.uint32(0x7FFFFF))


@pytest.mark.parametrize("exact", [False, True], ids=["mad", "mad_exact"])
def test_the_compiled_multiply_add_gives_fma_model_bhs_bits_wherever_it_vouches_for_them(exact):
    """Against vector_unit.mad_numpy: random bit patterns (NaNs, infinities, denormals), normal and
    short mantissas, sums that cancel exactly or to their last bits, z near the product."""
    n = 60000
    cases = [tuple(operands(k, n) for k in kinds) for kinds in
             (("bits", "bits", "bits"), ("normal", "normal", "normal"), ("short", "normal", "short"),
              ("short", "short", "normal"))]
    x, y = operands("normal", n), operands("short", n)
    with np.errstate(all="ignore"):
        product = (x.view(np.float32).astype(np.float64) * y.view(np.float32)).astype(np.float32)
    cancelling = (product.view(np.uint32) ^ np.uint32(0x80000000)) ^ RNG.integers(0, 4, n).astype(np.uint32)
    cases += [(x, y, cancelling), (x, y, (product.view(np.uint32) ^ np.uint32(0x80000000)))]
    # a polynomial's step r * f + c: c at least twice the product
    horner = RNG.standard_normal((3, n)).astype(np.float32)
    horner[2] = np.sign(horner[2]) * (2 * np.abs(horner[0] * horner[1]) + np.abs(horner[2]))
    cases.append(tuple(horner.view(np.uint32)))
    vouched = []
    for x, y, z in cases:
        got, unsafe = multiply_add(x, y, z, exact)
        with np.errstate(all="ignore"):
            want = vu.mad_numpy(x, y, z)
        np.testing.assert_array_equal(got[~unsafe], want[~unsafe])
        vouched.append(1 - unsafe.mean())
    assert vouched[-1] > 0.99  # the fast form's proof holds for a polynomial's steps
    if exact:
        assert min(vouched) > 0.99  # only results near the denormals are left to the statement


@pytest.mark.slow
@pytest.mark.parametrize("out", ["f32", "bf16"])
@pytest.mark.parametrize("key", UNARY, ids=[" ".join(map(str, k)) for k in UNARY])
def test_each_compiled_unary_kernel_gives_its_statements_bits(key, out):
    """f32 data (a 32-bit Dst): every bf16 value and the f32 sample, through sfpu.unary (the
    compiled kernel, the lanes it does not vouch for by the statement) against the statement alone."""
    with np.errstate(all="ignore"):
        got = sfpu.unary(key, VALUES, "f32", out)
        want = statement_unary(key, VALUES, out)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    run = sfpu._unary_compiled(key)
    assert run is not None
    data = POSITIVE if key[0] in ("log", "sqrt", "rsqrt", "pow") else ORDINARY
    unsafe = np.empty(data.size, np.bool_)
    run(data.view(np.int32), np.empty(data.size, np.int32), unsafe, True)
    assert unsafe.mean() < 0.01  # ordinary data: the compiled kernel vouches for its lanes


@pytest.mark.slow
@pytest.mark.parametrize("out", ["f32", "bf16"])
@pytest.mark.parametrize("sources", [("f32", "f32"), ("bf16", "bf16"), ("f32", "bf16")], ids=lambda s: "-".join(s))
@pytest.mark.parametrize("name", BINARY)
def test_each_compiled_binary_kernel_gives_its_statements_bits(name, sources, out):
    """Every bf16 value and the f32 sample against the same values shuffled, in each data path."""
    a = as_stored(VALUES, sources[0])
    b = as_stored(VALUES[np.random.default_rng(1).permutation(VALUES.size)], sources[1])
    with np.errstate(all="ignore"):
        got = sfpu.binary(sfpu.BINARY_KERNELS[name], a, b, sources, out)
        want = statement_binary(name, a, b, sources, out)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    x, y = as_stored(POSITIVE if name == "pow" else ORDINARY, sources[0]), as_stored(ORDINARY[::-1].copy(), sources[1])
    unsafe = np.empty(x.size, np.bool_)
    lanes.BINARY[name](x.view(np.int32), y.view(np.int32), np.empty(x.size, np.int32), unsafe,
                       sfpu.dest_is_32bit(*sources), sources[0] == "f32", sources[1] == "f32", out == "f32")
    assert unsafe.mean() < 0.01


def test_an_elementwise_multiply_gives_the_statements_bits_on_every_data_path():
    """The quick one of the above (SFPMUL compiles in a second): bf16 and f32 operands and outputs."""
    for sources in (("f32", "f32"), ("bf16", "bf16")):
        for out in ("f32", "bf16"):
            a, b = as_stored(VALUES, sources[0]), as_stored(VALUES[::-1].copy(), sources[1])
            with np.errstate(all="ignore"):
                got = sfpu.binary(sfpu.BINARY_KERNELS["multiply"], a, b, sources, out)
                want = statement_binary("multiply", a, b, sources, out)
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_16_bit_destination_reads_every_input_from_its_table():
    """bf16 data through a unary kernel: looked up (compiled) in the table of every bf16 input's result."""
    x = as_stored(RNG.standard_normal(10000).astype(np.float32), "bf16")
    got = sfpu.unary(("exp",), x, "bf16", "bf16")
    table = sfpu._bf16_table(("exp",))
    np.testing.assert_array_equal(got.view(np.uint32), table[x.view(np.uint32) >> np.uint32(16)].view(np.uint32))
