"""The latest shrink of each op, kept in the workspace (OPBYOP_HOME/shrinks/<signature>.json) by
`opbyop shrink`; the report of a run that holds the op shows it."""

from __future__ import annotations

from pathlib import Path

from opbyop.atomic import write_text
from opbyop.shrink.result import ShrinkResult


def shrink_path(workspace_root: Path, signature: str) -> Path:
    return Path(workspace_root) / "shrinks" / f"{signature}.json"


def save_shrink(workspace_root: Path, result: ShrinkResult) -> Path:
    return write_text(shrink_path(workspace_root, result.signature), result.model_dump_json(indent=1))


def load_shrink(workspace_root: Path, signature: str) -> ShrinkResult | None:
    """The saved shrink of `signature`; None when there is none or it cannot be read."""
    path = shrink_path(workspace_root, signature)
    try:
        return ShrinkResult.model_validate_json(path.read_text()) if path.exists() else None
    except (OSError, ValueError):
        return None
