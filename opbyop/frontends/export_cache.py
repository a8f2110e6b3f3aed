"""Exported models kept on disk, each by everything its export read: a later run reuses an export only
while every file it read and every package it imported is as it was (frontends.reads).

An export is asked by its Request (the zoo entry or the user's `package.module:factory` with its
keyword arguments and example inputs, the seed, whether the weights' values are kept, the Python and
opbyop versions): one manifest per request names the files (by content digest) and packages (by
version) the export read, and the pickled graph. Checking a manifest reads no framework: a second
night checks its models' sources in milliseconds and skips torch, torch.export and torch-mlir.

The machine's cache keeps them (OPBYOP_CACHE_DIR/exports), beside the descriptors; the least
recently used go beyond MAX_BYTES. An entry that cannot be read is exported again, and the model's
notes say why; a model whose export fails is not kept (it is tried again next time).
"""

from __future__ import annotations

import importlib.util
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from opbyop import __version__
from opbyop.atomic import write_text
from opbyop.config import ZooEntry
from opbyop.digests import FileDigests, text_digest
from opbyop.environment import environment
from opbyop.frontends.reads import OWN, ExportReads, installed_versions, python_version
from opbyop.graph import ModelGraph
from opbyop.kept import read_pickle, write_pickle

MAX_BYTES = 4 << 30
AGAIN = "exported again: "  # how a model's notes begin the reason its kept export was not used


@dataclass(frozen=True)
class Request:
    """One export as asked: what is made, with which inputs, and what of it is handed back."""

    entry: ZooEntry
    seed: int
    weights: bool

    @property
    def key(self) -> str:
        return text_digest(self.entry.model_dump_json(), str(self.seed), str(self.weights), python_version(),
                           __version__, found_at(self.entry.factory or ""))[:32]


def found_at(factory: str) -> str:
    """Where the top-level package of `package.module:factory` is found now, as an import would find it
    (sys.path and the import hooks: an editable install's finder too; a top-level name imports nothing):
    the same name found in another folder is another model, whatever its files say. Every process
    finds it alike (the run's, a Dask worker's), whatever its working directory. opbyop's own models
    (the zoo's) are found in whichever opbyop runs: their sources are recorded by their place in it."""
    top = factory.partition(":")[0].partition(".")[0]
    if not top:
        return ""
    if top == "opbyop":
        return OWN
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return ""
    if spec is None:
        return ""
    return spec.origin or ",".join(spec.submodule_search_locations or [])


@dataclass
class Found:
    """A kept export (graph), or why there is none to use (`again`; None when none was ever kept)."""

    graph: ModelGraph | None
    again: str | None = None


class ExportCache:
    """The machine's kept exports. With `reuse` false nothing kept is used, but each new export is
    kept (`--no-reuse` exports everything again). One per run: the files' digests are taken once."""

    def __init__(self, root: Path | None = None, reuse: bool = True):
        self.root = root or environment().cache_dir / "exports"
        self.reuse = reuse
        self.digests = FileDigests()
        self._installed: dict[str, str] | None = None

    def manifest_path(self, request: Request) -> Path:
        return self.root / f"{request.entry.name}-{request.key}.json"

    def find(self, request: Request) -> Found:
        """The kept export of `request` if everything it read is unchanged."""
        if not self.reuse or not self.manifest_path(request).exists():
            return Found(None)
        start = time.monotonic()
        try:
            reads, graph_path = self._manifest(request)
        except (OSError, ValueError, KeyError, TypeError) as e:
            return Found(None, f"its kept export's manifest {self.manifest_path(request).name} cannot be read "
                               f"({type(e).__name__}: {e})")
        changed = reads.changed(self.digests, self.installed())
        if changed is not None:
            return Found(None, changed)
        try:
            graph = read_pickle(graph_path, ModelGraph)
        except Exception as e:  # noqa: BLE001  (a truncated or foreign pickle: the export is made again)
            return Found(None, f"its kept export {graph_path.name} cannot be read ({type(e).__name__}: {e})")
        graph.reused = True
        graph.notes.append(f"export reused from the machine's cache ({len(reads.files)} files and "
                           f"{len(reads.packages)} packages it read unchanged, checked and read in "
                           f"{time.monotonic() - start:.2f} s); exported in {graph.export_seconds:.2f} s")
        return Found(graph)

    def fresh(self, request: Request) -> bool:
        """Whether find() would give a kept export (its manifest checked, the graph not read)."""
        if not self.reuse:
            return False
        try:
            reads, graph_path = self._manifest(request)
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return graph_path.exists() and reads.changed(self.digests, self.installed()) is None

    def _manifest(self, request: Request) -> tuple[ExportReads, Path]:
        """What the kept export of `request` read, and where its graph is; raises what stops the read."""
        manifest = json.loads(self.manifest_path(request).read_text())
        return ExportReads(**manifest["reads"]), self.root / manifest["graph"]

    def keep(self, request: Request, graph: ModelGraph, reads: ExportReads) -> None:
        """Keep `graph` with what its export read (atomically; a full disk costs only the cache)."""
        manifest = self.manifest_path(request)
        graph_path = manifest.with_suffix(".pickle")
        if not write_pickle(graph_path, graph, MAX_BYTES):
            return
        try:
            write_text(manifest, json.dumps({"request": request.entry.model_dump(mode="json"), "seed": request.seed,
                                             "weights": request.weights, "graph": graph_path.name,
                                             "reads": asdict(reads)}, indent=1))
        except OSError:
            graph_path.unlink(missing_ok=True)

    def installed(self) -> dict[str, str]:
        if self._installed is None:
            self._installed = installed_versions()
        return self._installed
