"""Prefill, then N decode steps on one simulated device, through the runtime API only.

The weights are pushed once and feed both programs. In STITCHED mode each program's outputs
(next token, next position, every layer's key/value cache) stay on the device and become the
next step's inputs: `to_layout` only where the output's layout is not the one the next program
expects; `submit` moves L1 tensors the program does not use to DRAM. The host reads only the
chosen token of each step. In ROUND_TRIP mode every output is brought back with `to_host` and
pushed again with `to_device`, as a host-driven loop would. Both are measured the same way, per
step, from the device's transfer counter and memory peaks.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from opbyop.decode.figures import DecodeRun, Mode, StepFigures
from opbyop.device.executor import SimulationError
from opbyop.device.placement import Policy
from opbyop.device.runtime import (Binary, Device, DeviceTensor, deallocate, get_layout, input_shape, run_of, submit,
                                   to_device, to_host, to_layout)
from opbyop.device.transfers import Transfer, digest
from opbyop.records import Stage

PREFILL, DECODE = 0, 1


@dataclass
class DecodePrograms:
    prefill: Binary
    decode: Binary
    inputs: list[str]  # the decode step's own inputs (token, position, caches): every program's outputs
    weight_names: list[str]

    def binary(self, which: int) -> Binary:
        return self.prefill if which == PREFILL else self.decode

    def first_weight(self, which: int) -> int:
        """Index of the first weight among the program's arguments."""
        return 1 if which == PREFILL else len(self.inputs)


@dataclass
class DecodeOutcome:
    run: DecodeRun
    final_cache: list[np.ndarray] = field(default_factory=list)  # read after the last step (not a step's traffic)


class _Weights:
    """The weights on the device, pushed once; a program that wants another layout gets a device-side copy."""

    def __init__(self, device: Device, programs: DecodePrograms, values: Sequence[np.ndarray]):
        self.device, self.programs = device, programs
        first = programs.first_weight(PREFILL)
        self.resident = [to_device(v, device, get_layout(programs.prefill, 0, first + i), name=f"weight {n}",
                                   shape=input_shape(programs.prefill, 0, first + i))
                         for i, (n, v) in enumerate(zip(programs.weight_names, values))]
        self.converted: dict[tuple[int, int], DeviceTensor] = {}

    def for_program(self, which: int) -> list[DeviceTensor]:
        binary, first = self.programs.binary(which), self.programs.first_weight(which)
        out = []
        for i, t in enumerate(self.resident):
            want = get_layout(binary, 0, first + i)
            if t.layout == want:
                out.append(t)
                continue
            if (which, i) not in self.converted:
                self.converted[which, i] = to_layout(t, self.device, want)
            out.append(self.converted[which, i])
        return out

    def release(self) -> None:
        for t in [*self.resident, *self.converted.values()]:
            if not t.deallocated:
                deallocate(t, force=True)


def run_decode(device: Device, programs: DecodePrograms, prompt: np.ndarray, weights: Sequence[np.ndarray],
               steps: int, mode: Mode, policy: Policy = Policy.FEWEST_CYCLES) -> DecodeOutcome:
    """Prefill on `prompt`, then `steps` decode steps; never raises for the device's sake: a failed
    step ends the run with its status and message, the steps before it kept."""
    started = time.perf_counter()
    run = DecodeRun(mode=mode)
    outcome = DecodeOutcome(run)
    live: list[DeviceTensor] = []  # the outputs of the last program, on the device
    held: list[np.ndarray] = []  # ROUND_TRIP: the same, on the host
    weights_on: _Weights | None = None
    with device.transfers.recording() as log:
        try:
            before = device.transfers.totals
            weights_on = _Weights(device, programs, weights)
            pushed = device.transfers.totals - before
            run.weight_tensors, run.weight_bytes = pushed.to_device_tensors, pushed.to_device_bytes
            resident = {PREFILL: weights_on.for_program(PREFILL), DECODE: weights_on.for_program(DECODE)}
            run.weight_to_layouts = len(weights_on.converted)
            for step in range(steps + 1):
                which = PREFILL if step == 0 else DECODE
                figures, live, held = _step(device, programs, which, step, prompt, live, held, resident[which],
                                            mode, policy)
                run.steps.append(figures)
                run.tokens.append(figures.token)
            outcome.final_cache = held[2:] if mode is Mode.ROUND_TRIP else [to_host(t) for t in live[2:]]
        except SimulationError as e:
            run.status, run.failed_stage, run.message = e.status, Stage.DEVICE_RUN, str(e)
        finally:
            for t in live:
                if t.buffer is not None and not t.deallocated:
                    device.release(t)
            if weights_on is not None:
                weights_on.release()
            device.release_constants()
    run.weight_pushes_repeated = repeated_weight_pushes(log, weights)
    run.leaked_bytes = sum(device.memory.dram.used) + sum(device.memory.l1.used)
    run.seconds = time.perf_counter() - started
    return outcome


