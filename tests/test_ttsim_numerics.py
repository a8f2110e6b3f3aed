"""opbyop's device model computes what tt-metal's kernels compute on ttsim, bit for bit: matmuls at
several K, fidelities and accumulations, sums, maxima, bf16 adds.

Each op is compiled, run on the model and on ttsim, and the two outputs compared by the analyzer
(opbyop.device.ttsim.agreement). These need ttsim and ttnn's interpreter (`make ttsim`); without
them they fail with the backend's own words, never skip.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from ttsim_ops import run_on_ttsim

from opbyop.analysis.analyzer import ttsim_host_outputs
from opbyop.config import CompilerOptions
from opbyop.device import fpu, sfpu_reduce
from opbyop.device.kernels import matmul_conv
from opbyop.device.conv_plan import Conv, Sharding, plan
from opbyop.device.kernels.matmul_conv import conv_nhwc
from opbyop.device.simulator import DeviceSimulator
from opbyop.device.ttsim.agreement import agreement, difference, principal_op
from opbyop.pipeline import prepare
from opbyop.records import TtsimOutcome

DATA = Path(__file__).resolve().parent / "data"


def matmul(m: int, k: int, n: int, dtype: str) -> str:
    return f"""func.func @main(%a: tensor<{m}x{k}x{dtype}>, %b: tensor<{k}x{n}x{dtype}>) -> tensor<{m}x{n}x{dtype}> {{
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<{m}x{k}x{dtype}>, tensor<{k}x{n}x{dtype}>) -> tensor<{m}x{n}x{dtype}>
  return %0 : tensor<{m}x{n}x{dtype}>
}}
"""


def reduce(kind: str, dim: int, dtype: str) -> str:
    init = "0.0" if kind == "add" else "0xFF800000" if dtype == "f32" else "0xFF80"
    out = "64" if dim == 1 else "96"
    return f"""func.func @main(%a: tensor<64x96x{dtype}>) -> tensor<{out}x{dtype}> {{
  %init = stablehlo.constant dense<{init}> : tensor<{dtype}>
  %0 = stablehlo.reduce(%a init: %init) applies stablehlo.{kind} across dimensions = [{dim}] : (tensor<64x96x{dtype}>, tensor<{dtype}>) -> tensor<{out}x{dtype}>
  return %0 : tensor<{out}x{dtype}>
}}
"""


def conv(channels: int, size: int, out: int, kernel: int, stride: int, pad: int) -> str:
    """A torch-style NCHW convolution of one f32 image, no bias (a bias is an op of its own)."""
    o = (size + 2 * pad - kernel) // stride + 1
    a, b, r = f"1x{channels}x{size}x{size}xf32", f"{out}x{channels}x{kernel}x{kernel}xf32", f"1x{out}x{o}x{o}xf32"
    return f"""func.func @main(%a: tensor<{a}>, %b: tensor<{b}>) -> tensor<{r}> {{
  %0 = stablehlo.convolution(%a, %b) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {{stride = [{stride}, {stride}], pad = [[{pad}, {pad}], [{pad}, {pad}]]}} {{batch_group_count = 1 : i64, feature_group_count = 1 : i64}} : (tensor<{a}>, tensor<{b}>) -> tensor<{r}>
  return %0 : tensor<{r}>
}}
"""


ADD_BF16 = """func.func @main(%a: tensor<64x96xbf16>, %b: tensor<64x96xbf16>) -> tensor<64x96xbf16> {
  %0 = stablehlo.add %a, %b : tensor<64x96xbf16>
  return %0 : tensor<64x96xbf16>
}
"""



def on_both(tmp_path, workspace, worker, settings, text: str, options: CompilerOptions | None = None):
    """The module's one computing op, analysed on ttsim beside the model: its ttsim run."""
    path = tmp_path / "op.mlir"
    path.write_text(text)
    run = prepare([str(path)], artifacts=workspace.artifacts)
    assert not run.errors
    (op,) = [u for u in run.unique if u.op_name != "stablehlo.constant"]
    device = settings.device.model_copy(update={"backend": "ttsim"})
    on_ttsim = settings.model_copy(update={"device": device, "options": options or CompilerOptions()})
    result = worker.analyze(op, on_ttsim, timeout=600)
    assert result.ttsim is not None and result.ttsim.outcome is TtsimOutcome.RAN, result.ttsim.message
    return result.ttsim


