"""The cost model against the hardware: the placement model's matmul and conv throughput next to
Tenstorrent's published numbers, and what t-streaming, the policies and harvesting do.

    .venv/bin/python benchmarks/bench_cost_model.py

Published figures (quoted with their source; the model's constants are cited in
opbyop/device/placement.py and opbyop/device/arch.py):
- peak: docs.tenstorrent.com/aibs/wormhole/specifications.html (n150: 74 TFLOPS FP16, 148
  BLOCKFP8, 262 FP8) and docs.tenstorrent.com/aibs/blackhole/specifications (p150a: 774 BLOCKFP8
  at 140 cores, 1.35 GHz);
- measured matmul, out-of-box configurations, DRAM operands, no trace: tenstorrent/tt-metal
  tech_reports/GEMM_FLOPS/GEMM_FLOPS.md ('N150 Out of Box Results', 'P150 Out of Box Results').
No per-op convolution throughput is published; a convolution is shown beside the matmul of its
im2col shape (the matrix engine does both).
"""

from __future__ import annotations

import time

from common import Figures, console

from opbyop.device.arch import BLACKHOLE_P150, WORMHOLE_N150, DeviceSpec
from opbyop.device.layout import Layout
from opbyop.device.placement import Policy, candidates, nlp_targets, place, work_of
from opbyop.device.program import Op, TensorType

# (chip, dtype, fidelity, M, K, N) -> measured TFLOPS (GEMM_FLOPS.md, out of box, Use Trace = False)
MEASURED = {
    ("n150", "bf16", "hifi2", 1024, 1024, 1024): 29.67, ("n150", "bf16", "hifi2", 2048, 2048, 2048): 56.85,
    ("n150", "bf16", "hifi2", 4096, 4096, 4096): 68.15, ("n150", "bfp_bf8", "lofi", 1024, 1024, 1024): 46.34,
    ("n150", "bfp_bf8", "lofi", 2048, 2048, 2048): 109.27, ("n150", "bfp_bf8", "lofi", 4096, 4096, 4096): 145.91,
    ("n150", "bfp_bf4", "lofi", 4096, 4096, 4096): 183.02,
    ("p150", "bf16", "hifi2", 1280, 3328, 3328): 221.32, ("p150", "bf16", "hifi2", 2560, 4992, 4992): 273.93,
    ("p150", "bf16", "hifi2", 5120, 6656, 6656): 281.62, ("p150", "bfp_bf8", "lofi", 1280, 3328, 3328): 387.76,
    ("p150", "bfp_bf8", "lofi", 2560, 4992, 4992): 515.33, ("p150", "bfp_bf8", "lofi", 5120, 6656, 6656): 553.75,
}
# Peak TFLOPS per the board specifications, by the fidelity they correspond to (FP16 runs HiFi4 on
# n150: 72 cores x 1,024 FLOP/cycle x 1 GHz = 74; BLOCKFP8 HiFi2 = 148; p150a BLOCKFP8 = 774 LoFi).
PEAK = {("n150", "hifi4"): 74.0, ("n150", "hifi2"): 148.0, ("n150", "lofi"): 262.0, ("p150", "lofi"): 774.0}
CHIPS = {"n150": WORMHOLE_N150, "p150": BLACKHOLE_P150}


def _t(shape: tuple[int, ...], dtype: str) -> TensorType:
    return TensorType(shape, dtype, Layout(tiled=True, dtype=dtype))


def matmul(m: int, k: int, n: int, dtype: str, fidelity: str) -> Op:
    return Op("ttnn.matmul", [0, 1], [2], [_t((m, k), dtype), _t((k, n), dtype)], [_t((m, n), dtype)],
              {"compute_config": {"math_fidelity": fidelity, "fp32_dest_acc_en": False}})


