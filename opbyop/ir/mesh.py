"""The device mesh a StableHLO module is sharded over (Shardy's `sdy.mesh`), read from its text.

A module lowered from sharded JAX code, or a model given a tensor-parallel plan, declares
`sdy.mesh @mesh = <["x"=2, "y"=4]>` and `mhlo.num_partitions = 8`: it must be compiled for that many
devices. Read by regular expression so that a compile worker learns it without parsing the module.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, ConfigDict

from opbyop.boards import mesh_boards
from opbyop.errors import OpbyopError

_MESH = re.compile(r'^\s*sdy\.mesh\s+@([\w.$-]+)\s*=\s*<\s*\[([^\]]*)\]', re.M)
_AXIS = re.compile(r'"([^"]+)"\s*=\s*(\d+)')
_PARTITIONS = re.compile(r"mhlo\.num_partitions\s*=\s*(\d+)")
# a sharding attribute or a Shardy op anywhere: the module is sharded even with a trivial mesh
_SHARDED = re.compile(r"#sdy\.sharding|sdy\.manual_computation|sdy\.sharding_constraint|sdy\.reshard")


def axis_sizes(mesh: str) -> dict[str, int]:
    """The axes of an sdy mesh's text (`<["x"=2, "y"=4]>`) and their sizes, in mesh order."""
    return {axis: int(size) for axis, size in _AXIS.findall(mesh)}


class MeshMismatchError(OpbyopError):
    """A sharded module and a target that cannot hold its mesh."""


class ModuleMesh(BaseModel):
    """A module's mesh: its axes (name, size) in order, and how many devices it is compiled for."""

    model_config = ConfigDict(frozen=True)

    name: str = "mesh"
    axes: tuple[tuple[str, int], ...] = ()
    partitions: int = 1  # mhlo.num_partitions (the product of the axes when the module does not say)

    @property
    def devices(self) -> int:
        return max(self.partitions, math.prod(size for _, size in self.axes) if self.axes else 1)

    @property
    def shape(self) -> tuple[int, int]:
        """The mesh of chips the compiler makes of it: one axis N is 1xN, two axes AxB (axes of size 1 dropped)."""
        sizes = [size for _, size in self.axes if size > 1] or [self.devices]
        if len(sizes) == 1:
            return 1, sizes[0]
        return sizes[0], math.prod(sizes[1:])

    def __str__(self) -> str:
        return ",".join(f"{name}={size}" for name, size in self.axes) or f"{self.partitions} devices"


def module_mesh(text: str) -> ModuleMesh | None:
    """The mesh `text` is sharded over; None for a module of one device."""
    meshes = _MESH.findall(text)
    found = _PARTITIONS.search(text)
    partitions = int(found.group(1)) if found else 1
    if not meshes and partitions <= 1:
        return None
    if not meshes:
        return ModuleMesh(name="", axes=(), partitions=partitions)
    name, body = meshes[0]
    axes = tuple(axis_sizes(body).items())
    mesh = ModuleMesh(name=name, axes=axes, partitions=partitions)
    if mesh.devices <= 1 and not _SHARDED.search(text):
        return None
    return mesh


def check_fits(mesh: ModuleMesh | None, target_chips: int, what: str, target: str,
               target_mesh: tuple[int, int] | None = None) -> None:
    """Refuse a sharded module on a target with fewer chips than its mesh, or on a single chip, or
    on a target of as many chips arranged in another shape (the records would name the wrong mesh)."""
    if mesh is None or mesh.devices <= 1:
        return
    if target_chips == 1:
        raise MeshMismatchError(
            f"{what} is sharded over a mesh of {mesh.devices} devices ({mesh}), but {target} is a single chip; "
            "compiled for one chip the compiler would be asked for something else than the model",
            f"pick a mesh target (--chip {', '.join(mesh_boards())}), or pass --unshard to analyse it "
            "on one chip with its shardings removed (recorded as such)")
    if mesh.devices > target_chips:
        raise MeshMismatchError(
            f"{what} is sharded over {mesh.devices} devices ({mesh}), but {target} has {target_chips} chips",
            "pick a target with at least that many chips (--chip / --mesh)")
    if target_mesh is not None and mesh.devices == target_chips and mesh.shape != tuple(target_mesh):
        raise MeshMismatchError(
            f"{what} is sharded over a {mesh.shape[0]}x{mesh.shape[1]} mesh ({mesh}), but the target is {target}",
            f"pass --mesh {mesh.shape[0]}x{mesh.shape[1]} (if the board allows it), or shard the model for the target's mesh")
