"""A matmul whose batch holds a mixture of experts' layer (one op, every expert's weights), as
transformers' grouped form exports it: computed group of experts by group, with the whole call's
bits, in memory bounded by a block and the output. Sizes here are small: the blocks are made small
instead (formats.CHUNK_ELEMENTS)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from opbyop.device import formats
from opbyop.device.formats import BF16, _batch_blocks, _fidelity_matmul, fidelity_matmul
from opbyop.device.kernels import KERNELS, Call
from opbyop.device.kernels.base import packed
from opbyop.device.layout import Layout
from opbyop.device.program import Op, TensorType

RNG = np.random.default_rng(5)


def whole(a: np.ndarray, b: np.ndarray, fidelity: str, fp32_acc: bool) -> np.ndarray:
    """The whole call at once, every operand converted in full: the reading blocks must equal."""
    if fidelity == "exact":
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    return _fidelity_matmul(a.astype(np.float32), b.astype(np.float32), fidelity, fp32_acc, 32)


@pytest.mark.parametrize("shape_a, shape_b", [
    ((1, 96, 128), (12, 128, 80)),  # the routed rows once, every expert's weights (broadcast batch)
    ((12, 96, 128), (12, 128, 80)),  # the rows broadcast to every expert beforehand
    ((3, 4, 40, 64), (1, 64, 200)),  # batch dimensions of both operands, the weight wide
])
@pytest.mark.parametrize("fidelity, fp32_acc", [("lofi", True), ("hifi3", True), ("hifi4", True), ("hifi4", False),
                                                 ("exact", True)])
def test_a_grouped_matmul_taken_expert_by_expert_is_bit_for_bit_the_whole_call(monkeypatch, shape_a, shape_b,
                                                                                fidelity, fp32_acc):
    a = RNG.standard_normal(shape_a).astype(BF16)
    b = RNG.standard_normal(shape_b).astype(BF16)
    expected = whole(a, b, fidelity, fp32_acc)
    monkeypatch.setattr(formats, "CHUNK_ELEMENTS", 1 << 13)  # an expert's operands hold about this many
    batch = np.broadcast_shapes(shape_a[:-2], shape_b[:-2])
    assert len(_batch_blocks(batch, max(shape_a[-2] * shape_a[-1], shape_b[-2] * shape_b[-1]))) > 1  # in blocks indeed
    got = fidelity_matmul(a, b, fidelity, fp32_acc, bit_exact=False)
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_batch_blocks_take_leading_dimensions_one_at_a_time_and_the_next_in_slices(monkeypatch):
    monkeypatch.setattr(formats, "CHUNK_ELEMENTS", 1000)
    assert _batch_blocks((4, 6), 10) == [()]  # fits: one block
    assert _batch_blocks((128,), 400) == [(slice(s, min(s + 2, 128)),) for s in range(0, 128, 2)]
    assert _batch_blocks((3, 5, 4), 100) == [(i, slice(j, min(j + 2, 5))) for i in range(3) for j in (0, 2, 4)]
    assert _batch_blocks((3,), 5000) == [(slice(0, 1),), (slice(1, 2),), (slice(2, 3),)]  # an element too big alone


def _matmul_call(a: np.ndarray, b: np.ndarray, out_shape: tuple, storage: str, name: str = "ttnn.matmul",
                 extra: list | None = None, **attrs) -> Call:
    inputs = [a, b, *(extra or [])]
    types = [TensorType(tuple(x.shape), "bf16", Layout(tiled=True, dtype="bf16")) for x in inputs]
    out = TensorType(out_shape, "bf16", Layout(tiled=True, dtype=storage))
    op = Op(name=name, operands=list(range(len(inputs))), results=[len(inputs)], operand_types=types,
            result_types=[out], attrs=attrs)
    return Call(op=op, inputs=inputs, out_types=[out])


@pytest.mark.parametrize("storage", ["bf16", "f32"])
def test_the_matmul_kernel_packs_a_grouped_result_block_by_block_as_it_packed_the_whole(monkeypatch, storage):
    a = RNG.standard_normal((1, 64, 256)).astype(BF16)
    b = RNG.standard_normal((16, 256, 128)).astype(BF16)
    assert 16 * 64 * 128 * 256 * 4 > formats.EXACT_PRODUCTS  # BLAS's path, whose blocks are the question
    call = _matmul_call(a, b, (16, 64, 128), storage)
    expected = packed(call, whole(a, b, "hifi4", True))
    monkeypatch.setattr(formats, "CHUNK_ELEMENTS", 1 << 13)
    got = KERNELS["ttnn.matmul"](call)[0]
    assert got.dtype == (BF16 if storage == "bf16" else np.float32)  # bf16 values held as bf16: half the bytes
    assert np.array_equal(np.asarray(got, np.float32).view(np.uint32), np.asarray(expected, np.float32).view(np.uint32))


def test_a_linear_adds_its_bias_and_activation_to_each_block_as_to_the_whole(monkeypatch):
    a = RNG.standard_normal((6, 64, 256)).astype(BF16)
    b = RNG.standard_normal((6, 256, 128)).astype(BF16)
    bias = RNG.standard_normal((1, 128)).astype(BF16)
    assert 6 * 64 * 128 * 256 * 4 > formats.EXACT_PRODUCTS
    call = _matmul_call(a, b, (6, 64, 128), "bf16", name="ttnn.linear", extra=[bias], activation="relu")
    expected = packed(call, np.maximum(whole(a, b, "hifi4", True) + bias.astype(np.float32), 0))
    monkeypatch.setattr(formats, "CHUNK_ELEMENTS", 1 << 13)
    got = KERNELS["ttnn.linear"](call)[0]
    assert np.array_equal(np.asarray(got, np.float32).view(np.uint32), np.asarray(expected, np.float32).view(np.uint32))


def test_a_grouped_matmuls_memory_is_its_output_and_a_block_not_its_operands_in_f64(monkeypatch):
    """Every expert's f64 operands at once would be 8 bytes an element of both operands; blocked, the
    call holds its output and one group of experts' conversions."""
    experts, rows, depth, width = 64, 128, 256, 192
    a = RNG.standard_normal((1, rows, depth)).astype(BF16)
    b = RNG.standard_normal((experts, depth, width)).astype(BF16)
    monkeypatch.setattr(formats, "CHUNK_ELEMENTS", depth * width)  # one expert's weight a block
    tracemalloc.start()
    try:
        out = fidelity_matmul(a, b, "hifi4", True, out_dtype=BF16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    operands_f64 = 8 * (experts * rows * depth + b.size)
    block = 8 * (rows * depth + depth * width + rows * width)  # one expert's f64 operands and result
    bound = out.nbytes + 8 * block  # whatever the number of experts
    assert out.dtype == BF16 and bound < operands_f64 / 2
    assert peak < bound
