"""Content digests: what a kept result is keyed by (files, arrays, text), never a name or a time."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterable

import numpy as np

CHUNK = 1 << 20

ABSENT = ""  # the digest of a path that is not a readable file


class FileDigests:
    """sha256 of files' contents, each file read once while its size, mtime and inode stay the same
    (a run checks the same sources for each of its models)."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[tuple[int, int, int], str]] = {}

    def of(self, path: str | Path) -> str:
        """The file's digest, or ABSENT when there is no readable file at `path`."""
        path = str(path)
        try:
            stat = os.stat(path)
        except OSError:
            return ABSENT
        stamp = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
        known = self._known.get(path)
        if known is not None and known[0] == stamp:
            return known[1]
        try:
            digest = file_digest(path)
        except OSError:
            return ABSENT
        self._known[path] = (stamp, digest)
        return digest


def file_digest(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def arrays_digest(arrays: Iterable[np.ndarray | None]) -> str:
    """A digest of arrays' dtypes, shapes and bytes (None: an array known by shape and dtype only)."""
    digest = hashlib.sha256()
    for array in arrays:
        if array is None:
            digest.update(b"none\0")
            continue
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}\0".encode())
        digest.update(array.reshape(-1).view(np.uint8).data)  # any dtype, bfloat16 included
    return digest.hexdigest()


def text_digest(*parts: str) -> str:
    """A digest of strings, each one's end marked (("ab", "c") and ("a", "bc") differ)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def source_digest(package: Path) -> str:
    """A digest of a package's Python source (its .py files by relative path): the code a kept
    result was made by."""
    digest = hashlib.sha256()
    for path in sorted(Path(package).rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