@pytest.mark.slow
@pytest.mark.parametrize("k, dtype, fidelity, fp32_acc", [(352, "f32", "hifi4", True), (64, "f32", "hifi2", False),
                                                         (96, "f32", "lofi", True), (128, "bf16", "hifi4", None),
                                                         (64, "bf16", "hifi3", False)])
def test_matmuls_on_the_model_equal_ttsims_bit_for_bit(tmp_path, workspace, worker, settings, ttsim_ready,
                                                       k, dtype, fidelity, fp32_acc):
    options = CompilerOptions(math_fidelity=fidelity, fp32_dest_acc_en=fp32_acc)
    run = on_both(tmp_path, workspace, worker, settings, matmul(64, k, 64, dtype), options)
    assert run.agreement == "bit_equal", f"{run.agreement}, {run.max_ulps} ulps"


@pytest.mark.slow
@pytest.mark.parametrize("kind, dim, dtype", [("add", 0, "bf16"), ("add", 1, "bf16"), ("maximum", 1, "f32"),
                                              ("maximum", 0, "bf16"), ("add", 0, "f32"), ("add", 1, "f32")])
def test_sums_and_maxima_on_the_model_equal_ttsims(tmp_path, workspace, worker, settings, ttsim_ready, kind, dim, dtype):
    run = on_both(tmp_path, workspace, worker, settings, reduce(kind, dim, dtype))
    assert run.agreement == "bit_equal", f"{run.agreement}, {run.max_ulps} ulps"


@pytest.mark.slow
@pytest.mark.parametrize("channels, size, out, kernel, stride, pad", [
    (16, 32, 32, 3, 1, 1),  # height sharded: one block per kernel row
    (3, 32, 16, 3, 1, 1),  # three channels padded to eight
    (16, 16, 32, 3, 1, 1),  # block sharded: channels in chunks of 8
    (128, 28, 256, 1, 2, 0),  # a 1x1 downsampling conv, block sharded (chunks of 16)
    (32, 8, 64, 1, 1, 0),  # a 1x1 stride-1 conv is a matmul
])
def test_conv2ds_on_the_model_equal_ttsims_bit_for_bit(tmp_path, workspace, worker, settings, ttsim_ready,
                                                        channels, size, out, kernel, stride, pad):
    run = on_both(tmp_path, workspace, worker, settings, conv(channels, size, out, kernel, stride, pad))
    assert run.agreement == "bit_equal", f"{run.agreement}, {run.max_ulps} ulps"


@pytest.mark.slow
@pytest.mark.parametrize("channels, size, out", [
    (128, 28, 128),  # resnet18's layer2 conv: block sharded, chunks of 16
    (64, 56, 64),  # resnet18's layer1 conv: block sharded, chunks of 8
])
def test_resnet_sized_conv2ds_are_bit_equal_with_the_engines_sum_and_differ_with_blas(
        tmp_path, workspace, worker, settings, workspace_root, ttsim_ready, monkeypatch, channels, size, out):
    """resnet18's convolutions (1.5e8 products) are summed as the engine sums them (groups of 8 rounded
    after every MVMUL, compiled), in tt-metal's blocks: ttsim's bit for bit. Summed by BLAS instead
    (as above CONV_EXACT_PRODUCTS), the sum is exact where the engine rounds every product to its
    group's largest exponent, and the TF32 reloads between blocks keep 2**-11 of what differs: why
    the limit is high."""
    compile_only = settings.model_copy(update={"run_device": False, "run_golden": False})
    path = tmp_path / "conv.mlir"
    path.write_text(conv(channels, size, out, 3, 1, 1))
    (op,) = [u for u in prepare([str(path)], artifacts=workspace.artifacts).unique]
    compiled = worker.analyze(op, compile_only, timeout=600).compile
    text = workspace.artifacts.read_text(compiled.artifacts["ttnn_runtime"])
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, channels, size, size)).astype(np.float32),
              rng.standard_normal((out, channels, 3, 3)).astype(np.float32) / 8]
    simulator = DeviceSimulator()
    binary = simulator.load(text)
    on_ttsim = run_on_ttsim(workspace_root, tmp_path, binary.program, inputs).outputs

    def model() -> str:
        outputs, _ = simulator.run_binary(simulator.load(text), inputs)
        return agreement(outputs, ttsim_host_outputs(binary, on_ttsim, outputs))[0]

    assert model() == "bit_equal"
    monkeypatch.setattr(matmul_conv, "CONV_EXACT_PRODUCTS", 0)  # every block by BLAS
    assert model() == "differ"


