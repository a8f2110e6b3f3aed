"""Where a workspace's `opbyop serve` leaves its record (flows/hosting/service.py reads and writes it);
apart, so that the CLI can look for it before its own imports (flows/cli/early.py)."""

from __future__ import annotations

from pathlib import Path

RECORD_NAME = "service.json"


def record_path(workspace_root: Path) -> Path:
    return workspace_root / RECORD_NAME
