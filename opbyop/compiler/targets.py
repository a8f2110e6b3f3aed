"""Targets as meshes: which chips a `--chip` name stands for, the mesh shapes it allows, its topology.

A board of several chips is one target: the compiler sees every chip of its system descriptor as a
device and compiles a sharded module for a mesh of them (num_partitions = chips of the mesh). Its
record (opbyop.boards) states the topology; topology_of reads it from a UMD cluster
descriptor's ethernet links (a path: linear; a cycle: ring; anything else: 2d), which is how a
record's topology is checked.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict

from opbyop.boards import BOARDS, Board, Topology, mesh_text, parse_mesh
from opbyop.errors import SystemDescError

__all__ = ["BOARDS", "Board", "Target", "Topology", "ethernet_connections", "links_of", "parse_mesh",
           "read_cluster_yaml", "target_for", "topology_of"]


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
        return mesh_text(self.mesh)


def target_for(chip: str, mesh: str | None = None) -> Target:
    """The target `chip` stands for, with `mesh` (ROWSxCOLS) when its board allows several shapes.
    A user's descriptor (a path) is one chip unless `mesh` says how many it describes."""
    board = BOARDS.get(chip)
    if board is None:
        shape = parse_mesh(mesh) if mesh else (1, 1)
        return Target(chip=chip, mesh=shape, topology=Topology.SINGLE if shape == (1, 1) else Topology.UNKNOWN)
    shape = parse_mesh(mesh) if mesh else board.meshes[0]
    if shape not in board.meshes:
        allowed = " or ".join(f"--mesh {mesh_text(m)}" for m in board.meshes)
        raise SystemDescError(f"{chip} has {board.chips} chip(s): it cannot be used as a {mesh_text(shape)} mesh",
                              f"use {allowed}, or another --chip")
    return Target(chip=chip, mesh=shape, topology=board.topology)


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
