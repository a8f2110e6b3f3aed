"""`opbyop shrink`: where a failing op starts failing, by dimension and element type.

One warm worker analyses the op and its variants (opbyop.shrink) within a time budget. Every
variant analysed is put in the op index, so `opbyop repro <its signature>` replays it. The result is
kept in the workspace (OPBYOP_HOME/shrinks/<signature>.json, the latest shrink of each op), where the
report of a run that holds the op finds it; the analyze flow stores its own shrinks in the store's
`shrinks` table.
"""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table

from opbyop.cli.app import MathFidelity, app, console, positive_seconds, styled
from opbyop.cli.worker_options import (ChipOption, CompilerOption, Fidelity, Fp32Acc, OptLevel, Timeout,
                                       analysis_settings, cli_worker, plan_for, stored_op)
from opbyop.jaxenv import prepare_jax
from opbyop.shrink.result import Outcome, ShrinkResult
from opbyop.shrink.saved import save_shrink
from opbyop.shrink.search import Shrinker

DEFAULT_BUDGET_S = 60.0


@app.command()
def shrink(op: str = typer.Argument(..., help="signature prefix, or model:position, of a stored op"),
           chip: str = ChipOption, seconds: float = typer.Option(DEFAULT_BUDGET_S, "--seconds", callback=positive_seconds,
                                                                  help="time budget for the whole search (above 0)"),
           optimization_level: int = OptLevel, math_fidelity: Optional[MathFidelity] = Fidelity, fp32_dest_acc: Optional[bool] = Fp32Acc,
           run_device: bool = typer.Option(True, "--run/--compile-only"), timeout: float = Timeout,
           compiler: str = CompilerOption) -> None:
    """Halve and grow each dimension, try the chip's other dtypes: the smallest failing and the
    largest passing variant per dimension and dtype, each replayable with `opbyop repro`."""
    prepare_jax()  # variants are parsed and verified here; compiling happens in the worker

    plan = plan_for(chip, compiler)
    workspace, unique = stored_op(op)
    settings = analysis_settings(optimization_level, math_fidelity, fp32_dest_acc, run_device, 0)
    with cli_worker(workspace, plan, "shrink") as worker:
        shrinker = Shrinker(lambda variant: worker.analyze(variant, settings, timeout), workspace.artifacts,
                            workspace.ops.put, budget_s=seconds)
        result = shrinker.shrink(unique)
    saved = save_shrink(workspace.root, result)
    render(result)
    console.print(f"saved: {saved}")


def render(result: ShrinkResult) -> None:
    console.print(styled((result.op_name, "bold"), " ", result.signature))
    for line in result.summary():
        console.print(f"  {line}")
    if result.boundaries:
        table = Table("dtype", "dimension", "as found", "largest passing", "repro", "smallest failing", "repro",
                      title="boundaries (opbyop repro SIGNATURE replays a variant)")
        for b in result.boundaries:
            table.add_row(b.dtype, b.dimension, str(b.size), _size(b.largest_passing),
                          (b.largest_passing_signature or "")[:12], _size(b.smallest_failing),
                          (b.smallest_failing_signature or "")[:12])
        console.print(table)
    if result.dtype_signatures:
        dtypes = Table("dtype", "outcome", "repro", title="the op's shape in each dtype")
        for dtype, outcome in result.dtypes.items():
            dtypes.add_row(dtype, _outcome(outcome), result.dtype_signatures.get(dtype, "")[:12])
        console.print(dtypes)
    console.print(f"{result.analysed} variants analysed, {result.rejected} rejected by the verifier, "
                  f"{result.seconds:.1f} s (budget {result.budget_s:g} s{'' if result.complete else ', reached'})")


def _size(value: int | None) -> str:
    return "-" if value is None else str(value)


def _outcome(outcome: Outcome) -> str:
    return outcome.value
