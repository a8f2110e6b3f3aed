"""Pickled results kept in a folder of the machine's cache, the least recently used let go beyond a
size: the home of how opbyop keeps a computed thing (exports, splits) on disk."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

from opbyop.atomic import atomic_path


def read_pickle(path: Path, kind: type) -> Any:
    """The `kind` object pickled at `path` (marked recently used). Raises what stops it being read:
    OSError, an unpickling error, or TypeError for another kind of object."""
    with open(path, "rb") as f:
        value = pickle.load(f)
    if not isinstance(value, kind):
        raise TypeError(f"it holds a {type(value).__name__}, not a {kind.__name__}")
    os.utime(path)  # recently used: kept longest
    return value


def write_pickle(path: Path, value: Any, max_bytes: int) -> bool:
    """Keep `value` at `path` (atomically), then trim its folder to `max_bytes`; False when it could
    not be written (a full disk costs only the cache)."""
    try:
        with atomic_path(path) as partial, open(partial, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:
        return False
    trim(path.parent, max_bytes)
    return True


def trim(folder: Path, max_bytes: int) -> None:
    """Remove the least recently used pickles of `folder` (with their `.json` manifests) beyond
    `max_bytes`; another process trimming at once is harmless."""
    entries = []
    for path in folder.glob("*.pickle"):
        try:
            stat = path.stat()
        except OSError:
            continue
        entries.append((stat.st_mtime, stat.st_size, path))
    total = 0
    for _, size, path in sorted(entries, key=lambda e: e[0], reverse=True):
        total += size
        if total > max_bytes:
            path.unlink(missing_ok=True)
            path.with_suffix(".json").unlink(missing_ok=True)
