"""The `opbyop` Typer application and what every command shares (console, errors, input specs)."""

from __future__ import annotations

import typer
from rich.console import Console

from opbyop.errors import OpbyopError

app = typer.Typer(help="Op-by-op bring-up analysis for tt-mlir targets.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
console = Console()


def fail(error: Exception) -> None:
    """Print a user-facing error (problem, then fix) and exit 2."""
    console.print(f"[red]error:[/red] {error}", highlight=False)
    raise typer.Exit(2)


def input_specs(inputs: list[str]) -> list:
    """`1x3x224x224xf32` / `1x32xi64:1000` -> InputSpec (the integer bound after ':')."""
    from opbyop.config import InputSpec

    names = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16", "i64": "int64",
             "i32": "int32", "i1": "bool"}
    specs = []
    for text in inputs:
        body, _, high = text.partition(":")
        *dims, dtype = body.split("x")
        if dtype not in names or not all(d.isdigit() for d in dims):
            raise OpbyopError(f"cannot read input spec '{text}'", "write it like 1x3x224x224xf32 or 1x32xi64:1000")
        specs.append(InputSpec(shape=[int(d) for d in dims], dtype=names[dtype], high=int(high or 2)))
    return specs
