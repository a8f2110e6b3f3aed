"""How a user names a model, and the one name it is recorded under: a zoo name, a factory's
`package.module:name`, a StableHLO file, or one module of a dump (`<dump file>#<name>`).

Only strings and paths here: the store, the report and the cluster's coordinator name models
without importing a framework or MLIR (the exporters in loader.py and dumps.py do).
"""

from __future__ import annotations

import re
from pathlib import Path

MLIR_SUFFIXES = (".mlir", ".mlirbc")
SPEC_SEPARATOR = "#"  # `<dump file>#<model name>`: one dumped module as a model spec


def split_spec(spec: str) -> tuple[Path, str] | None:
    """(dump file, model name) of a `<file>#<name>` spec whose file exists; None otherwise."""
    path, sep, name = spec.rpartition(SPEC_SEPARATOR)
    if not sep or not name or not Path(path).is_file():
        return None
    return Path(path), name


def spec_name(spec: str) -> str:
    """The model name a spec is recorded under when it cannot be loaded."""
    found = split_spec(spec)
    return found[1] if found is not None else spec


def factory_name(spec: str) -> str:
    """The model name a `package.module:name` is recorded under (a valid zoo name)."""
    name = re.sub(r"[^a-z0-9_.-]", ".", spec.replace(":", ".").lower()).lstrip("._-")
    return name or "model"


def recorded_name(spec: str) -> str:
    """The one name a model given as `spec` is recorded under, whichever way a user types it: a zoo
    name as it is, a factory's `package.module:name` as factory_name, a StableHLO file as its stem."""
    if ":" in spec and split_spec(spec) is None and Path(spec).suffix not in MLIR_SUFFIXES:
        return factory_name(spec)
    path = Path(spec)
    return path.stem if path.suffix in MLIR_SUFFIXES else spec
