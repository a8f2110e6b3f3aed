"""What every frontend produces: one StableHLO module plus the values to feed and check it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from opbyop.records import TensorDesc


class ArgumentKind(str, Enum):
    INPUT = "input"
    PARAMETER = "parameter"  # weights and buffers: @main arguments, never inline text


@dataclass(frozen=True)
class Argument:
    name: str
    kind: ArgumentKind
    tensor: TensorDesc


@dataclass
class ModelGraph:
    """A model as one StableHLO module (text, with locations) and the real values around it."""

    name: str
    frontend: str
    module_text: str
    arguments: list[Argument]
    # Real values for every @main argument (example inputs, then weights); None for a bare file.
    argument_values: list[np.ndarray] | None = None
    # The framework's own eager output on those values: the reference the split must reproduce.
    reference_outputs: list[np.ndarray] | None = None
    export_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