def _step(device: Device, programs: DecodePrograms, which: int, step: int, prompt: np.ndarray,
          live: list[DeviceTensor], held: list[np.ndarray], weights: list[DeviceTensor], mode: Mode,
          policy: Policy) -> tuple[StepFigures, list[DeviceTensor], list[np.ndarray]]:
    """One program: its inputs onto the device (or converted there), submit, the token read back."""
    started = time.perf_counter()
    binary = programs.binary(which)
    figures = StepFigures(step=step, program="prefill" if which == PREFILL else "decode")
    device.memory.reset_peaks()
    before = device.transfers.totals
    if which == PREFILL:
        inputs = [to_device(prompt, device, get_layout(binary, 0, 0), name="input_ids", shape=input_shape(binary, 0, 0))]
    elif mode is Mode.STITCHED:
        inputs = []
        for i, t in enumerate(live):
            want = get_layout(binary, 0, i)
            if t.layout == want:
                inputs.append(t)
            else:  # device-side conversion: the output's layout is not the one this program takes
                inputs.append(to_layout(t, device, want, retain=False))
                figures.to_layouts += 1
    else:
        inputs = [to_device(h, device, get_layout(binary, 0, i), name=programs.inputs[i], shape=input_shape(binary, 0, i))
                  for i, h in enumerate(held)]
    try:
        outputs = submit(device, binary, 0, inputs + weights, policy)
        run = run_of(outputs[0])  # waits: the program has finished (or raises its failure)
        if mode is Mode.STITCHED:
            token = to_host(outputs[0])  # the only thing the host needs: the chosen token
            held = []
        else:
            held = [to_host(t) for t in outputs]
            token = held[0]
            for t in outputs:
                deallocate(t)
            outputs = []
    finally:  # inputs are this step's to drop (the program has finished or failed with them)
        for t in inputs:
            if not t.deallocated:
                deallocate(t)
    moved = device.transfers.totals - before
    figures.token = int(np.asarray(token).reshape(-1)[0])
    figures.to_device_tensors, figures.to_device_bytes = moved.to_device_tensors, moved.to_device_bytes
    figures.to_host_tensors, figures.to_host_bytes = moved.to_host_tensors, moved.to_host_bytes
    figures.l1_evicted_bytes = moved.l1_evicted_bytes
    figures.peak_dram_bytes = max(run.peak_dram_bytes, device.memory.peak_dram)
    figures.peak_l1_bytes = max(run.peak_l1_bytes, device.memory.peak_l1_per_core)
    figures.cycles = run.cycles
    figures.seconds = time.perf_counter() - started
    return figures, outputs, held


def repeated_weight_pushes(log: list[Transfer], weights: Sequence[np.ndarray]) -> int:
    """to_device transfers carrying a weight's data beyond the one push each weight needs (weights
    with equal data, e.g. every layer norm's initial ones, may each cross once)."""
    needed = Counter(digest(np.asarray(w)) for w in weights)
    pushed = Counter(t.digest for t in log if t.direction == "to_device" and t.digest in needed)
    return sum(max(0, n - needed[d]) for d, n in pushed.items())
