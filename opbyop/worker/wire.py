"""What an op carries to a Dask worker on another host, and what it brings back.

A Dask worker's OPBYOP_HOME is its own: nothing but the network is shared with the flow's host. An op
travels with the artifacts it reads (the real values of its constant-fed arguments); its result comes
back with the artifacts it names (IR dumps, flatbuffer, the IR a failing pass was given), which the
flow puts into its own store. Whether a worker shares the flow's home is told by the home's identity
(a random id written once into the home), never by its path: another host can have the same path.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Iterable, TypeVar

from pydantic import BaseModel

from opbyop.artifacts import ArtifactStore

HOME_ID_FILE = "home-id"
_DIGEST = re.compile(r"[0-9a-f]{64}")

R = TypeVar("R", bound=BaseModel)

# digest -> (file suffix, bytes): artifacts as they travel between hosts
Parcel = dict[str, tuple[str, bytes]]


def home_id(root: Path) -> str:
    """The identity of the home at `root`, created on first use. Two processes creating it at once
    agree: the first link wins and both read it back."""
    path = Path(root) / HOME_ID_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{HOME_ID_FILE}.{uuid.uuid4().hex}")
        try:
            partial.write_text(uuid.uuid4().hex)
            os.link(partial, path)  # never replaces an id another process wrote first
        except FileExistsError:
            pass
        finally:
            partial.unlink(missing_ok=True)
    return path.read_text().strip()


def shares_home(root: Path, identity: str) -> bool:
    """Whether the home at `root` (a path on this host) is the home whose identity is `identity`."""
    try:
        return (Path(root) / HOME_ID_FILE).read_text().strip() == identity
    except OSError:
        return False


def pack(store: ArtifactStore, digests: Iterable[str]) -> Parcel:
    """The artifacts `digests` name that `store` holds, with their suffixes (others are left out)."""
    parcel: Parcel = {}
    for digest in set(digests):
        try:
            path = store.path(digest)
        except FileNotFoundError:
            continue
        parcel[digest] = ("".join(path.suffixes), path.read_bytes())
    return parcel


def unpack(store: ArtifactStore, parcel: Parcel) -> None:
    """Put the parcel's artifacts into `store` (content-addressed: ones it holds are not rewritten)."""
    for suffix, data in parcel.values():
        store.put(data, suffix)


def named_digests(record: BaseModel) -> set[str]:
    """Every sha256 a record names: the artifacts it refers to are among them (whatever field holds
    them), and a digest that is no artifact (the op's signature) is skipped by pack()."""
    found: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, str):
            if _DIGEST.fullmatch(value):
                found.add(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(record.model_dump(mode="json"))
    return found


@dataclass
class Shipped(Generic[R]):
    """A result and the artifacts it names, from a worker whose home is not the flow's (empty when it is)."""

    result: R
    artifacts: Parcel = field(default_factory=dict)

    def landed(self, store: ArtifactStore) -> R:
        """The result, its artifacts put into the flow's store first."""
        unpack(store, self.artifacts)
        return self.result
