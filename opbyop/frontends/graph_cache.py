"""Exported zoo models kept on disk: a warm run skips the framework (importing torch and torch-mlir
alone takes 3-6 s, exporting resnet50 about 16 s), whichever command loads it (loader.load_model).

Only the zoo's own models (their code is opbyop's); the key holds everything the export depends on:
the zoo entry, the seed, the frontends' source code and the framework versions. A user's
`package.module:factory` or a file is exported every time. The graph (module text, weights, the
framework's reference outputs) is pickled into the machine's cache (OPBYOP_CACHE_DIR/graphs): our
own files, read back by our own code. The oldest entries go beyond MAX_BYTES.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import time
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from opbyop.atomic import atomic_path
from opbyop.config import Zoo
from opbyop.environment import environment
from opbyop.graph import ModelGraph

MAX_BYTES = 4 << 30
FRAMEWORKS = ("torch", "torch-mlir", "jax", "jaxlib", "transformers")


@cache  # once per process: the frameworks and frontends it exports with are those it loaded
def _exporters() -> tuple[tuple[str, ...], str]:
    """The framework versions and a digest of the frontends' source: what every key holds."""
    return tuple(_versions()), _frontends_digest()


def _versions() -> list[str]:
    out = []
    for name in FRAMEWORKS:
        try:
            out.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            out.append(f"{name} absent")
    return out


def _frontends_digest() -> str:
    digest = hashlib.sha256()
    root = Path(__file__).parent  # the frontends' package: what an export runs
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cache_path(spec: str, zoo: Zoo, seed: int) -> Path | None:
    """Where `spec`'s export is kept, or None when it is not a zoo model of opbyop's own."""
    if spec not in zoo.names():
        return None
    entry = zoo.get(spec)
    if entry.frontend == "stablehlo" or not (entry.factory or "").startswith("opbyop."):
        return None
    key = json.dumps([entry.model_dump(mode="json"), seed, *_exporters()], sort_keys=True)
    return environment().cache_dir / "graphs" / f"{spec}-{hashlib.sha256(key.encode()).hexdigest()[:20]}.pickle"


def is_cached(spec: str, zoo: Zoo, seed: int) -> bool:
    """Whether `spec`'s export is in the cache (then its split needs no framework)."""
    path = cache_path(spec, zoo, seed)
    return path is not None and path.exists()


def read(path: Path) -> ModelGraph | None:
    """The cached graph, or None (absent, or unreadable: it is exported again)."""
    start = time.monotonic()
    try:
        with open(path, "rb") as f:
            graph = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None
    if not isinstance(graph, ModelGraph):
        return None
    os.utime(path)  # recently used: kept longest
    graph.notes.append(f"export read from the cache ({path.name}) in {time.monotonic() - start:.2f} s; "
                       f"exported in {graph.export_seconds:.2f} s")
    return graph


def write(path: Path, graph: ModelGraph) -> None:
    """Keep `graph` (atomically; a full disk only costs the cache), then trim the cache."""
    try:
        with atomic_path(path) as partial, open(partial, "wb") as f:
            pickle.dump(graph, f, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:
        return
    _trim(path.parent)


def _trim(directory: Path) -> None:
    entries = sorted(directory.glob("*.pickle"), key=lambda p: p.stat().st_mtime, reverse=True)
    total = 0
    for entry in entries:
        total += entry.stat().st_size
        if total > MAX_BYTES:
            entry.unlink(missing_ok=True)