def test_the_model_shards_and_blocks_convolutions_as_tt_metal_does():
    """tt-metal's own choices (ttnn 0.81.1's conv2d on ttsim's p150, read from its graph capture in
    NO_DISPATCH mode: the Conv2dParallelizationConfig and Conv2dBlockConfig it ran with) for 150
    convolutions of every sharding: the model's plan takes the same sharding, channel chunks and
    block widths."""
    for case in json.loads((DATA / "conv_sharding_tt_metal.json").read_text()):
        size, k, width = case["size"], case["kernel"], 4 if case["dtype"] == "f32" else 2
        conv_ = Conv(case["batch"], size, size, case["cin"], case["cout"], (k, k), (case["stride"],) * 2,
                     (case["pad"],) * 4, (case["dilation"],) * 2, width, width)
        got = plan(conv_)
        assert got.sharding.value == case["sharding"], case
        if got.sharding is not Sharding.HEIGHT:
            assert got.chunks == case["chunks"], case
        tiles = -(-got.chunk * k * (k if got.sharding is Sharding.WIDTH else 1) // 32)
        assert tiles == case["block_tiles"], case


@pytest.mark.parametrize("recording", ["ttsim_conv2d_1x1_bias.npz", "ttsim_conv2d_3x3_bias.npz"])
def test_a_conv2d_bias_is_added_on_the_fpu_as_ttsim_adds_it(recording):
    """Outputs of ttnn 0.81.1's conv2d with a bias on ttsim (f32, HiFi4, fp32 accumulation), recorded:
    a StableHLO convolution never carries its bias, so no single op of a model reaches this path."""
    data = np.load(DATA / recording)
    kernel = data["w"].shape[-1]
    pad = kernel // 2
    got = conv_nhwc(data["x"], data["w"], (1, 1), (1, 1), (pad,) * 4, 1, "hifi4", True, bias=data["b"])
    np.testing.assert_array_equal(got, data["y"])


def test_a_conv2ds_partial_sums_lose_their_low_bits_between_kernel_rows():
    """x = 1: 2**-12 + 1 (kernel row 0) then - 1 (row 1) is 0 on the chip, where one sum would give 2**-12:
    the partial sum 1 + 2**-12 is reloaded through srcA (TF32) before row 1 is added."""
    x = np.ones((1, 3, 3, 16), np.float32)
    w = np.zeros((1, 16, 3, 3), np.float32)
    w[0, 0, 0, 0], w[0, 8, 0, 0], w[0, 8, 1, 0] = 2.0 ** -12, 1.0, -1.0
    assert conv_nhwc(x, w, (1, 1), (1, 1), (0, 0, 0, 0), 1, "exact", True)[0, 0] == np.float32(2.0 ** -12)
    assert conv_nhwc(x, w, (1, 1), (1, 1), (0, 0, 0, 0), 1, "hifi4", True)[0, 0] == 0.0


@pytest.mark.slow
def test_bf16_adds_on_the_model_equal_ttsims_ties_included(tmp_path, workspace, worker, settings, ttsim_ready):
    run = on_both(tmp_path, workspace, worker, settings, ADD_BF16)
    assert run.agreement == "bit_equal", f"{run.agreement}, {run.max_ulps} ulps"


def _ttsim_mvmul(a_values: list[int], b_values: list[int], dst: int, adjust: int, fp32_acc: bool, phase: int) -> int:
    """ttsim's mvmul and fpu_accum_normalize_encode (src/tensix.cpp) for one output, transcribed
    line by line from its C: 19-bit srcA values `a_values`, srcB values `b_values`, 16 lanes."""
    signs, exps, mans = [], [], []
    for a, b in zip(a_values, b_values):
        if (a & 0x3FFFF) < 0x400 or (b & 0x3FFFF) < 0x400:
            signs.append(0), exps.append(max(adjust, 0)), mans.append(0)
            continue
        man_a, man_b = (a & 0x3FF) | 0x400, (b & 0x3FF) | 0x400
        man_a = (man_a >> 1) & 31 if phase & 1 else man_a >> 6
        man_b = (man_b & 15) << 3 if phase & 2 else man_b >> 4
        signs.append((a >> 18) ^ (b >> 18)), exps.append(((a >> 10) & 255) + ((b >> 10) & 255) + adjust)
        mans.append(man_a * man_b)
    sops = []
    for group in range(2):
        lanes = range(8 * group, 8 * group + 8)
        exp = max(exps[i] for i in lanes)
        if exp <= 0:
            sops.append((0, 0, 0))
            continue
        total = 0
        for i in lanes:
            diff = min(exp - exps[i], 30)
            man = ((mans[i] << 1) + (1 << diff)) >> (diff + 1)
            total += -man if signs[i] else man
        sops.append((int(total < 0), exp, abs(total) << 13))
    sign = dst >> 31
    exp_dst = (dst >> 23) & 255
    man = (dst & 0x7FFFFF) | 0x800000 if exp_dst else 0
    exp = max(sops[0][1], sops[1][1], exp_dst)
    if exp <= 0:
        return 0

    def align(m: int, e: int, s: int) -> int:
        diff = exp - e
        return m if diff <= 0 else (m + (1 << (diff - 1)) - s) >> diff if diff < 31 else 0
    man = align(man, exp_dst, 0)
    terms = [(s, align(m, e, s)) for s, e, m in sops]
    if not fp32_acc:
        man = (man + (1 << 12)) & ~0x1FFF
        terms = [(s, (m + (1 << 12) - s) & ~0x1FFF) for s, m in terms]
    total = man + sum(m if s == sign else -m for s, m in terms)
    if total < 0:
        total, sign = -total, sign ^ 1
    if not total:
        return 0
    shift = 24 - total.bit_length()
    exp -= shift
    if not fp32_acc:
        shift -= 16
    total = (total + (1 << (-shift - 1))) >> -shift if shift < 0 else total << shift
    if not fp32_acc:
        total <<= 16
    exp += (total >> 24) & 1
    if exp <= 0:
        return 0
    return (sign << 31) | (255 << 23) if exp >= 255 else (sign << 31) | (exp << 23) | (total & 0x7FFFFF)


@pytest.mark.parametrize("fidelity, fp32_acc, rows, columns", [("hifi4", True, 5, 3), ("hifi2", False, 5, 3),
                                                                ("lofi", True, 3, 5), ("hifi3", True, 3, 5)])
def test_the_compiled_mvmul_sums_as_ttsims_c_does(fidelity, fp32_acc, rows, columns):
    """The model's compiled MVMUL against ttsim's own C transcribed in Python, output by output, on
    operands of mixed magnitudes, signs and zeros (K = 40: three faces, the last padded), its work
    laid along the columns or, where they are fewer, the rows."""
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((rows, 40)) * np.exp2(rng.integers(-6, 6, (rows, 40)))).astype(np.float32)
    b = (rng.standard_normal((40, columns)) * np.exp2(rng.integers(-6, 6, (40, columns)))).astype(np.float32)
    a[rng.random(a.shape) < 0.2], b[rng.random(b.shape) < 0.2] = 0.0, 0.0
    storage = "f32" if fp32_acc else "bf16"
    got = fpu.matmul_bits(a, b, (storage, storage), fidelity, fp32_acc)
    mask = 0xFFFFE000 if fp32_acc else 0xFFFF0000
    as_19_bits = lambda x: (int(np.float32(x).view(np.uint32)) & mask) >> 13  # noqa: E731 (srcA/srcB's value)
    pad = np.zeros(8, np.float32)
    for m in range(rows):
        for n in range(columns):
            column, row = np.concatenate([b[:, n], pad]), np.concatenate([a[m], pad])
            dst = 0
            for tile in range(0, 48, 32):
                for phase in fpu.PHASE_ORDER[fidelity]:
                    for face in range(tile, min(tile + 32, 48), 16):
                        dst = _ttsim_mvmul([as_19_bits(v) for v in column[face:face + 16]],
                                           [as_19_bits(v) for v in row[face:face + 16]], dst,
                                           fpu._phase_adjust(phase), fp32_acc, phase)
            assert got[m, n] == dst, (m, n)


