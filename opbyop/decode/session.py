"""One model's decode on the simulated device, both ways, against the framework's own generation.

The compiler stays in a worker's child process (the caller passes `compile_program`, e.g. an
OpWorker compiling a whole module with the device run off); the device runs here, in this process,
through the runtime API.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
from pydantic import BaseModel, Field

from opbyop.artifacts import ArtifactStore
from opbyop.config import CompilerOptions
from opbyop.decode.figures import DecodeReport, DecodeRun, Mode, ProgramCompile
from opbyop.decode.lm import CausalLM, export_programs, framework_greedy, load_causal_lm, torch_decode
from opbyop.decode.loop import DecodePrograms, run_decode
from opbyop.device.placement import Policy
from opbyop.device.runtime import Binary, close_device, open_device
from opbyop.errors import OpbyopError
from opbyop.graph import ModelGraph
from opbyop.golden.compare import pcc
from opbyop.records import Stage, Status, WholeModelResult

CompileFn = Callable[[ModelGraph], WholeModelResult]
TILE = 32


class DecodeSettings(BaseModel):
    steps: int = Field(16, ge=1, description="decode steps after prefill (steps + 1 tokens)")
    prompt_length: int = Field(8, ge=1)
    cache_length: int | None = Field(None, ge=1, description="key/value cache length; default: prompt + steps, "
                                                             "rounded up to whole tiles")
    seed: int = 0  # the model's weights and the prompt
    options: CompilerOptions = Field(default_factory=CompilerOptions)
    policy: Policy = Policy.FEWEST_CYCLES


def cache_length(lm: CausalLM, settings: DecodeSettings) -> int:
    """The static cache length; an OpbyopError when the prompt and steps do not fit it or the model."""
    needed = settings.prompt_length + settings.steps
    length = settings.cache_length or min(-(-needed // TILE) * TILE, max(needed, lm.max_positions))
    if needed > length:
        raise OpbyopError(f"a prompt of {settings.prompt_length} and {settings.steps} decode steps need a cache of "
                          f"{needed} positions; --cache-length is {length}",
                          f"give --cache-length {needed} or more, or fewer --steps")
    if length > lm.max_positions:
        raise OpbyopError(f"{lm.name} has {lm.max_positions} positions; a cache of {length} does not fit them",
                          f"keep prompt length + steps (and --cache-length) at most {lm.max_positions}")
    return length


def prompt_for(lm: CausalLM, settings: DecodeSettings) -> np.ndarray:
    return np.random.default_rng(settings.seed).integers(0, lm.vocab, size=(1, settings.prompt_length), dtype=np.int64)


@dataclass
class DecodePlan:
    """A model checked for decoding: the causal LM, its cache length and prompt."""

    lm: CausalLM
    settings: DecodeSettings
    cache_length: int
    prompt: np.ndarray


def plan_decode(spec: str, settings: DecodeSettings) -> DecodePlan:
    """The model and what its decode needs; OpbyopError for bad input, before anything is exported."""
    lm = load_causal_lm(spec, settings.seed)
    return DecodePlan(lm, settings, cache_length(lm, settings), prompt_for(lm, settings))


def decode_model(plan: DecodePlan, compile_program: CompileFn, artifacts: ArtifactStore, chip: str) -> DecodeReport:
    """Export, compile (through `compile_program`), then run the decode stitched and with the host round
    trip. A program that fails to compile or run is reported (status, message), never raised."""
    lm, settings, length, prompt = plan.lm, plan.settings, plan.cache_length, plan.prompt
    started = time.perf_counter()
    graphs = export_programs(lm, prompt, length)
    export_seconds = time.perf_counter() - started
    reference = torch_decode(lm, prompt, settings.steps, length)
    report = DecodeReport(model=lm.name, chip=chip, prompt=[int(t) for t in prompt[0]], steps=settings.steps,
                          cache_length=length, framework_tokens=framework_greedy(lm, prompt, settings.steps + 1),
                          torch_tokens=reference.tokens, export_seconds=export_seconds)
    binaries = []
    for name, graph in (("prefill", graphs.prefill), ("decode", graphs.decode)):
        compiled, binary = _compile(name, graph, compile_program, artifacts)
        report.compiles.append(compiled)
        binaries.append(binary)
    if not report.compiled:
        return report
    programs = DecodePrograms(binaries[0], binaries[1], graphs.inputs, graphs.weights)
    weights = graphs.weight_values()
    for mode in (Mode.STITCHED, Mode.ROUND_TRIP):
        device = open_device(programs.prefill.program.spec)
        try:
            outcome = run_decode(device, programs, prompt, weights, settings.steps, mode, settings.policy)
        finally:
            close_device(device)
        _judge(outcome.run, outcome.final_cache, reference.final_cache, report.framework_tokens)
        report.runs.append(outcome.run)
    return report


def _compile(name: str, graph: ModelGraph, compile_program: CompileFn,
             artifacts: ArtifactStore) -> tuple[ProgramCompile, Binary | None]:
    result = compile_program(graph)
    outcome = result.compile
    if outcome is None or not outcome.ok or "ttnn_runtime" not in outcome.artifacts:
        status = result.status if result.status is not Status.SKIPPED else Status.COMPILE_FAILED
        return ProgramCompile(program=name, status=status, depth=result.depth, failed_stage=result.failed_stage,
                              message=result.message, seconds=outcome.seconds if outcome else 0.0), None
    binary = Binary.load(artifacts.read_text(outcome.artifacts["ttnn_runtime"]))
    ops = [op for op in binary.function(0).ops if op.name != "ttnn.deallocate"]
    return ProgramCompile(program=name, status=Status.SUCCESS, depth=Stage.FLATBUFFER, seconds=outcome.seconds,
                          ttnn_ops=len(ops)), binary


def _judge(run: DecodeRun, cache: list[np.ndarray], expected: list[np.ndarray], framework: list[int]) -> None:
    """Tokens against the framework's generation; the final cache against torch's."""
    run.tokens_matched = next((i for i, (a, b) in enumerate(zip(run.tokens, framework)) if a != b),
                              min(len(run.tokens), len(framework)))
    if cache and len(cache) == len(expected):
        actual = np.concatenate([np.asarray(c, np.float64).reshape(-1) for c in cache])
        wanted = np.concatenate([np.asarray(e, np.float64).reshape(-1) for e in expected])
        run.cache_pcc = pcc(actual, wanted)
        run.cache_max_abs_error = float(np.max(np.abs(actual - wanted)))
    if run.status is Status.SUCCESS and run.tokens != framework:
        run.status, run.failed_stage = Status.GOLDEN_FAILED, Stage.GOLDEN
        run.message = (f"token {run.tokens_matched} differs from the framework's greedy generation: "
                       f"{run.tokens[run.tokens_matched]} instead of {framework[run.tokens_matched]}")
