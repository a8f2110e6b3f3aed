"""Every vector-unit (SFPU) function this compiler emits computes, in opbyop's device model, what
tt-metal's kernel computes on ttsim, bit for bit: over every bf16 value (a 16-bit Dst) and over a
dense sample of f32 values (a 32-bit Dst). Each function and data type is one compiled single-op
program run once on ttsim and once on the model (opbyop.device.ttsim.sweep).

These need ttsim and ttnn's interpreter (`make ttsim`); without them they fail with the backend's own
words, never skip. A kernel ttsim has not built before costs a JIT build (seconds) the first time: the
kernels are cached per machine.
"""

from __future__ import annotations

import numpy as np
import pytest
from ttsim_ops import only_op

from opbyop.device.kernels import sfpu
from opbyop.device.program import load_program
from opbyop.device.simulator import DeviceSimulator
from opbyop.device.ttsim.backend import TtsimBackend
from opbyop.device.ttsim.sweep import CASES, agreement, every_bf16, f32_sample, inputs
from opbyop.device import vector_unit as vu
from opbyop.records import TtsimOutcome


@pytest.fixture(scope="module")
def ttsim(workspace_root, tmp_path_factory, ttsim_ready):
    backend = TtsimBackend(workspace_root, tmp_path_factory.mktemp("ttsim-sweep"))
    yield backend
    backend.close()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_model_computes_each_sfpu_function_as_tt_metals_kernel_does_on_ttsim(
        tmp_path, workspace, worker, compile_only, ttsim, case, dtype):
    op = only_op(tmp_path, workspace, case.module(dtype))
    compiled = worker.analyze(op, compile_only, timeout=600).compile
    assert "ttnn_runtime" in compiled.artifacts, compiled.message
    text = workspace.artifacts.read_text(compiled.artifacts["ttnn_runtime"])
    operands = inputs(case, dtype)
    on_ttsim = ttsim.run(load_program(text), operands, timeout=600)
    assert on_ttsim.run.outcome is TtsimOutcome.RAN, on_ttsim.run.message
    simulator = DeviceSimulator()
    model, _ = simulator.run_binary(simulator.load(text), operands)
    equal, ulps = agreement(model[0], on_ttsim.outputs[0], bf16=dtype == "bf16")
    assert equal == model[0].size, f"{case.name} {dtype}: {equal} of {model[0].size} bit-equal, {ulps} ulps apart"


def test_the_sweep_holds_every_bf16_value_and_the_f32_specials():
    bits = np.asarray(every_bf16(), np.float32).reshape(-1).view(np.uint32) >> 16
    assert len(np.unique(bits[(bits & 0x7FFF) <= 0x7F80])) == 65536 - 254  # all but the NaNs, once each
    sample = f32_sample().reshape(-1).view(np.uint32)
    for special in (0, 0x80000000, 0x7F800000, 0xFF800000, 0x00800000, 0x007FFFFF):
        assert special in sample


def test_the_vector_units_multiply_add_keeps_a_sticky_bit_per_operand_not_ieees_single_rounding():
    """fma_model_bh: the product rounded to odd at its 28th bit, then added to a z shifted below it
    with a sticky bit of its own: two stickies carry into the rounding, where IEEE's fma would not."""
    x, y, z = np.float32(1.304), np.float32(-2.9574008), np.float32(0.19762115)
    exact = np.float32(np.float64(x) * np.float64(y) + np.float64(z))
    got = vu.mad(np.array([x]).view(np.uint32), np.array([y]).view(np.uint32), np.array([z]).view(np.uint32))
    assert got.view(np.float32)[0] != exact
    assert got[0] == np.uint32(0xC06A2A44)  # ttsim's fma_model_bh, run on these operands


def test_the_compiled_multiply_add_gives_the_bits_of_its_numpy_statement():
    """vu.mad (numba, lane by lane) against vu.mad_numpy over random bit patterns (NaNs, infinities,
    denormals), normal values, and sums that cancel to the denormal range."""
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2 ** 32, (3, 20000), dtype=np.uint64).astype(np.uint32)
    normal = rng.standard_normal((3, 20000)).astype(np.float32).view(np.uint32)
    x, y = normal[0], normal[1]
    with np.errstate(all="ignore"):
        cancelling = (-(x.view(np.float32) * y.view(np.float32))).view(np.uint32) ^ (normal[2] & np.uint32(3))
    for operands in (bits, normal, (x, y, cancelling), (x, vu.ONE, normal[2])):
        np.testing.assert_array_equal(vu.mad(*operands), vu.mad_numpy(*operands))


def test_a_16_bit_destination_packs_a_nan_as_infinity_and_a_negative_zero_as_zero():
    """The packer from a 16-bit Dst into bf16 (ttsim PACR): NaN becomes the infinity of its sign,
    zero exponents +0; copy_tile's MOVA2D has already made a denormal input +0."""
    x = np.array([np.nan, -np.nan, -0.0, 1e-40, -3.0], np.float32)
    got = sfpu.unary(("abs",), x, "bf16", "bf16").view(np.uint32)
    np.testing.assert_array_equal(got, [0x7F800000, 0xFF800000, 0, 0, 0x40400000])  # SFPABS keeps a NaN's sign
    neg = sfpu.unary(("neg",), x, "bf16", "bf16").view(np.uint32)
    np.testing.assert_array_equal(neg, [0xFF800000, 0x7F800000, 0, 0, 0x40400000])
