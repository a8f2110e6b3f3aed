"""LLM decode on the simulated device, key/value cache stitched on the device
against the host round trip (the baseline, measured in the same run on the same programs).

    .venv/bin/python benchmarks/bench_decode.py [--models gpt2 llama] [--steps 16] [--cache-length N]

Per step, both runs side by side: bytes host -> device and device -> host (weights once, on their
own row), on-device layout conversions, peak DRAM, peak L1 per core, cycles; then per model the
totals (in/out B: activations only), the steady decode step's cycles, the median wall time of a
decode step in this simulator (ms/step), tokens equal to transformers' greedy generation, and the
final key/value cache against torch's (pcc).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from common import Figures, console

from opbyop.jaxenv import prepare_jax

prepare_jax()

from opbyop.compiler.system_desc import resolve  # noqa: E402
from opbyop.config import AnalysisSettings  # noqa: E402
from opbyop.decode import DecodeSettings, Mode, decode_model, plan_decode  # noqa: E402
from opbyop.worker.process import OpWorker  # noqa: E402
from opbyop.workspace import Workspace  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=["gpt2", "llama"])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--prompt-length", type=int, default=8)
    parser.add_argument("--cache-length", type=int, default=None)
    parser.add_argument("--chip", default="p150")
    args = parser.parse_args()

    desc = resolve(args.chip)
    settings = DecodeSettings(steps=args.steps, prompt_length=args.prompt_length, cache_length=args.cache_length)
    compile_only = AnalysisSettings(run_device=False, run_golden=False)
    workspace = Workspace(Path(tempfile.mkdtemp(prefix="bench-decode-")))
    summary = Figures("per model: stitched against the host round trip (same programs, same run)",
                      ["model", "cache", "mode", "status", "tokens", "weights B", "in B", "out B", "to_layout",
                       "cycles/step", "peak DRAM B", "peak L1 B", "ms/step", "cache pcc"])
    with OpWorker(desc.path, workspace.root, chip=desc.chip, name="bench-decode") as worker:
        for model in args.models:
            report = decode_model(plan_decode(model, settings), lambda g: worker.analyze_whole(g, compile_only, timeout=600),
                                  workspace.artifacts, desc.chip)
            if not report.compiled:
                console.print(f"{model}: did not compile: {[c.message for c in report.compiles]}", markup=False)
                continue
            steps_table(report).show()
            for run in report.runs:
                decode_steps = run.steps[1:] or run.steps
                summary.add(model, report.cache_length, run.mode.value, run.status.value,
                            f"{run.tokens_matched}/{len(report.framework_tokens)}", run.weight_bytes,
                            sum(s.to_device_bytes for s in run.steps), sum(s.to_host_bytes for s in run.steps),
                            sum(s.to_layouts for s in run.steps), decode_steps[-1].cycles,
                            max(s.peak_dram_bytes for s in run.steps), max(s.peak_l1_bytes for s in run.steps),
                            f"{1000 * statistics.median(s.seconds for s in decode_steps):.1f}",
                            f"{run.cache_pcc:.6f}" if run.cache_pcc is not None else "")
            stitched, round_trip = report.run(Mode.STITCHED), report.run(Mode.ROUND_TRIP)
            if stitched and round_trip and stitched.activation_bytes:
                console.print(f"{model}: the host round trip moves {round_trip.activation_bytes:,} activation bytes, "
                              f"stitched {stitched.activation_bytes:,} "
                              f"({round_trip.activation_bytes / stitched.activation_bytes:.1f}x less with the cache "
                              "on the device); weights pushed again: "
                              f"{stitched.weight_pushes_repeated} stitched, {round_trip.weight_pushes_repeated} round trip",
                              markup=False)
    summary.show()


def steps_table(report) -> Figures:
    table = Figures(f"{report.model}: per step, stitched | host round trip (cache {report.cache_length} positions)",
                    ["step", "program", "token", "in B", "out B", "to_layout", "peak DRAM", "peak L1", "cycles",
                     "| in B", "out B", "peak DRAM", "peak L1", "cycles"])
    stitched, round_trip = report.run(Mode.STITCHED), report.run(Mode.ROUND_TRIP)
    table.add("weights", "", "", stitched.weight_bytes, "", stitched.weight_to_layouts, "", "", "",
              round_trip.weight_bytes, "", "", "", "")
    for s, r in zip(stitched.steps, round_trip.steps):
        table.add(s.step, s.program, s.token if s.token == r.token else f"{s.token}|{r.token}", s.to_device_bytes,
                  s.to_host_bytes, s.to_layouts, s.peak_dram_bytes, s.peak_l1_bytes, s.cycles,
                  r.to_device_bytes, r.to_host_bytes, r.peak_dram_bytes, r.peak_l1_bytes, r.cycles)
    return table


if __name__ == "__main__":
    main()
