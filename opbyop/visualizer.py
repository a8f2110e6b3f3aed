"""Where opbyop finds TT-NN Visualizer (PyPI `ttnn-visualizer`), the tool that shows a memory report's
per-core L1 buffers and circular buffers, its operations and its performance report.

It pins pydantic and tt-perf-report versions that opbyop's own environment cannot share, so it lives
in an environment of its own: `make visualizer` builds `.venv-visualizer` in the checkout; a
`visualizer` argument (a `ttnn-visualizer` executable, or the environment's folder) names another.
"""

from __future__ import annotations

from pathlib import Path

from opbyop.errors import OpbyopError

CHECKOUT = Path(__file__).resolve().parents[1]
DEFAULT_ENVIRONMENT = CHECKOUT / ".venv-visualizer"
EXECUTABLE = "ttnn-visualizer"
VERSION = "0.108.0"
SETUP_FIX = (f"run `make visualizer` in the checkout (a virtual environment .venv-visualizer with "
             f"`pip install ttnn-visualizer=={VERSION}`), or pass --visualizer with the path of a "
             f"`{EXECUTABLE}` executable or of the environment that holds it")


class VisualizerUnavailable(OpbyopError):
    """No TT-NN Visualizer to start here: where it was looked for and how to get it."""


def locate(visualizer: Path | None = None) -> Path:
    """The `ttnn-visualizer` executable: `visualizer` (the executable or its environment's folder), or
    the checkout's `.venv-visualizer`."""
    where = visualizer or DEFAULT_ENVIRONMENT
    executable = where if where.is_file() else where / "bin" / EXECUTABLE
    if not executable.is_file():
        raise VisualizerUnavailable(f"no TT-NN Visualizer at {executable}", SETUP_FIX)
    return executable
