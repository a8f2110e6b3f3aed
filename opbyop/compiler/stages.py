"""How far a compile got, read from the stage dumps the plugin writes into its export_path.

Each stage's dump exists only if the compiler got that far; the exception (if any) tells why it
stopped. Dump file names end in a millisecond timestamp, which gives the time per stage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from opbyop.records import Stage

# The artifact kinds kept (their dump files), and the kind whose dump proves each stage was reached.
ARTIFACT_KINDS: dict[str, str] = {
    "shlo": "irs/shlo_compiler_cleaned_*.mlir",
    "ttir": "irs/ttir_*.mlir",
    "ttnn": "irs/ttnn_[0-9]*.mlir",
    "ttnn_runtime": "irs/ttnn_runtime_*.mlir",
    "flatbuffer": "fb_*.ttnn",
}
_STAGE_PROOF: list[tuple[Stage, str]] = [
    (Stage.STABLEHLO, "shlo"), (Stage.TTIR, "ttir"), (Stage.TTNN, "ttnn"), (Stage.FLATBUFFER, "flatbuffer"),
]
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
    files = {}
    for kind, pattern in ARTIFACT_KINDS.items():
        found = sorted(export_dir.glob(pattern))
        if found:
            files[kind] = found[-1]  # the latest dump of its kind
    reached: Stage | None = None
    seconds: dict[Stage, float] = {}
    previous = started
    for stage, kind in _STAGE_PROOF:
        if kind not in files:
            break
        at = _stamp(files[kind])
        seconds[stage] = max(0.0, at - previous)
        previous = at
        reached = stage
    return StageDumps(reached=reached, seconds=seconds, files=files)


def failed_after(reached: Stage | None) -> Stage:
    """The stage a compile failed at, given the deepest one reached (a compile that wrote its
    flatbuffer and then failed still failed at FLATBUFFER, never at the device)."""
    if reached is None:
        return Stage.STABLEHLO
    following = reached.next()
    return following if following is not None and following.rank <= Stage.FLATBUFFER.rank else Stage.FLATBUFFER
