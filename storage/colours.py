"""The colours of statuses and depths: one place for the HTML report and the Model Explorer overlays.

Every status gets a colour from the fault it belongs to (records.Status.fault), so a status added to
the enum later shows up in both views without being listed here; the known ones get their own shade.
"""

from __future__ import annotations

from opbyop.records import Fault, Stage, Status

# By whose fault a status is: green is fine, reds are the compiler's, oranges the device's, blues
# opbyop's own gaps, greys the infrastructure's and skips.
FAULT_COLOURS: dict[Fault, str] = {
    Fault.NONE: "#16a34a", Fault.COMPILER: "#dc2626", Fault.DEVICE: "#f97316",
    Fault.OPBYOP: "#2563eb", Fault.INFRA: "#6b7280", Fault.FRONTEND: "#9f1239",
}
_OWN_SHADE: dict[Status, str] = {
    Status.SUCCESS: "#16a34a", Status.SKIPPED: "#a3a3a3",
    Status.COMPILE_FAILED: "#dc2626", Status.CRASHED: "#991b1b", Status.TIMEOUT: "#f43f5e",
    Status.RUN_FAILED: "#ea580c", Status.GOLDEN_FAILED: "#f59e0b",
    Status.NOT_SIMULATED: "#2563eb", Status.ANALYZER_ERROR: "#7c3aed",
    Status.INFRA_ERROR: "#6b7280", Status.MISCOMPILED: "#db2777", Status.SIMULATOR_ERROR: "#0891b2", Status.SIMULATOR_LIMIT: "#0e7490",
    Status.FRONTEND_FAILED: "#9f1239",
}

# Depths reached, from the split (red) to the golden comparison (green); the report's depth bars.
DEPTH_COLOURS: dict[str, str] = {
    "SPLIT_FAILED": "#7f1d1d", "NO_RESULT": "#9ca3af", Stage.SPLIT.value: "#b91c1c",
    Stage.STABLEHLO.value: "#dc2626", Stage.TTIR.value: "#ea580c", Stage.TTNN.value: "#f59e0b",
    Stage.FLATBUFFER.value: "#eab308", Stage.DEVICE_RUN.value: "#84cc16", Stage.GOLDEN.value: "#16a34a",
}


def status_colour(status: Status) -> str:
    """The status's colour: its own shade, else its fault's colour."""
    return _OWN_SHADE.get(status) or FAULT_COLOURS.get(status.fault, "#000000")


def status_colours() -> dict[str, str]:
    """Every status of the enum (in its order) -> its colour."""
    return {s.value: status_colour(s) for s in Status}