def test_a_bf16_add_halfway_between_two_values_rounds_away_from_zero():
    """1 + 2**-8 lies halfway between bf16's 1 and 1 + 2**-7: nearest-even gives 1, the FPU 1 + 2**-7."""
    a = np.array([1.0, -1.0, 1.0 + 2 ** -7], np.float32)
    b = np.array([2 ** -8, -(2 ** -8), 2 ** -8], np.float32)
    got = fpu.as_f32(fpu.add_bits(a, b, ("bf16", "bf16"), fp32_acc=False))
    np.testing.assert_array_equal(got, [1.0 + 2 ** -7, -(1.0 + 2 ** -7), 1.0 + 2 ** -6])


def test_an_f32_row_sum_adds_in_the_vector_units_order_not_left_to_right():
    """1 + 2**-25 + 2**-25 + 2**-25 is 1 left to right; the SFPU's tree adds the small values first."""
    row = np.zeros((1, 32), np.float32)
    row[0, 0] = 1.0
    row[0, [1, 16, 17]] = 2 ** -25  # lane 0's four values: 1 + (2**-25 + (2**-25 + 2**-25))
    assert np.cumsum(row, dtype=np.float32)[-1] == np.float32(1.0)
    assert sfpu_reduce.reduce_sum(row, (1,))[0, 0] == np.float32(1.0 + 2 ** -23)


