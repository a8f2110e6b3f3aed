"""A whole model on the device through the runtime API: weights pushed once, activations stay.

The first iteration pays for pushing the weights and for the compiler's const-eval functions
(weight preparation); later iterations reuse both, only inputs move.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from opbyop.boards import Topology
from opbyop.device.executor import SimulationError
from opbyop.device.mesh import Mesh
from opbyop.device.mesh_runtime import run_stitched_mesh
from opbyop.device.runtime import (Binary, Device, deallocate, get_layout, input_shape, run_of, submit, to_device,
                                   to_host)
from opbyop.device.stitched_run import StitchedRun
from opbyop.device.transfers import TransferTotals
from opbyop.records import DeviceRun


def run_stitched(device: Device, binary: Binary, values: Sequence[np.ndarray], parameters: Sequence[int],
                 iterations: int = 2, stablehlo: str | None = None, observer: Callable | None = None,
                 topology: Topology | None = None) -> StitchedRun:
    """Run program 0 `iterations` times; arguments listed in `parameters` are pushed once. A program
    compiled for a mesh runs on a mesh of `device`'s chips linked as `topology` says (the target
    board's), split as `stablehlo`'s shardings say.
    `observer` sees each op's outputs of the first iteration (opbyop.analysis.accuracy_trace); on a mesh each
    chip's, with the chip's index as a third argument."""
    if (shape := binary.program.mesh_shape) != (1, 1):
        mesh = Mesh(device.spec, shape, topology)
        try:
            return run_stitched_mesh(mesh, binary, values, parameters, iterations, stablehlo, observer=observer)
        finally:
            mesh.close()
    started = time.perf_counter()
    expected = len(binary.function(0).arguments)
    if expected != len(values):
        raise SimulationError(f"the compiled program takes {expected} arguments, the model has {len(values)}")
    before = device.transfers.totals
    resident = {i: to_device(values[i], device, get_layout(binary, 0, i), name=f"weight {i}",
                             shape=input_shape(binary, 0, i)) for i in parameters}
    pushed = sum(t.buffer.nbytes for t in resident.values() if t.buffer is not None)
    weight_transfers = device.transfers.totals - before
    iteration_transfers: list[TransferTotals] = []
    runs: list[DeviceRun] = []
    outputs: list = []
    inputs: dict = {}
    try:
        for iteration in range(max(1, iterations)):
            before = device.transfers.totals
            for t in outputs:
                deallocate(t)
            inputs = {i: to_device(v, device, get_layout(binary, 0, i), name=f"input {i}", shape=input_shape(binary, 0, i))
                      for i, v in enumerate(values) if i not in resident}
            outputs = submit(device, binary, 0, [resident.get(i) or inputs[i] for i in range(len(values))],
                             observer=observer if iteration == 0 else None)
            runs.append(run_of(outputs[0]) if outputs else DeviceRun())
            for t in inputs.values():
                deallocate(t)
            inputs = {}
            iteration_transfers.append(device.transfers.totals - before)
        before = device.transfers.totals
        host = [to_host(t) for t in outputs]
        iteration_transfers[-1] = iteration_transfers[-1] + (device.transfers.totals - before)
    finally:  # also after a failed program: release, never wait on it again
        for t in [*outputs, *inputs.values(), *resident.values()]:
            if t.buffer is not None and not t.deallocated:
                device.release(t)
    return StitchedRun(outputs=host, first=runs[0], steady=runs[-1], iterations=len(runs),
                       weight_bytes_pushed=pushed, seconds=time.perf_counter() - started,
                       weight_transfers=weight_transfers, iteration_transfers=iteration_transfers)
