"""Where opbyop keeps its files: artifacts, the op index, worker scratch and logs, the result store.

One directory (OPBYOP_HOME, default ./.opbyop) per host: Dask workers on other hosts keep their own
(opbyop.worker.wire carries what an op needs between them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from opbyop.artifacts import ArtifactStore
from opbyop.atomic import write_text
from opbyop.environment import environment, workspace_root
from opbyop.records import Occurrence, UniqueOp


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def default(cls) -> Workspace:
        return cls(workspace_root())

    @property
    def artifacts(self) -> ArtifactStore:
        return ArtifactStore(self.root / "artifacts")

    @property
    def ops(self) -> OpIndex:
        return OpIndex(self.root / "ops")

    @property
    def store(self) -> Path | str:
        """A directory, or an object-store URL (s3://bucket/prefix)."""
        return environment().store or self.root / "store"

    @property
    def xla_cache(self) -> Path:
        """XLA:CPU's compiled golden executables, by op signature (golden.xla_cpu)."""
        return self.root / "xla-cache"

    @property
    def scratch(self) -> Path:
        return self.root / "scratch"


class OpIndex:
    """Every unique op ever analysed, by signature: what a one-command repro needs."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def put(self, op: UniqueOp) -> None:
        path = self.root / op.signature[:2] / f"{op.signature}.json"
        if path.exists():
            known = UniqueOp.model_validate_json(path.read_text())
            seen = set(known.occurrences)
            op = op.model_copy(update={"occurrences": known.occurrences + [o for o in op.occurrences if o not in seen]})
        write_text(path, op.model_dump_json())

    def get(self, key: str) -> UniqueOp:
        """By signature prefix (at least 6 characters) or by `model:position`."""
        if ":" in key:
            model, _, position = key.rpartition(":")
            return self._by_occurrence(model, int(position))
        matches = list(self.root.glob(f"{key[:2]}/{key}*.json")) if len(key) >= 6 else []
        if len(matches) != 1:
            raise KeyError(f"{len(matches)} stored ops match '{key}'" if matches or len(key) >= 6
                           else f"'{key}' is too short: give at least 6 characters of a signature")
        return UniqueOp.model_validate_json(matches[0].read_text())

    def _by_occurrence(self, model: str, position: int) -> UniqueOp:
        wanted = Occurrence(model=model, position=position)
        for path in self.root.glob("*/*.json"):
            op = UniqueOp.model_validate_json(path.read_text())
            if wanted in op.occurrences:
                return op
        raise KeyError(f"no stored op at {model}:{position}; run `opbyop compile {model}` first")

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json"))
