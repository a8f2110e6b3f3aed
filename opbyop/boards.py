"""The boards opbyop knows by name, each one record from which everything else about it follows.

A record says how many chips the board has, the mesh shapes they can be used as, how their ethernet
links join them, their architecture, UMD's cluster descriptor of the board and where its system
descriptor comes from. System descriptors (opbyop.compiler.system_desc), targets
(opbyop.compiler.targets), the help texts and error messages that list boards, the board a device
image names (opbyop.device.image) and the links the mesh simulator routes over all read BOARDS:
a new board is one more entry there.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, model_validator

from opbyop.errors import SystemDescError


class Topology(str, Enum):
    """How a target's chips are linked. The values are what records store."""

    SINGLE = "single"  # one chip, no links
    LINEAR = "linear"  # chips on a path: no link from the last back to the first
    RING = "ring"  # a path closed by a link from the last chip to the first
    MESH_2D = "2d"  # rows and columns, no wrap
    TORUS_2D = "torus"  # rows and columns, each closed into a ring
    UNKNOWN = "unknown"  # a user's descriptor: its links are not known to opbyop

    @property
    def wraps(self) -> bool:
        return self in (Topology.RING, Topology.TORUS_2D)

    @classmethod
    def _missing_(cls, value: object) -> Topology | None:
        # the spellings the mesh simulator wrote into device runs before there was one Topology
        legacy = {"mesh2d": cls.MESH_2D, "torus2d": cls.TORUS_2D}
        return legacy.get(value) if isinstance(value, str) else None


class DescriptorSource(str, Enum):
    """Where a board's system descriptor comes from (the values are SystemDesc.source's)."""

    MOCK = "mock"  # the plugin writes it in tt-metal's mock mode, from the board's cluster descriptor
    VENDORED = "vendored"  # carried in configs/system_descs/<board>.ttsys (the mock mode cannot make it)
    DERIVED = "derived"  # re-encoded by opbyop: a mock board's header and layout, every chip another board's


class Board(BaseModel):
    """A board or system opbyop knows by name."""

    model_config = ConfigDict(frozen=True)

    chips: int
    meshes: tuple[tuple[int, int], ...]  # the mesh shapes it can be used as; the first is the default
    topology: Topology = Topology.SINGLE  # what its cluster descriptor's ethernet links make
    arch: str = "blackhole"  # the chips' architecture, as the compiler names it (wormhole_b0 | blackhole)
    cluster_yaml: str  # UMD's cluster descriptor of the board (tt_metal/third_party/umd/...)
    source: DescriptorSource = DescriptorSource.MOCK
    layout_from: str | None = None  # derived: the mock board whose descriptor's header and layout are re-encoded
    chip_from: str | None = None  # derived: the single-chip board whose chip each chip is

    @model_validator(mode="after")
    def _consistent(self) -> Board:
        if not self.meshes or any(r * c != self.chips for r, c in self.meshes):
            raise ValueError(f"every mesh shape of a {self.chips}-chip board must have {self.chips} chips "
                             f"(got {list(self.meshes)}): list shapes ROWSxCOLS with ROWS*COLS = chips")
        if (self.chips == 1) != (self.topology is Topology.SINGLE):
            raise ValueError(f"a {self.chips}-chip board cannot have topology {self.topology.value}: one chip is "
                             "'single', several are linked (linear, ring, 2d or torus, as its cluster descriptor says)")
        derived = self.source is DescriptorSource.DERIVED
        if derived != (self.layout_from is not None and self.chip_from is not None):
            raise ValueError("a derived descriptor needs layout_from (a mock board: the plugin's header) and chip_from "
                             "(a single-chip board of the same arch); other sources take neither")
        return self


DEFAULT_CHIP = "p150"  # the target of every command, flow and configuration that names none

BOARDS: dict[str, Board] = {
    "p150": Board(chips=1, meshes=((1, 1),), cluster_yaml="blackhole_P150.yaml"),
    "p100": Board(chips=1, meshes=((1, 1),), cluster_yaml="blackhole_P100.yaml"),
    "n150": Board(chips=1, meshes=((1, 1),), cluster_yaml="wormhole_N150.yaml", arch="wormhole_b0",
                  source=DescriptorSource.VENDORED),
    "p300": Board(chips=2, meshes=((1, 2),), topology=Topology.LINEAR, cluster_yaml="blackhole_P300_both_mmio.yaml"),
    # UMD's 4xP150 links 0-2-1-3-0: a ring, also as 2x2
    "p150x4": Board(chips=4, meshes=((1, 4), (2, 2)), topology=Topology.RING, cluster_yaml="blackhole_4xP150.yaml"),
    "p150x8": Board(chips=8, meshes=((1, 8), (2, 4)), topology=Topology.MESH_2D, cluster_yaml="blackhole_8xP150.yaml"),
    "bh-galaxy": Board(chips=32, meshes=((4, 8), (8, 4), (1, 32)), topology=Topology.MESH_2D,
                       cluster_yaml="blackhole_galaxy.yaml"),
    # Wormhole meshes: the plugin's mock mode has no Wormhole firmware, opbyop re-encodes them. Their layout
    # comes from the single-chip p150: a mock mesh of as many chips gives the same bytes (a test) but costs
    # the plugin's firmware and fabric builds per chip (minutes for eight chips) instead of seconds.
    "n300": Board(chips=2, meshes=((1, 2),), topology=Topology.LINEAR, cluster_yaml="wormhole_N300.yaml",
                  arch="wormhole_b0", source=DescriptorSource.DERIVED, layout_from="p150", chip_from="n150"),
    "t3k": Board(chips=8, meshes=((2, 4), (1, 8)), topology=Topology.MESH_2D, cluster_yaml="t3k_cluster_desc.yaml",
                 arch="wormhole_b0", source=DescriptorSource.DERIVED, layout_from="p150", chip_from="n150"),
}


def boards_from(source: DescriptorSource) -> list[str]:
    """The boards whose descriptor comes from `source`."""
    return [name for name, board in BOARDS.items() if board.source is source]


def mesh_boards() -> list[str]:
    """The boards of several chips."""
    return [name for name, board in BOARDS.items() if board.chips > 1]


def single_chip_board(arch: str) -> str | None:
    """The board a single chip of `arch` is named as (the first single-chip board of that arch)."""
    return next((name for name, board in BOARDS.items() if board.chips == 1 and board.arch == arch), None)


def mesh_text(shape: tuple[int, int]) -> str:
    return f"{shape[0]}x{shape[1]}"


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


def chip_help() -> str:
    """What --chip accepts: every board, or a descriptor."""
    return f"{', '.join(BOARDS)}, or the path of a .ttsys system descriptor"


def mesh_help(separator: str = "|") -> str:
    """What --mesh accepts: the shapes of each board that allows several."""
    shapes = [f"{name}: {separator.join(mesh_text(m) for m in board.meshes)}"
              for name, board in BOARDS.items() if len(board.meshes) > 1]
    return f"the target's mesh ROWSxCOLS where its board allows several ({', '.join(shapes)})"
