"""Convolutions as tt-metal's conv2d computes them: each case compiled by tt-mlir, run on opbyop's
device model and on ttsim (tt-metal's kernels on Tenstorrent's simulator), element by element.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_conv_numerics.py [--cases NAME ...] [--exact-limit N]

Each case is one StableHLO convolution (a bias added after it, where the case has one, compiles to
the conv2d's own bias), NCHW, with random inputs; the options are tt-mlir's (math fidelity, fp32
accumulation). Printed per case: the sharding the model plans (opbyop.device.conv_plan), the
agreement with ttsim (opbyop.device.ttsim.agreement: bit-equal, ulps, the largest difference against
the output's scale and its kind), how many elements differ, and the model's and ttsim's seconds.
`--exact-limit N` sums convolutions above N products by BLAS (CONV_EXACT_PRODUCTS is the model's),
to see what the engine's own sum buys. Requires `make ttsim`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np
from common import Figures

from opbyop.jaxenv import prepare_jax

prepare_jax()

from opbyop.analysis.analyzer import ttsim_host_outputs  # noqa: E402
from opbyop.compiler.system_desc import resolve  # noqa: E402
from opbyop.config import AnalysisSettings, CompilerOptions, load_thresholds  # noqa: E402
from opbyop.device.conv_plan import Conv, plan  # noqa: E402
from opbyop.device.kernels import matmul_conv  # noqa: E402
from opbyop.device.simulator import DeviceSimulator  # noqa: E402
from opbyop.device.ttsim.agreement import agreement, difference  # noqa: E402
from opbyop.device.ttsim.backend import TtsimBackend  # noqa: E402
from opbyop.pipeline import prepare  # noqa: E402
from opbyop.workspace import Workspace  # noqa: E402
from opbyop.worker.process import OpWorker  # noqa: E402


@dataclass(frozen=True)
class Case:
    name: str
    channels: int = 16
    size: int = 16
    out: int = 32
    kernel: int = 3
    stride: int = 1
    pad: int = 1
    dilation: int = 1
    groups: int = 1
    batch: int = 1
    dtype: str = "f32"
    bias: bool = False
    options: dict = field(default_factory=dict)

    @property
    def out_size(self) -> int:
        return (self.size + 2 * self.pad - self.dilation * (self.kernel - 1) - 1) // self.stride + 1

    def module(self) -> str:
        a = f"{self.batch}x{self.channels}x{self.size}x{self.size}x{self.dtype}"
        w = f"{self.out}x{self.channels // self.groups}x{self.kernel}x{self.kernel}x{self.dtype}"
        r = f"{self.batch}x{self.out}x{self.out_size}x{self.out_size}x{self.dtype}"
        conv = (f"stablehlo.convolution(%a, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = "
                f"{{stride = [{self.stride}, {self.stride}], pad = [[{self.pad}, {self.pad}], [{self.pad}, {self.pad}]], "
                f"rhs_dilate = [{self.dilation}, {self.dilation}]}} {{batch_group_count = 1 : i64, "
                f"feature_group_count = {self.groups} : i64}} : (tensor<{a}>, tensor<{w}>) -> tensor<{r}>")
        if not self.bias:
            return (f"func.func @main(%a: tensor<{a}>, %w: tensor<{w}>) -> tensor<{r}> {{\n  %0 = {conv}\n"
                    f"  return %0 : tensor<{r}>\n}}\n")
        return (f"func.func @main(%a: tensor<{a}>, %w: tensor<{w}>, %b: tensor<{self.out}x{self.dtype}>) -> tensor<{r}> {{\n"
                f"  %0 = {conv}\n  %1 = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<{self.out}x{self.dtype}>) -> "
                f"tensor<{r}>\n  %2 = stablehlo.add %0, %1 : tensor<{r}>\n  return %2 : tensor<{r}>\n}}\n")

    def inputs(self) -> list[np.ndarray]:
        rng = np.random.default_rng(0)
        fan_in = self.channels // self.groups * self.kernel * self.kernel
        values = [rng.standard_normal((self.batch, self.channels, self.size, self.size)),
                  rng.standard_normal((self.out, self.channels // self.groups, self.kernel, self.kernel)) / np.sqrt(fan_in)]
        if self.bias:
            values.append(rng.standard_normal(self.out))
        dtype = ml_dtypes.bfloat16 if self.dtype == "bf16" else np.float32
        return [v.astype(np.float32).astype(dtype) for v in values]

    def conv(self) -> Conv:
        width = 4 if self.dtype == "f32" else 2
        return Conv(self.batch, self.size, self.size, self.channels, self.out, (self.kernel,) * 2, (self.stride,) * 2,
                    (self.pad,) * 4, (self.dilation,) * 2, width, width)


CASES = [
    Case("3x3, 16 to 32 channels"), Case("3x3 with bias", bias=True), Case("bf16", dtype="bf16"),
    Case("bf16 with bias", dtype="bf16", bias=True), Case("bf16, bf16 accumulation", dtype="bf16",
                                                          options={"fp32_dest_acc_en": False}),
    Case("f32, bf16 accumulation", options={"fp32_dest_acc_en": False}),
    Case("f32, bf16 accumulation, bias", bias=True, options={"fp32_dest_acc_en": False}),
    Case("LoFi", options={"math_fidelity": "lofi"}), Case("stride 2", stride=2), Case("dilation 2", dilation=2, pad=2),
    Case("batch 2", batch=2), Case("4 groups", groups=4), Case("depthwise", channels=32, out=32, groups=32),
    Case("depthwise, bf16 accumulation", channels=32, out=32, groups=32, options={"fp32_dest_acc_en": False}),
    Case("depthwise bf16", channels=32, out=32, groups=32, dtype="bf16"),
    Case("depthwise 96 channels, 28x28", channels=96, out=96, size=28, groups=96),
    Case("2 groups bf16, bf16 accumulation", channels=64, out=64, groups=2, dtype="bf16",
         options={"fp32_dest_acc_en": False}),
    Case("1x1 stride 1 (a matmul), 4 groups", channels=32, size=8, out=64, kernel=1, pad=0, groups=4),
    Case("7x7 stride 2, 3 channels", channels=3, size=32, out=64, kernel=7, stride=2, pad=3),
    Case("width sharded 128 channels, 4x4", channels=128, size=4, out=192),
    Case("256 channels, 7x7 (block sharded: the padding's halo rows)", channels=256, size=7, out=64),
    Case("width sharded 256 channels, 7x7, unpadded", channels=256, size=7, out=64, pad=0),
    Case("width sharded 1x1 stride 2", channels=384, size=7, out=32, kernel=1, stride=2, pad=0),
    Case("block sharded 160 channels, bias", channels=160, size=8, out=128, bias=True),
    Case("resnet18 layer1 (64 channels, 56x56)", channels=64, size=56, out=64),
    Case("resnet18 layer2 (128 channels, 28x28)", channels=128, size=28, out=128),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="*", help="names of the cases to run (default: all)")
    parser.add_argument("--exact-limit", type=int, default=None, help="products above which a conv is summed by BLAS")
    args = parser.parse_args()
    if args.exact_limit is not None:
        matmul_conv.CONV_EXACT_PRODUCTS = args.exact_limit
    cases = [c for c in CASES if not args.cases or c.name in args.cases]
    home = Path(tempfile.mkdtemp(prefix="bench-conv-"))
    workspace, simulator = Workspace(home), DeviceSimulator()
    settings = AnalysisSettings(thresholds=load_thresholds()).model_copy(update={"run_device": False, "run_golden": False})
    backend = TtsimBackend(home, home / "scratch")
    figures = Figures("convolutions on the device model against ttsim (p150)",
                      ["case", "plan", "agreement", "max ulps", "max difference / scale", "kind", "elements apart",
                       "model s", "ttsim s"])
    desc = resolve("p150")
    try:
        with OpWorker(desc.path, home, chip="p150", name="bench-conv") as worker:
            for case in cases:
                path = home / "conv.mlir"
                path.write_text(case.module())
                run = prepare([str(path)], artifacts=workspace.artifacts)
                (op,) = [u for u in run.unique if u.op_name == "stablehlo.convolution"]
                if case.bias:  # the whole module: the compiler folds the add into the conv2d's bias
                    op = op.model_copy(update={"module_text": case.module(), "signature": op.signature + "-bias"})
                compiled = worker.analyze(op, settings.model_copy(update={"options": CompilerOptions(**case.options)}),
                                          timeout=600).compile
                binary = simulator.load(workspace.artifacts.read_text(compiled.artifacts["ttnn_runtime"]))
                inputs = case.inputs()
                started = time.perf_counter()
                outputs, _ = simulator.run_binary(binary, inputs)
                model_s = time.perf_counter() - started
                on_ttsim = backend.run(binary.program, inputs, timeout=900)
                if not on_ttsim.outputs:
                    figures.add(case.name, "-", f"ttsim: {on_ttsim.run.outcome.value}", "-", "-", "-", "-", model_s, "-")
                    continue
                converted = ttsim_host_outputs(binary, on_ttsim.outputs, outputs)
                agreed, ulps = agreement(outputs, converted)
                error, kind = difference(outputs, converted)
                apart = int(np.sum(np.asarray(outputs[0], np.float32) != np.asarray(converted[0], np.float32)))
                chosen = plan(case.conv())
                shown = "matmul" if case.conv().is_matmul else f"{chosen.sharding.value}, {chosen.chunks} x {chosen.chunk} channels"
                figures.add(case.name, shown, agreed,
                            ulps if ulps is not None else "-", error if error is not None else "-", kind or "-",
                            f"{apart} of {np.asarray(outputs[0]).size}", model_s, on_ttsim.run.seconds)
    finally:
        backend.close()
    figures.show()


if __name__ == "__main__":
    main()