def test_the_packer_rounds_f32_to_bf16_half_away_from_zero():
    halfway = np.array([1.0 + 2 ** -8, -(1.0 + 2 ** -8), 1.0 + 2 ** -8 - 2 ** -20], np.float32)
    np.testing.assert_array_equal(fpu.pack(halfway, "bf16"), [1.0 + 2 ** -7, -(1.0 + 2 ** -7), 1.0])


def test_a_conv2d_programs_disagreement_is_put_down_to_the_conv_not_the_data_movement_around_it():
    program = ["ttnn.get_device", "ttnn.to_layout", "ttnn.permute", "ttnn.reshape", "ttnn.conv2d", "ttnn.reshape",
               "ttnn.permute", "ttnn.deallocate"]
    assert principal_op(program) == "ttnn.conv2d"
    assert principal_op(["ttnn.full", "ttnn.reshape", "ttnn.add", "ttnn.sum"]) == "ttnn.sum"
    assert principal_op(["ttnn.to_layout", "ttnn.full"]) == "ttnn.full"
    assert principal_op(["ttnn.deallocate"]) is None


def test_the_agreement_tells_a_near_zero_element_apart_from_another_sign_or_magnitude():
    """1e-9 against -1e-9 beside values of 5 is 1.6e9 ulps apart and 4e-10 of the output's scale: a
    rounding difference; 3 against -3 is another sign, 5.1 against 5 another magnitude."""
    ttsim = np.array([5.0, -3.0, 1e-9], np.float32)
    near_zero = np.array([5.0, -3.0, -1e-9], np.float32)
    assert agreement([near_zero], [ttsim])[0] == "differ" and agreement([near_zero], [ttsim])[1] > 1e9
    error, kind = difference([near_zero], [ttsim])
    assert kind == "rounding" and error == pytest.approx(4e-10, rel=1e-3)
    assert difference([np.array([5.0, 3.0, 1e-9], np.float32)], [ttsim]) == (pytest.approx(1.2), "sign")
    assert difference([np.array([5.1, -3.0, 1e-9], np.float32)], [ttsim]) == (pytest.approx(0.02, rel=1e-5), "magnitude")
    assert difference([ttsim], [ttsim]) == (0.0, None)
    assert difference([np.array([np.nan, -3.0, 1e-9], np.float32)], [ttsim])[1] == "nonfinite"