def conv(n: int, hw: int, cin: int, cout: int, k: int, dtype: str, fidelity: str) -> Op:
    out = n * hw * hw
    return Op("ttnn.conv2d", [0, 1], [2], [_t((1, 1, out, cin), dtype), _t((cout, cin, k, k), dtype)],
              [_t((1, 1, out, cout), dtype)],
              {"batch_size": n, "input_height": hw, "input_width": hw, "in_channels": cin, "out_channels": cout,
               "kernel_size": [k, k], "stride": [1, 1], "padding": [k // 2, k // 2], "groups": 1,
               "compute_config": {"math_fidelity": fidelity, "fp32_dest_acc_en": False}})


def tflops(flop: float, cycles: int, spec: DeviceSpec) -> float:
    return flop / (cycles / (spec.clock_mhz * 1e6)) / 1e12


def main() -> None:
    figures = Figures("matmul throughput: the model (fewest-cycles placement) next to tt-metal's measurements",
                      ["chip", "dtype", "fidelity", "M x K x N", "model TFLOPS", "measured TFLOPS", "model / measured",
                       "peak (spec)", "grid", "t-stream", "candidates", "legal", "ms to place"])
    for (chip, dtype, fidelity, m, k, n), measured in MEASURED.items():
        spec = CHIPS[chip]
        candidates.cache_clear()
        started = time.perf_counter()
        p = place(matmul(m, k, n, dtype, fidelity), spec)
        elapsed = (time.perf_counter() - started) * 1000
        model = tflops(2.0 * m * k * n, p.cycles, spec)
        figures.add(chip, dtype, fidelity, f"{m}x{k}x{n}", model, measured, model / measured,
                    PEAK.get((chip, fidelity), "-"), f"{p.grid[0]}x{p.grid[1]}", p.t_stream or "-", p.candidates,
                    p.legal, elapsed)
    figures.show()

    convs = Figures("convolution: the model next to the matmul of its im2col shape (no per-op conv figure is published)",
                    ["chip", "layer", "dtype", "fidelity", "model conv TFLOPS", "model im2col matmul TFLOPS", "grid",
                     "t-stream", "cycles"])
    layers = [("resnet50 conv2_x 3x3", 1, 56, 64, 64, 3), ("resnet50 conv3_x 3x3", 1, 28, 128, 128, 3),
              ("resnet50 conv5_x 3x3", 1, 7, 512, 512, 3), ("unet 3x3 b8", 8, 64, 128, 128, 3)]
    for chip in CHIPS:
        spec = CHIPS[chip]
        for name, n, hw, cin, cout, k in layers:
            for dtype, fidelity in (("bf16", "hifi2"), ("bfp_bf8", "lofi")):
                p = place(conv(n, hw, cin, cout, k, dtype, fidelity), spec)
                flop = 2.0 * n * hw * hw * cin * cout * k * k
                im2col = place(matmul(n * hw * hw, cin * k * k, cout, dtype, fidelity), spec)
                convs.add(chip, name, dtype, fidelity, tflops(flop, p.cycles, spec), tflops(flop, im2col.cycles, spec),
                          f"{p.grid[0]}x{p.grid[1]}", p.t_stream or "-", p.cycles)
    convs.show()

    policies = Figures("policies on a matmul -> add -> matmul chain (n150): cores and cycles per op",
                       ["policy", "matmul cores", "matmul cycles", "add cores", "add cycles", "add t-stream"])
    chain = [matmul(1024, 2048, 1024, "bf16", "hifi2"),
             Op("ttnn.add", [0, 1], [2], [_t((256, 1024), "bf16")] * 2, [_t((256, 1024), "bf16")], {}),
             matmul(1024, 2048, 1024, "bf16", "hifi2")]
    targets = nlp_targets(chain, WORMHOLE_N150)
    for policy in Policy:
        placed = [place(op, WORMHOLE_N150, policy, target) for op, target in zip(chain, targets)]
        policies.add(policy.value, placed[0].grid[0] * placed[0].grid[1], placed[0].cycles,
                     placed[1].grid[0] * placed[1].grid[1], placed[1].cycles, placed[1].t_stream or "-")
    policies.show()

    harvest = Figures("harvested rows (n150, 2048^3 bf16 HiFi2 matmul): the grid shrinks, cycles follow",
                      ["harvesting mask", "worker grid", "chosen grid", "candidates", "cycles", "TFLOPS"])
    for mask in (0, 0b1, 0b11, 0b1111):
        spec = WORMHOLE_N150.harvested(mask) if mask else WORMHOLE_N150
        p = place(matmul(2048, 2048, 2048, "bf16", "hifi2"), spec)
        harvest.add(f"{mask:#b}", f"{spec.worker_grid[0]}x{spec.worker_grid[1]}", f"{p.grid[0]}x{p.grid[1]}",
                    p.candidates, p.cycles, tflops(2.0 * 2048 ** 3, p.cycles, spec))
    harvest.show()

    reasons = Figures("why candidates were rejected (n150, 4096^3 bf16 HiFi2 matmul)", ["reason", "candidates"])
    for reason, count in sorted(place(matmul(4096, 4096, 4096, "bf16", "hifi2"), WORMHOLE_N150).rejected.items()):
        reasons.add(reason, count)
    reasons.show()
    unit = work_of(matmul(4096, 4096, 4096, "bf16", "hifi2"))
    console.print(f"one 4096^3 matmul: {len(candidates(unit, WORMHOLE_N150))} op models enumerated on n150")


if __name__ == "__main__":
    main()
