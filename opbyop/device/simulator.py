"""Run one compiled TTNN program on host inputs: the device step of the per-op pipeline."""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from opbyop.boards import Topology
from opbyop.device.arch import DeviceSpec
from opbyop.device.executor import NotSimulatedError, SimulationError, SimulatorBugError
from opbyop.device.mesh_runtime import MeshSimulator
from opbyop.device.placement import Policy
from opbyop.device.program import ReusedContext
from opbyop.device.runtime import (Binary, Device, as_host_type, get_layout, input_shape, open_device, run_of, submit,
                                   to_device, to_host)
from opbyop.records import DeviceRun

__all__ = ["DeviceSimulator", "NotSimulatedError", "SimulationError", "SimulatorBugError"]


class DeviceSimulator:
    """Keeps one open device per chip description and runs programs through the runtime API."""

    def __init__(self, harvesting_mask: int = 0, policy: Policy = Policy.FEWEST_CYCLES,
                 topology: Topology | None = None):
        self.harvesting_mask = harvesting_mask
        self.policy = policy
        self.topology = topology  # how the target's chips are linked, for mesh programs
        self._devices: dict[DeviceSpec, Device] = {}
        self._contexts = ReusedContext()  # programs are parsed one after another
        self._mesh: MeshSimulator | None = None  # made when the first mesh program runs

    def configure(self, harvesting_mask: int, policy: Policy, topology: Topology | None = None) -> None:
        """The device set-up of the next runs (devices of each set-up stay open, keyed by their spec;
        meshes by their topology too)."""
        self.harvesting_mask, self.policy, self.topology = harvesting_mask, policy, topology

    def mesh_simulator(self) -> MeshSimulator:
        """The mesh runtime, set up as this simulator is."""
        if self._mesh is None:
            self._mesh = MeshSimulator(self.policy, self.topology)
        self._mesh.policy, self._mesh.topology = self.policy, self.topology
        return self._mesh

    def device_for(self, spec: DeviceSpec) -> Device:
        if self.harvesting_mask:
            spec = spec.harvested(self.harvesting_mask)
        if spec not in self._devices:
            self._devices[spec] = open_device(spec)
        return self._devices[spec]

    def load(self, program_text: str) -> Binary:
        return Binary.load(program_text, ctx=self._contexts.get())

    def run(self, program_text: str, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], DeviceRun]:
        """Outputs of the program's entry on `inputs`, and what the run cost; SimulationError on failure."""
        return self.run_binary(self.load(program_text), inputs)

    def run_binary(self, binary: Binary, inputs: Sequence[np.ndarray], stablehlo: str | None = None,
                   chip_numerics: bool = True, trace: dict | None = None) -> tuple[list[np.ndarray], DeviceRun]:
        """Like run, for a program already loaded (its types read before the run, e.g. for narrowing).
        A program compiled for a mesh runs on a mesh of chips: `inputs` are global tensors, split as
        the op's module (`stablehlo`, its Shardy shardings) says, and the outputs come back gathered.
        `chip_numerics=False`: the same kernels with the chip's numerics off; `trace`: filled with
        every op's first result values (runtime.submit), on a mesh keyed (chip, value id)."""
        if binary.program.mesh_shape != (1, 1):
            result = self.mesh_simulator().run_binary(binary, inputs, stablehlo, chip_numerics=chip_numerics,
                                                      trace=trace)
            return result.outputs, result.run
        started = time.perf_counter()
        device = self.device_for(binary.program.spec)
        device.memory.reset_peaks()
        pushed, outputs = [], []
        try:
            for i, x in enumerate(inputs):
                pushed.append(to_device(x, device, get_layout(binary, 0, i), name=f"input {i}",
                                        shape=input_shape(binary, 0, i), chip_numerics=chip_numerics))
            outputs = submit(device, binary, 0, pushed, self.policy, chip_numerics=chip_numerics, trace=trace)
            framework = binary.function(0).host_return_types
            host = [as_host_type(to_host(t), framework[i] if i < len(framework) else None)
                    for i, t in enumerate(outputs)]
            run = run_of(outputs[0]) if outputs else DeviceRun()
        except SimulationError as e:
            e.run.seconds = time.perf_counter() - started
            raise
        finally:
            # single ops: nothing to keep on the device, whether the run worked or not
            for t in pushed + [t for t in outputs if t.buffer is not None]:
                device.release(t)
            device.release_constants()
        return host, run.model_copy(update={"seconds": time.perf_counter() - started})

    def close(self) -> None:
        for device in self._devices.values():
            device.close()
        self._devices.clear()
        if self._mesh is not None:
            self._mesh.close()
