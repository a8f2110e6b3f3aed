"""A reference reading of TTNN programs: what a compiled program means in exact arithmetic,
independent of the simulator's kernels, to tell a wrong lowering from a chip's numerics or a bug in
the simulator."""

from opbyop.device.reference.interpreter import (
    Reading,
    fit,
    read_program,
    unreadable_ops,
)
from opbyop.device.reference.mesh import MeshReading, read_mesh_program
from opbyop.device.reference.semantics import SEMANTICS, Unreadable

__all__ = ["SEMANTICS", "MeshReading", "Reading", "Unreadable", "fit", "read_mesh_program", "read_program",
           "unreadable_ops"]
