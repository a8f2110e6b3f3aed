"""A content-addressed store for compiler artifacts (IR dumps, flatbuffers) and repro inputs.

Files are named by the sha256 of their bytes, so identical artifacts from different runs, ops or
workers are stored once, a reference can never point at another op's file, and writes are atomic.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from opbyop.atomic import write_bytes


class ArtifactStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, digest: str) -> Path:
        matches = list((self.root / digest[:2]).glob(f"{digest}.*")) if len(digest) >= 2 else []
        if not matches:
            raise FileNotFoundError(f"artifact {digest} is not in {self.root}")
        return matches[0]

    def put(self, data: bytes, suffix: str) -> str:
        digest = hashlib.sha256(data).hexdigest()
        target = self.root / digest[:2] / f"{digest}{suffix}"
        if not target.exists():
            write_bytes(target, data)  # atomic: readers see all of it or nothing
        return digest

    def put_file(self, path: Path) -> str:
        return self.put(path.read_bytes(), "".join(path.suffixes) or ".bin")

    def read(self, digest: str) -> bytes:
        return self.path(digest).read_bytes()

    def read_text(self, digest: str) -> str:
        return self.read(digest).decode()
