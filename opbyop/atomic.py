"""Files written so that readers see all of a file or none of it, and a failure leaves nothing behind.

One helper for every file opbyop writes in place of another (artifacts, the op index, reports,
exports, caches, Parquet parts): write to a hidden sibling, rename it over the target (atomic on
one file system), and remove the sibling whatever stops the write (a full disk, Ctrl-C).
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """A hidden sibling of `path` to write; it replaces `path` when the block ends without error,
    and is removed when the block fails. The sibling keeps `path`'s suffix (np.savez appends one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.stem}.{os.getpid()}-{threading.get_ident()}.partial{path.suffix}")
    try:
        yield partial
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)  # gone already when the rename happened


def write_bytes(path: Path | str, data: bytes) -> Path:
    with atomic_path(path) as partial:
        partial.write_bytes(data)
    return Path(path)


def write_text(path: Path | str, text: str) -> Path:
    with atomic_path(path) as partial:
        partial.write_text(text)
    return Path(path)
