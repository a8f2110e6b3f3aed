"""A model's split kept by what it is computed from: the graph's module text, name and the framework
ops its frontend could not lower, and the code that splits (opbyop.ir, the records it makes). A
.mlir file or a dump is keyed by its content this way too: a second night splits nothing it split
before. Kept in the machine's cache (OPBYOP_CACHE_DIR/splits), the least recently used let go beyond
MAX_BYTES; an entry that cannot be read is split again."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Callable

import opbyop
from opbyop.digests import file_digest, source_digest, text_digest
from opbyop.environment import environment
from opbyop.graph import ModelGraph
from opbyop.ir.split import SplitResult
from opbyop.kept import read_pickle, write_pickle

MAX_BYTES = 2 << 30
PACKAGE = Path(opbyop.__file__).parent


@cache  # once per process: the code it runs is the code it loaded
def split_code() -> str:
    """The digest of the code a split is made by: the IR package, the records, the frontend failures."""
    return text_digest(source_digest(PACKAGE / "ir"), *(file_digest(PACKAGE / name) for name in
                                                        ("records.py", "pipeline.py", "frontends/failures.py")))


def split_key(graph: ModelGraph) -> str:
    return text_digest(graph.name, graph.module_text, repr(graph.frontend_failures), split_code(), opbyop.__version__)


class SplitCache:
    """Splits kept by split_key. With `reuse` false nothing kept is used (each split is kept)."""

    def __init__(self, root: Path | None = None, reuse: bool = True):
        self.root = root or environment().cache_dir / "splits"
        self.reuse = reuse

    def split(self, graph: ModelGraph, make: Callable[[ModelGraph], SplitResult]) -> tuple[SplitResult, bool]:
        """(the graph's split, whether it was kept from before); `make` splits it when not."""
        path = self.root / f"{split_key(graph)[:40]}.pickle"
        if self.reuse and path.exists():
            try:
                return read_pickle(path, SplitResult), True
            except Exception:  # noqa: BLE001  (a truncated or foreign pickle: split again)
                pass
        split = make(graph)
        write_pickle(path, split, MAX_BYTES)
        return split, False
