"""What a whole model's run on the device returns, on one chip (opbyop.device.stitch) or on a mesh
(opbyop.device.mesh_runtime) alike."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opbyop.device.transfers import TransferTotals
from opbyop.records import DeviceRun


@dataclass
class StitchedRun:
    outputs: list[np.ndarray]
    first: DeviceRun  # includes const-eval work
    steady: DeviceRun  # the last iteration: what one more inference costs
    iterations: int
    weight_bytes_pushed: int
    seconds: float
    weight_transfers: TransferTotals  # the one push of the weights
    iteration_transfers: list[TransferTotals]  # each iteration's inputs in (and, last, outputs out)
