"""`opbyop models` and `opbyop split`: the zoo, and a model's single ops."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from opbyop.cli.app import app, console, fail, input_specs, styled
from opbyop.config import load_zoo
from opbyop.errors import OpbyopError
from opbyop.frontends.export_cache import ExportCache
from opbyop.frontends.loader import load_model, warm_exports
from opbyop.jaxenv import prepare_jax
from opbyop.pipeline import split_graph


@app.command()
def models() -> None:
    """List the model zoo (configs/models.yaml)."""
    try:
        zoo = load_zoo()
    except OpbyopError as e:
        fail(e)
    table = Table("name", "frontend", "inputs", "tags", "description")
    for m in zoo.models:
        shapes = ", ".join("x".join(map(str, s.shape)) + f" {s.dtype}" for s in m.inputs)
        table.add_row(m.name, m.frontend, shapes, ",".join(m.tags), m.description)
    console.print(table)


@app.command()
def split(model: str = typer.Argument(..., help="zoo name, .mlir/.mlirbc file, or package.module:factory"),
          input: list[str] = typer.Option([], "--input", help="input spec for a factory, e.g. 1x3x32x32xf32"),
          as_json: bool = typer.Option(False, "--json", help="print the op records as JSON"),
          out: Optional[Path] = typer.Option(None, "--out", help="write the op records as JSON lines"),
          seed: int = typer.Option(0)) -> None:
    """Split a model into single-op modules: op table, total and unique counts, ops per kind."""
    exports = ExportCache()
    warm_exports([model], load_zoo(), seed, exports)  # while this process starts JAX
    prepare_jax()

    try:
        graph = load_model(model, inputs=input_specs(input), seed=seed, exports=exports)
        result = split_graph(graph)  # with the framework ops the frontend could not lower
    except OpbyopError as e:
        fail(e)
    if out is not None:
        out.write_text("".join(r.model_dump_json() + "\n" for r in result.ops))
    if as_json:
        sys.stdout.write(json.dumps([r.model_dump(mode="json") for r in result.ops]) + "\n")
        return
    sharded = any(r.mesh for r in result.ops)
    table = Table("#", "op", "inputs", "outputs", "framework op", "module", "source", "signature",
                  *(["in shardings", "out shardings"] if sharded else []), title=graph.name)
    for r in result.ops:
        p = r.provenance
        table.add_row(str(r.position), r.op_name, " ".join(map(str, r.inputs)), " ".join(map(str, r.outputs)),
                      p.framework_op or "", p.module_path or "", f"{Path(p.source.file).name}:{p.source.line}" if p.source else "",
                      r.signature[:12] if r.ok else styled(("split failed: ", "red"), str(r.split_error)),
                      *([Text(_shardings(r.operand_shardings)), Text(_shardings(r.result_shardings))] if sharded else []))
    console.print(table)
    if sharded:
        console.print(f"sharded over a mesh {next(r.mesh for r in result.ops if r.mesh)} (Shardy's propagation applied)")
    kinds = Counter(r.op_name for r in result.ops)
    histogram = Table("op kind", "count")
    for kind, n in kinds.most_common():
        histogram.add_row(kind, str(n))
    console.print(histogram)
    unique = len({r.signature for r in result.ops if r.ok})
    console.print(f"{len(result.ops)} ops, {unique} unique, {len(result.failed)} failed to split; "
                  f"{result.arith_constants_rewritten} arith.constant rewritten, {result.calls_inlined} calls inlined")
    for note in graph.notes:  # what the frontend did to export the model whole (e.g. sizes made static)
        console.print(f"note: {note}")
    unlowered = [r for r in result.ops if r.frontend_error]
    if unlowered:  # recorded as frontend_failed ops; the rest of the model is split and analysed
        console.print(f"{len(unlowered)} framework ops the frontend could not lower, cut out of the graph "
                      f"({', '.join(sorted({r.op_name for r in unlowered}))}): {unlowered[0].frontend_error}")


def _shardings(values: list[str]) -> str:
    """Shardy's per-dimension axes of each value ('[{}, {"x"}]'), '-' for a value without one."""
    return " ".join(v.split(", ", 1)[1].rstrip(">") if ", " in v else "-" for v in values)
