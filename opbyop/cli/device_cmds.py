"""`opbyop image build|info|run`: the self-describing device image."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import typer

from opbyop.cli.app import app, console, fail, input_specs
from opbyop.cli.worker_options import ChipOption, CompilerOption, cli_worker, compiler_named, plan_for
from opbyop.config import AnalysisSettings, load_thresholds
from opbyop.device.arch import DeviceSpec
from opbyop.device.image import DeviceImage, build_image, inputs_of
from opbyop.errors import ImageError, OpbyopError
from opbyop.graph import ArgumentKind
from opbyop.frontends.loader import load_model
from opbyop.frontends.values import filled
from opbyop.dtypes import numpy_dtype
from opbyop.jaxenv import prepare_jax
from opbyop.records import TensorDesc
from opbyop.workspace import Workspace

image = typer.Typer(help="Device images: one zip that runs a compiled model without compiling.",
                    no_args_is_help=True)
app.add_typer(image, name="image")


@image.command("build")
def build(model: str = typer.Argument(..., help="zoo name, .mlir/.mlirbc file, or package.module:factory"),
          out: Path = typer.Option(..., "-o", "--out", help="image file to write (.zip)"),
          chip: str = ChipOption, seed: int = typer.Option(0),
          input: list[str] = typer.Option([], "--input", help="input spec for a factory, e.g. 1x3x32x32xf32"),
          compiler: str = CompilerOption) -> None:
    """Compile MODEL whole and write its device image."""
    prepare_jax()
    plan = plan_for(chip, compiler)
    try:
        graph = load_model(model, inputs=input_specs(input), seed=seed)
    except OpbyopError as e:
        fail(e)
    if not graph.arguments:
        fail(OpbyopError(f"{model} has no example values for its arguments ({'; '.join(graph.notes) or 'unknown'})",
                         "build the image from a zoo model or a factory, or give @main tensor arguments"))
    workspace = Workspace.default()
    with cli_worker(workspace, plan, "image") as worker:
        result = worker.analyze_whole(graph, AnalysisSettings(thresholds=load_thresholds(), seed=seed))
    if result.compile is None or not result.compile.ok:
        fail(OpbyopError(f"{model} did not compile whole: {result.message}", f"see `opbyop compile {model}`"), code=1)
    artifacts = workspace.artifacts
    program = artifacts.read_text(result.compile.artifacts["ttnn_runtime"])
    flatbuffer = artifacts.read(result.compile.artifacts["flatbuffer"])

    parameters = {i: v for i, (a, v) in enumerate(zip(graph.arguments, filled(graph, seed)))
                  if a.kind is ArgumentKind.PARAMETER}
    outputs = [TensorDesc(shape=tuple(r.shape), dtype=str(r.dtype)) for r in graph.reference_outputs or []]
    try:
        build_image(out, model=graph.name, program_text=program, flatbuffer=flatbuffer,
                    spec=DeviceSpec.from_system_desc(program), inputs=inputs_of(graph.arguments),
                    parameters=parameters, outputs=outputs, compiler=plan.compiler.identity)
    except OpbyopError as e:
        fail(e)
    console.print(f"wrote {out} ({out.stat().st_size:,} bytes); whole-model run: {result.status.value}, pcc {result.pcc}")


ImageCompiler = typer.Option("installed", "--compiler", help="the compiler build the image must come from "
                             "(its flatbuffer is that build's): installed, or the spec `image info` names")


@image.command("info")
def info(path: Path, compiler: str = ImageCompiler) -> None:
    """Print what the image holds: versions, device, input and output shapes."""
    try:
        console.print(DeviceImage.load(path, compiler_named(compiler).identity).info())
    except OpbyopError as e:
        fail(e)


@image.command("run")
def run_image(path: Path, inputs: Optional[Path] = typer.Option(None, "--inputs", help=".npz with one array per input"),
              seed: int = typer.Option(0), iterations: int = typer.Option(1, min=1),
              compiler: str = ImageCompiler) -> None:
    """Run the image on the simulated device (inputs from an .npz, or drawn from a seed)."""
    try:
        loaded = DeviceImage.load(path, compiler_named(compiler).identity)
        if inputs is not None:
            arrays = _read_inputs(inputs)
        else:
            rng = np.random.default_rng(seed)
            arrays = [(rng.standard_normal(t.tensor.shape) if t.tensor.dtype.startswith("f")
                       else rng.integers(0, 2, t.tensor.shape)).astype(numpy_dtype(t.tensor.dtype))
                      for i, t in enumerate(loaded.manifest.inputs) if i not in loaded.constants]
        outputs = loaded.run(arrays, iterations=iterations)
    except OpbyopError as e:
        fail(e)
    except Exception as e:  # the simulator's own failure on this program: named, never a traceback
        fail(OpbyopError(f"the image's program failed on the simulated device: {type(e).__name__}: {e}",
                         "check the inputs against `opbyop image info`; if they fit, rebuild the image"), code=1)
    for i, out in enumerate(outputs):
        console.print(f"output {i}: shape {out.shape}, mean {float(np.mean(out)):.6g}, std {float(np.std(out)):.6g}")


def _read_inputs(path: Path) -> list[np.ndarray]:
    """One array per input from an .npz (never pickles); anything else is refused with its reason."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            if not hasattr(npz, "files"):
                raise ImageError(f"{path} holds one array, not an .npz of inputs",
                                 "save the inputs with numpy.savez(path, input0, input1, ...)")
            return [npz[k] for k in npz.files]
    except ImageError:
        raise
    except (OSError, ValueError, EOFError) as e:
        raise ImageError(f"cannot read inputs from {path}: {type(e).__name__}: {e}",
                         "pass an .npz written by numpy.savez, one array per input") from None
