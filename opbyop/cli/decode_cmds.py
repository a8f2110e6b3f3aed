"""`opbyop decode MODEL --steps N` (also `opbyop run MODEL --decode N`): LLM decode on the simulated device.

Prefill and decode-step programs compiled in a worker's child process, run here through the runtime
API: the key/value cache stays on the device between submits, beside the same loop with every output
brought back to the host and pushed again; per-step figures side by side, tokens against the
framework's own greedy generation.
"""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table

from opbyop.cli.app import MathFidelity, app, console, fail, print_error, status_text, styled
from opbyop.cli.worker_options import (ChipOption, CompilerOption, Fidelity, Fp32Acc, OptLevel, analysis_settings,
                                       cli_worker, plan_for)
from opbyop.boards import DEFAULT_CHIP
from opbyop.device.placement import Policy
from opbyop.errors import OpbyopError
from opbyop.jaxenv import prepare_jax
from opbyop.workspace import Workspace


@app.command()
def decode(model: str = typer.Argument(..., help="a causal LM: gpt2, llama, or package.module:factory"),
           steps: int = typer.Option(16, "--steps", min=1, help="decode steps after prefill"),
           prompt_length: int = typer.Option(8, "--prompt-length", min=1, help="prompt tokens (drawn from --seed)"),
           cache_length: Optional[int] = typer.Option(None, "--cache-length", min=1,
                                                      help="key/value cache positions (default: prompt + steps, "
                                                           "rounded up to a tile)"),
           chip: str = ChipOption, seed: int = typer.Option(0, "--seed", help="the model's weights and the prompt"),
           optimization_level: int = OptLevel, math_fidelity: Optional[MathFidelity] = Fidelity,
           fp32_dest_acc: Optional[bool] = Fp32Acc,
           policy: Policy = typer.Option(Policy.FEWEST_CYCLES, "--policy", help="how op models are chosen"),
           timeout: float = typer.Option(600.0, "--timeout", min=1, help="seconds per program compile"),
           json_out: bool = typer.Option(False, "--json", help="print the report as JSON"),
           compiler: str = CompilerOption) -> None:
    """Prefill, then N decode steps with the key/value cache left on the device, beside a host round trip."""
    run_decode_command([model], steps, prompt_length, cache_length, chip, seed, optimization_level, math_fidelity,
                       fp32_dest_acc, policy, timeout, json_out, compiler)


def run_decode_command(models: list[str], steps: int, prompt_length: int = 8, cache_length: int | None = None,
                       chip: str = DEFAULT_CHIP, seed: int = 0, optimization_level: int = 0,
                       math_fidelity: MathFidelity | None = None, fp32_dest_acc: bool | None = None,
                       policy: Policy = Policy.FEWEST_CYCLES, timeout: float = 600.0, json_out: bool = False,
                       compiler: str = "installed") -> None:
    """Decode each model in turn (one worker compiles them all, with the build `compiler` names); exit 1
    unless every one matched."""
    prepare_jax()  # this process runs the device (jaxlib's MLIR reads the programs); the worker compiles
    from opbyop.decode import DecodeSettings, decode_model, plan_decode  # torch: loaded only when used

    compile_only = analysis_settings(optimization_level, math_fidelity, fp32_dest_acc, False, seed)
    settings = DecodeSettings(steps=steps, prompt_length=prompt_length, cache_length=cache_length, seed=seed,
                              options=compile_only.options, policy=policy)
    workspace = Workspace.default()
    run = plan_for(chip, compiler)
    desc = run.desc
    try:  # every model checked before a compiler starts
        plans = [plan_decode(model, settings) for model in models]
    except OpbyopError as e:
        fail(e)
    all_ok = True
    with cli_worker(workspace, run, "decode") as worker:
        for plan in plans:
            try:
                report = decode_model(plan, lambda graph: worker.analyze_whole(graph, compile_only, timeout),
                                      workspace.artifacts, desc.chip)
            except OpbyopError as e:  # e.g. torch-mlir cannot export it: the other models still run
                print_error(OpbyopError(f"{plan.lm.name}: {e.problem}", e.fix))
                all_ok = False
                continue
            all_ok = all_ok and report.ok
            if json_out:
                typer.echo(report.model_dump_json(indent=1))
            else:
                render(report)
    if not all_ok:
        raise typer.Exit(1)


