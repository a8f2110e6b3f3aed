"""The multichip part of the corpus target: each collective x dtype x mesh shape x mesh axis of
opbyop.corpus.mesh_catalog, compiled for a board that has that mesh, run on its mesh of simulated
chips, and compared with XLA:CPU running the same sharded module on as many host devices.

A board (`p300`, `p150x4` ...) runs the catalog's cases of every mesh shape it can be used as (or
the one its name says, `p150x8:1x8`): one corpus run per mesh (a selection with that `mesh`).
"""

from __future__ import annotations

from opbyop.compiler.targets import BOARDS, Target, target_for
from opbyop.corpus.mesh_catalog import MESH_SHAPES
from opbyop.errors import OpbyopError


def board_targets(board: str) -> list[Target]:
    """The mesh targets `board` runs: `NAME:ROWSxCOLS` one, a bare name every shape of the catalog it allows."""
    name, _, shape = board.partition(":")
    if name not in BOARDS or BOARDS[name].chips < 2:
        meshes = ", ".join(n for n, b in BOARDS.items() if b.chips > 1)
        raise OpbyopError(f"{name!r} is not a board of several chips", f"name one of {meshes} in the corpus's meshes")
    if shape:
        return [target_for(name, shape)]
    return [target_for(name, f"{r}x{c}") for r, c in BOARDS[name].meshes if (r, c) in MESH_SHAPES]
