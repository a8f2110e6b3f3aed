"""How far a compile got, read from the stage dumps the plugin writes into its export_path.

Each stage's dump exists only if the compiler got that far; the exception (if any) tells why it
stopped. Dump file names end in a millisecond timestamp, which gives the time per stage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from opbyop.records import Stage

# The dump that proves a stage was reached (first match wins), and the artifact kinds kept.
_STAGE_DUMPS: list[tuple[Stage, str]] = [
    (Stage.STABLEHLO, "irs/shlo_compiler_cleaned_*.mlir"),
    (Stage.TTIR, "irs/ttir_*.mlir"),
    (Stage.TTNN, "irs/ttnn_[0-9]*.mlir"),
    (Stage.FLATBUFFER, "fb_*.ttnn"),
]
ARTIFACT_KINDS: dict[str, str] = {
    "shlo": "irs/shlo_compiler_cleaned_*.mlir",
    "ttir": "irs/ttir_*.mlir",
    "ttnn": "irs/ttnn_[0-9]*.mlir",
    "ttnn_runtime": "irs/ttnn_runtime_*.mlir",
    "flatbuffer": "fb_*.ttnn",
}
_STAMP = re.compile(r"_(\d{10,})\.(mlir|ttnn)$")


@dataclass(frozen=True)
class StageDumps:
    reached: Stage | None
    seconds: dict[Stage, float]
    files: dict[str, Path]  # artifact kind -> dump file


def _stamp(path: Path) -> float:
    m = _STAMP.search(path.name)
    return int(m.group(1)) / 1000.0 if m else path.stat().st_mtime


def read_dumps(export_dir: Path, started: float) -> StageDumps:
    """Stages reached in `export_dir`; `started` is the compile's wall-clock start (time.time())."""
    reached: Stage | None = None
    seconds: dict[Stage, float] = {}
    previous = started
    for stage, pattern in _STAGE_DUMPS:
        found = sorted(export_dir.glob(pattern))
        if not found:
            break
        at = _stamp(found[-1])
        seconds[stage] = max(0.0, at - previous)
        previous = at
        reached = stage
    files = {}
    for kind, pattern in ARTIFACT_KINDS.items():
        found = sorted(export_dir.glob(pattern))
        if found:
            files[kind] = found[-1]
    return StageDumps(reached=reached, seconds=seconds, files=files)


def failed_after(reached: Stage | None) -> Stage:
    """The stage a compile failed at, given the deepest one reached (a compile that wrote its
    flatbuffer and then failed still failed at FLATBUFFER, never at the device)."""
    if reached is None:
        return Stage.STABLEHLO
    following = reached.next()
    return following if following is not None and following.rank <= Stage.FLATBUFFER.rank else Stage.FLATBUFFER
