"""The simulated chip and the tensors on it: what the executor and the runtime API both work on.

Their own module, so that the executor (which runs programs on a Device) and the runtime API
(which moves DeviceTensors to and from it) depend on it, never on each other.
"""

from __future__ import annotations

import concurrent.futures
import itertools
from dataclasses import dataclass, field

import numpy as np

from opbyop.device.arch import DeviceSpec
from opbyop.device.layout import Layout
from opbyop.device.memory import Buffer, DeviceMemory
from opbyop.device.program import Program
from opbyop.device.transfers import TransferCounter
from opbyop.records import DeviceRun


def host_layout(dtype: str) -> Layout:
    return Layout(dtype=dtype, buffer="system_memory", memory_layout=None)


@dataclass(eq=False)
class DeviceTensor:
    values: np.ndarray  # in its storage format already
    dtype: str
    layout: Layout
    device: Device | None
    buffer: Buffer | None = None
    refs: int = 1
    name: str = ""
    ready: concurrent.futures.Future | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    @property
    def deallocated(self) -> bool:
        return self.buffer is not None and self.buffer.freed


class Device:
    """One simulated chip: memory, a command queue, the const-eval cache."""

    _ids = itertools.count()

    def __init__(self, spec: DeviceSpec):
        self.spec = spec
        self.id = next(self._ids)
        self.memory = DeviceMemory(spec)
        self.const_cache: dict[tuple, ConstEval] = {}
        self.placements: dict[tuple, object] = {}  # placement.place's memo: same op model, same placement
        self.live: dict[int, DeviceTensor] = {}
        self.runs: list[DeviceRun] = []  # one record per executed program, in order
        self.transfers = TransferCounter()  # host <-> device traffic, counted by the runtime API
        self._queue = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"device{self.id}")
        self.closed = False

    def track(self, tensor: DeviceTensor) -> DeviceTensor:
        if tensor.buffer is not None:
            self.live[id(tensor)] = tensor
        return tensor

    def release(self, tensor: DeviceTensor, force: bool = False) -> None:
        tensor.refs = 0 if force else tensor.refs - 1
        if tensor.refs <= 0:
            self.memory.free(tensor.buffer)
            self.live.pop(id(tensor), None)

    def release_constants(self) -> None:
        """Drop the const-eval cache (its tensors are freed once nothing else holds them)."""
        cached, self.const_cache = self.const_cache, {}
        for entry in cached.values():
            for t in entry.results:
                self.release(t)

    def close(self) -> None:
        if not self.closed:
            self._queue.shutdown(wait=True)
            for t in list(self.live.values()):
                self.memory.free(t.buffer)
            self.live.clear()
            self.const_cache.clear()
            self.closed = True


@dataclass
class ConstEval:
    """A cached const-eval result and what it was computed from."""

    program: Program
    args: list
    results: list
