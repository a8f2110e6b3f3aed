"""What every frontend produces: one StableHLO module plus the values to feed and check it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

import numpy as np

from opbyop.records import TensorDesc


class ArgumentKind(str, Enum):
    INPUT = "input"
    PARAMETER = "parameter"  # weights and buffers: @main arguments, never inline text
    UNLOWERED = "unlowered"  # a result of a framework op the frontend could not lower (no value)


@dataclass(frozen=True)
class Argument:
    name: str
    kind: ArgumentKind
    tensor: TensorDesc
    # A module's buffer (rotary frequencies, position ids ...): fixed by the configuration, not trained,
    # so values computed from it are as real as those computed from the model's inputs.
    buffer: bool = False


@dataclass
class ModelGraph:
    """A model as one StableHLO module (text, with locations) and the real values around it.

    An argument either has a value (the model's real inputs; the weights of a model built with them)
    or is known by shape and dtype only (None in `argument_values`: weights of a model built on the
    meta device or given as jax.ShapeDtypeStruct, every argument of a StableHLO file or IR dump).
    Nothing here materialises a value an argument does not have."""

    name: str
    frontend: str
    module_text: str
    arguments: list[Argument]
    # One entry per @main argument (example inputs, then weights): its value, or None when the
    # argument is known by shape and dtype only; None for no values at all.
    argument_values: list[np.ndarray | None] | None = None
    # The framework's own eager output on those values: the reference the split must reproduce
    # (None when some argument has no value: there was no eager run).
    reference_outputs: list[np.ndarray] | None = None
    export_seconds: float = 0.0
    reused: bool = False  # taken from the export cache: nothing its export read had changed
    notes: list[str] = field(default_factory=list)
    # Framework ops the frontend could not lower (their outputs became @main arguments of the rest).
    frontend_failures: list[FrontendFailure] = field(default_factory=list)

    def value(self, index: int) -> np.ndarray | None:
        """The value of @main's argument `index`, or None when it is known by shape and dtype only."""
        values = self.argument_values or []
        return values[index] if index < len(values) else None

    def without_weights(self) -> ModelGraph:
        """The graph with its weights known by shape and dtype only (inputs and buffers keep their
        values, the reference outputs are kept): what a run that stitches no whole model needs of
        it (its ops' upstream values come from real_values)."""
        if self.argument_values is None:
            return self
        return replace(self, argument_values=[None if a.kind is ArgumentKind.PARAMETER and not a.buffer else v
                                              for a, v in zip(self.arguments, self.argument_values, strict=True)])

    def real_values(self) -> dict[int, np.ndarray]:
        """Argument index -> value, for the arguments whose value is real and independent of the
        weights: the model's inputs and its buffers. Values computed only from these are real too."""
        out = {}
        for i, argument in enumerate(self.arguments):
            value = self.value(i)
            if value is not None and (argument.kind is ArgumentKind.INPUT or argument.buffer):
                out[i] = value
        return out


@dataclass(frozen=True)
class FrontendFailure:
    """A framework op the frontend could not lower to StableHLO, recorded on that op."""

    framework_op: str  # e.g. torch.histc
    message: str  # the frontend's (torch-mlir's) own words
    aten_op: str | None = None  # e.g. aten.histc.default
    module_path: str | None = None  # e.g. model.layers.0.block_sparse_moe
    source: str | None = None  # file:line in the model's code
    location: str = ""  # the whole source chain, innermost first
    inputs: list[TensorDesc] = field(default_factory=list)
    outputs: list[TensorDesc] = field(default_factory=list)
    position: int = 0  # order among the model's frontend failures
