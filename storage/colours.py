"""The colours of statuses and depths: one place for the HTML report and the Model Explorer overlays.

A status's colour is one of its facts (records.StatusFacts), so a status added to the enum shows up
in both views without being listed here.
"""

from __future__ import annotations

from opbyop.records import Stage, Status

# Depths reached, from the split (red) to the golden comparison (green); the report's depth bars.
DEPTH_COLOURS: dict[str, str] = {
    "SPLIT_FAILED": "#7f1d1d", "NO_RESULT": "#9ca3af", Stage.SPLIT.value: "#b91c1c",
    Stage.STABLEHLO.value: "#dc2626", Stage.TTIR.value: "#ea580c", Stage.TTNN.value: "#f59e0b",
    Stage.FLATBUFFER.value: "#eab308", Stage.DEVICE_RUN.value: "#84cc16", Stage.GOLDEN.value: "#16a34a",
}


def status_colours() -> dict[str, str]:
    """Every status of the enum (in its order) -> its colour."""
    return {s.value: s.colour for s in Status}
