"""What crosses between host and device: counted by the runtime API, one counter per device.

Totals are always kept (tensors and bytes each way, L1 tensors that `submit` moved out to DRAM);
inside `recording()` every transfer is also logged with a digest of its data, so a caller can
prove that the same data (a weight) never crossed twice, whatever name it was pushed under.
Bytes are what the device buffer holds in its layout: tiles padded when tiled, in the device's
element format (an i64 host array crosses as si32).
"""

from __future__ import annotations

import hashlib
import threading
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Iterator, Literal

import numpy as np

Direction = Literal["to_device", "to_host"]


@dataclass(frozen=True)
class TransferTotals:
    to_device_tensors: int = 0
    to_device_bytes: int = 0
    to_host_tensors: int = 0
    to_host_bytes: int = 0
    l1_evictions: int = 0  # L1 tensors a program did not use, moved to DRAM by submit
    l1_evicted_bytes: int = 0

    def __sub__(self, other: TransferTotals) -> TransferTotals:
        return TransferTotals(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def __add__(self, other: TransferTotals) -> TransferTotals:
        return TransferTotals(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})


@dataclass(frozen=True)
class Transfer:
    direction: Direction
    name: str
    nbytes: int
    digest: str  # of the host-side data: equal digests, equal data


def digest(host: np.ndarray) -> str:
    array = np.ascontiguousarray(host)
    return hashlib.blake2b(str((array.dtype.str, array.shape)).encode() + array.tobytes(), digest_size=16).hexdigest()


class TransferCounter:
    """Totals of one device's transfers; a log of them while recording."""

    def __init__(self) -> None:
        # counted in place: a new TransferTotals per transfer, once per chip and tensor, was 5% of a Galaxy's run
        self._counts = {f.name: 0 for f in fields(TransferTotals)}
        self._logs: list[list[Transfer]] = []  # one per open recording (they may nest)
        self._lock = threading.Lock()  # evictions are counted on the device's queue thread

    @property
    def totals(self) -> TransferTotals:
        with self._lock:
            return TransferTotals(**self._counts)

    def count(self, direction: Direction, name: str, nbytes: int, host: np.ndarray) -> None:
        with self._lock:
            self._counts[f"{direction}_tensors"] += 1
            self._counts[f"{direction}_bytes"] += nbytes
            if self._logs:
                entry = Transfer(direction, name, nbytes, digest(host))
                for log in self._logs:
                    log.append(entry)

    def evicted(self, nbytes: int) -> None:
        with self._lock:
            self._counts["l1_evictions"] += 1
            self._counts["l1_evicted_bytes"] += nbytes

    @contextmanager
    def recording(self) -> Iterator[list[Transfer]]:
        """Log every transfer made inside the block (with digests) into the list it yields."""
        log: list[Transfer] = []
        with self._lock:
            self._logs.append(log)
        try:
            yield log
        finally:
            with self._lock:
                self._logs = [other for other in self._logs if other is not log]
