"""Targets as meshes: which chips a `--chip` name stands for, the mesh shapes it allows, its topology.

A board of several chips is one target: the compiler sees every chip of its system descriptor as a
device and compiles a sharded module for a mesh of them (num_partitions = chips of the mesh). The
topology is read from the UMD cluster descriptor the board's system descriptor was made from: which
chips its ethernet links join (a path: linear; a cycle: ring; anything else: 2d).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict

from opbyop.compiler.assets import find_assets, system_tmpdir
from opbyop.errors import SystemDescError


CLUSTER_DIR = "tt_metal/third_party/umd/tests/cluster_descriptor_examples"  # in the plugin's assets


class Topology(str, Enum):
    SINGLE = "single"  # one chip, no links
    LINEAR = "linear"  # chips on a path
    RING = "ring"  # chips on a cycle
    MESH_2D = "2d"  # a grid (or torus) of chips
    UNKNOWN = "unknown"  # a user's descriptor: its links are not known to opbyop


class Board(BaseModel):
    """A board or system opbyop knows by name: its chip count and the mesh shapes it can be used as
    (the first is the default)."""

    model_config = ConfigDict(frozen=True)

    chips: int
    meshes: tuple[tuple[int, int], ...]
    cluster_yaml: str | None = None  # UMD's cluster descriptor (links, hence topology)
    arch: str = "blackhole"  # the chips' architecture, as the compiler names it (wormhole_b0 | blackhole)


BOARDS: dict[str, Board] = {
    "p150": Board(chips=1, meshes=((1, 1),), cluster_yaml="blackhole_P150.yaml"),
    "p100": Board(chips=1, meshes=((1, 1),), cluster_yaml="blackhole_P100.yaml"),
    "n150": Board(chips=1, meshes=((1, 1),), cluster_yaml="wormhole_N150.yaml", arch="wormhole_b0"),
    "p300": Board(chips=2, meshes=((1, 2),), cluster_yaml="blackhole_P300_both_mmio.yaml"),
    "p150x4": Board(chips=4, meshes=((1, 4), (2, 2)), cluster_yaml="blackhole_4xP150.yaml"),
    "p150x8": Board(chips=8, meshes=((1, 8), (2, 4)), cluster_yaml="blackhole_8xP150.yaml"),
    "bh-galaxy": Board(chips=32, meshes=((4, 8), (8, 4), (1, 32)), cluster_yaml="blackhole_galaxy.yaml"),
    # Wormhole meshes: descriptors derived by opbyop (opbyop.compiler.wormhole_descs)
    "n300": Board(chips=2, meshes=((1, 2),), cluster_yaml="wormhole_N300.yaml", arch="wormhole_b0"),
    "t3k": Board(chips=8, meshes=((2, 4), (1, 8)), cluster_yaml="t3k_cluster_desc.yaml", arch="wormhole_b0"),
}


class Target(BaseModel):
    """The target of a run: a chip name and the mesh of its chips the compiler compiles for."""

    model_config = ConfigDict(frozen=True)

    chip: str
    mesh: tuple[int, int] = (1, 1)
    topology: Topology = Topology.SINGLE

    @property
    def chips(self) -> int:
        return self.mesh[0] * self.mesh[1]

    @property
    def mesh_text(self) -> str:
        return f"{self.mesh[0]}x{self.mesh[1]}"


def parse_mesh(text: str) -> tuple[int, int]:
    """'1x2' -> (1, 2); '8' -> (1, 8)."""
    parts = text.lower().replace(" ", "").split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        dims = []
    if len(dims) == 1:
        dims = [1, dims[0]]
    if len(dims) != 2 or min(dims) < 1:
        raise SystemDescError(f"mesh {text!r} is not a mesh shape", "write it as ROWSxCOLS, e.g. 1x2, 2x4 or 4x8")
    return dims[0], dims[1]


def target_for(chip: str, mesh: str | None = None, assets: Path | None = None) -> Target:
    """The target `chip` stands for, with `mesh` (ROWSxCOLS) when its board allows several shapes.
    A user's descriptor (a path) is one chip unless `mesh` says how many it describes."""
    board = BOARDS.get(chip)
    if board is None:
        shape = parse_mesh(mesh) if mesh else (1, 1)
        return Target(chip=chip, mesh=shape, topology=Topology.SINGLE if shape == (1, 1) else Topology.UNKNOWN)
    shape = parse_mesh(mesh) if mesh else board.meshes[0]
    if shape not in board.meshes:
        allowed = ", ".join(f"{r}x{c}" for r, c in board.meshes)
        raise SystemDescError(f"{chip} has {board.chips} chip(s): it cannot be used as a {shape[0]}x{shape[1]} mesh",
                              f"use --mesh {allowed.replace(', ', ' or --mesh ')}, or another --chip")
    return Target(chip=chip, mesh=shape, topology=_topology(board, assets))


def _topology(board: Board, assets: Path | None) -> Topology:
    if board.chips == 1:
        return Topology.SINGLE
    if board.cluster_yaml is None:
        return Topology.UNKNOWN
    path = _cluster_yaml(board.cluster_yaml, assets)
    if path is None:
        return Topology.UNKNOWN
    return topology_of(links_of(path), board.chips)


def _cluster_yaml(name: str, assets: Path | None) -> Path | None:
    root = assets or find_assets(system_tmpdir())
    if root is None:
        return None
    path = root / CLUSTER_DIR / name
    return path if path.exists() else None


def read_cluster_yaml(cluster_yaml: Path) -> dict:
    """A UMD cluster descriptor as data."""
    return yaml.load(cluster_yaml.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


def ethernet_connections(cluster: dict) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Each ethernet link of a UMD cluster descriptor as ((chip, channel), (chip, channel))."""
    return [((int(a["chip"]), int(a["chan"])), (int(b["chip"]), int(b["chan"])))
            for a, b in cluster.get("ethernet_connections") or []]


def links_of(cluster_yaml: Path) -> dict[tuple[int, int], int]:
    """Ethernet links between chip pairs (lower chip id first) in a UMD cluster descriptor."""
    links: dict[tuple[int, int], int] = {}
    for (a, _), (b, _) in ethernet_connections(read_cluster_yaml(cluster_yaml)):
        if a != b:
            key = (min(a, b), max(a, b))
            links[key] = links.get(key, 0) + 1
    return links


def topology_of(links: dict[tuple[int, int], int], chips: int) -> Topology:
    """A path of all chips is linear, a cycle through all of them a ring, anything else 2d."""
    if chips == 1:
        return Topology.SINGLE
    degree = {c: 0 for c in range(chips)}
    for a, b in links:
        degree[a] = degree.get(a, 0) + 1
        degree[b] = degree.get(b, 0) + 1
    if len(links) == chips - 1 and max(degree.values()) <= 2:
        return Topology.LINEAR
    if len(links) == chips and all(d == 2 for d in degree.values()):
        return Topology.RING
    return Topology.MESH_2D