def render(report) -> None:
    from opbyop.decode import Mode  # torch: loaded only when used

    console.print(styled((report.model, "bold"), f" on {report.chip}: prompt {report.prompt}, {report.steps} decode "
                         f"steps, key/value cache of {report.cache_length} positions"))
    compiles = Table("program", "status", "depth", "TTNN ops", "compile s", "message", title="programs")
    for c in report.compiles:
        compiles.add_row(c.program, status_text(c.status), c.depth.value, str(c.ttnn_ops), f"{c.seconds:.2f}",
                         c.message or "")
    console.print(compiles)
    stitched, round_trip = report.run(Mode.STITCHED), report.run(Mode.ROUND_TRIP)
    if stitched is not None and round_trip is not None:
        console.print(_steps_table(stitched, round_trip))
    if report.runs:
        console.print(_runs_table(report))
    console.print(f"framework (transformers greedy): {report.framework_tokens}")
    if report.torch_tokens != report.framework_tokens:
        console.print(styled(("the exported modules run by torch differ: ", "yellow"), str(report.torch_tokens)))
    for run in report.runs:
        console.print(f"device, {run.mode.value}: {run.tokens}")


def _steps_table(stitched, round_trip) -> Table:
    table = Table("step", "program", "token", "in B", "out B", "to_layout", "peak DRAM", "peak L1/core", "cycles",
                  "in B", "out B", "peak DRAM", "peak L1/core", "cycles",
                  title="per step: stitched (cache stays on the device) | host round trip")
    table.add_row("weights", "", "", f"{stitched.weight_bytes:,}", "", str(stitched.weight_to_layouts), "", "", "",
                  f"{round_trip.weight_bytes:,}", "", "", "", "", end_section=True)
    for s, r in zip(stitched.steps, round_trip.steps):
        token = str(s.token) if s.token == r.token else f"{s.token} | {r.token}"
        table.add_row(str(s.step), s.program, token, f"{s.to_device_bytes:,}", f"{s.to_host_bytes:,}", str(s.to_layouts),
                      f"{s.peak_dram_bytes:,}", f"{s.peak_l1_bytes:,}", f"{s.cycles:,}",
                      f"{r.to_device_bytes:,}", f"{r.to_host_bytes:,}", f"{r.peak_dram_bytes:,}",
                      f"{r.peak_l1_bytes:,}", f"{r.cycles:,}")
    total = lambda run, key: f"{sum(getattr(x, key) for x in run.steps):,}"  # noqa: E731
    table.add_row("total", "", "", total(stitched, "to_device_bytes"), total(stitched, "to_host_bytes"),
                  total(stitched, "to_layouts"), "", "", total(stitched, "cycles"),
                  total(round_trip, "to_device_bytes"), total(round_trip, "to_host_bytes"), "", "",
                  total(round_trip, "cycles"), end_section=True)
    return table


def _runs_table(report) -> Table:
    table = Table("mode", "status", "tokens matched", "weights pushed", "weights pushed again", "activation B",
                  "cache pcc", "cache max err", "leaked B", "seconds", "message", title="runs")
    for run in report.runs:
        table.add_row(run.mode.value, status_text(run.status), f"{run.tokens_matched}/{len(report.framework_tokens)}",
                      f"{run.weight_tensors} ({run.weight_bytes:,} B)", str(run.weight_pushes_repeated),
                      f"{run.activation_bytes:,}", f"{run.cache_pcc:.6f}" if run.cache_pcc is not None else "",
                      f"{run.cache_max_abs_error:.2e}" if run.cache_max_abs_error is not None else "",
                      f"{run.leaked_bytes:,}", f"{run.seconds:.2f}", run.message or "")
    return table
