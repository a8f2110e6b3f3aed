"""Device memory: DRAM interleaved across channels, L1 per core (interleaved or sharded).

Interleaved buffers spread their pages round-robin over the DRAM channels (or the worker cores'
L1); sharded L1 buffers put one shard on each core of their grid. Every bank has a capacity and an
alignment; running out is a run failure that names the buffer and the sizes. Peaks are tracked for
the cost report.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from opbyop.device.arch import DeviceSpec
from opbyop.device.layout import Layout


class OutOfMemory(Exception):
    """A buffer does not fit: names the buffer, what it needs and what is free."""


@dataclass
class Buffer:
    id: int
    name: str
    buffer_type: str  # dram | l1
    nbytes: int
    per_bank: dict[int, int]  # bank (channel or core index) -> bytes
    freed: bool = False


# Allocation plans a memory remembers before it forgets them all: a worker's device lives for
# thousands of ops, each plan is a dict of up to one entry per core.
PLANS_KEPT = 4096


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


@dataclass
class _Banks:
    kind: str
    count: int
    capacity: int
    alignment: int
    used: list[int] = field(default_factory=list)
    total: int = 0  # sum(used), kept as buffers come and go: a sum over 130 cores per buffer was most of it
    peak_total: int = 0
    peak_bank: int = 0
    next_bank: int = 0  # round-robin start, so small buffers spread over banks
    _fullest: int | None = 0  # max(used), or None once a release may have lowered it

    def __post_init__(self) -> None:
        self.used = [0] * self.count

    @property
    def fullest(self) -> int:
        """The most any one bank holds now."""
        if self._fullest is None:
            self._fullest = max(self.used)
        return self._fullest

    def allocate(self, per_bank: dict[int, int], name: str) -> None:
        used, capacity = self.used, self.capacity
        for bank, size in per_bank.items():
            if used[bank] + size > capacity:
                free = capacity - used[bank]
                where = f"channel {bank}" if self.kind == "dram" else f"core {bank}"
                raise OutOfMemory(
                    f"out of {self.kind.upper()} memory: buffer {name} needs {size:,} B on {where}, "
                    f"which has {free:,} B free of {capacity:,} B ({sum(per_bank.values()):,} B in all)")
        fullest = 0
        for bank, size in per_bank.items():
            used[bank] += size
            fullest = max(fullest, used[bank])
            self.total += size
        self.peak_total = max(self.peak_total, self.total)
        self.peak_bank = max(self.peak_bank, fullest)  # only the banks just grown can have a new peak
        if self._fullest is not None:
            self._fullest = max(self._fullest, fullest)

    def release(self, per_bank: dict[int, int]) -> None:
        for bank, size in per_bank.items():
            self.used[bank] -= size
            self.total -= size
        self._fullest = None


class DeviceMemory:
    """Allocators for one device. `plans` remembers where a buffer's pages go (per layout, shape and
    round-robin start); the chips of a mesh, alike, share theirs."""

    def __init__(self, spec: DeviceSpec):
        self.spec = spec
        self.dram = _Banks("dram", spec.num_dram_channels, spec.dram_per_channel, spec.noc_dram_address_align_bytes)
        self.l1 = _Banks("l1", spec.cores, spec.l1_per_core, spec.noc_l1_address_align_bytes)
        self._ids = itertools.count()
        self.plans: dict[tuple, tuple[dict[int, int], int, Layout]] = {}

    def allocate(self, layout: Layout, shape: tuple[int, ...], name: str) -> Buffer | None:
        """Reserve space for a tensor; None for host (system memory) tensors."""
        if not layout.on_device:
            return None
        banks = self.dram if layout.buffer == "dram" else self.l1
        # keyed by the layout's identity (comparing layouts field by field cost more than the plan);
        # the plan keeps its layout alive, so the id stays its own while remembered
        key = (id(layout), shape, banks.next_bank)
        plan = self.plans.get(key)
        if plan is None or plan[2] is not layout:
            if layout.buffer == "l1" and layout.sharded:
                plan = self._sharded(layout, shape, banks), banks.next_bank, layout
            else:
                plan = (*self._interleaved(layout, shape, banks), layout)
            if len(self.plans) >= PLANS_KEPT:
                self.plans.clear()
            self.plans[key] = plan
        per_bank, banks.next_bank, _ = plan
        banks.allocate(per_bank, name)
        return Buffer(id=next(self._ids), name=name, buffer_type=layout.buffer,
                      nbytes=sum(per_bank.values()), per_bank=per_bank)

    def free(self, buffer: Buffer | None) -> None:
        if buffer is None or buffer.freed:
            return
        (self.dram if buffer.buffer_type == "dram" else self.l1).release(buffer.per_bank)
        buffer.freed = True

    @staticmethod
    def _interleaved(layout: Layout, shape: tuple[int, ...], banks: _Banks) -> tuple[dict[int, int], int]:
        """Each bank's bytes, and the round-robin start after them."""
        pages = layout.pages(shape)
        page = _align(layout.page_bytes(shape), banks.alignment)
        base, extra = divmod(pages, banks.count)
        per_bank = {}
        for i in range(min(pages, banks.count)):
            bank = (banks.next_bank + i) % banks.count
            per_bank[bank] = (base + (1 if i < extra else 0)) * page
        return per_bank, (banks.next_bank + pages) % banks.count

    def _sharded(self, layout: Layout, shape: tuple[int, ...], banks: _Banks) -> dict[int, int]:
        rows, cols = layout.grid
        worker_rows, worker_cols = self.spec.worker_grid
        cores = min(rows * cols, banks.count)
        if rows > worker_rows or cols > worker_cols:
            raise OutOfMemory(f"shard grid {rows}x{cols} does not fit the {worker_rows}x{worker_cols} worker grid")
        shard = math.ceil(layout.nbytes(shape) / max(1, rows * cols))
        return {core: _align(shard, banks.alignment) for core in range(cores)}

    @property
    def peak_dram(self) -> int:
        return self.dram.peak_total

    @property
    def peak_l1_per_core(self) -> int:
        return self.l1.peak_bank

    def reset_peaks(self) -> None:
        for banks in (self.dram, self.l1):
            banks.peak_total, banks.peak_bank = banks.total, banks.fullest
