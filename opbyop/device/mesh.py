"""A mesh of simulated chips joined by Ethernet links, and how a global tensor is split over it.

A TTNN program compiled for a mesh is one SPMD program: every chip runs the same ops on its own
shard (`ttcore.shard_status = presharded` on the arguments), and the collectives (all_gather,
reduce_scatter, all_reduce, point_to_point ...) move data between chips. The program names its mesh
(`meshShape = 1x2` on the device, `#ttnn<mesh_shape 1x2>` on get_device); a collective's
`cluster_axis` is a dimension of that mesh (0: rows, 1: columns).

Links: what a collective costs is the bytes crossing the busiest directed link over its
bandwidth, plus the longest route's hops times the per-hop latency. Routes follow the topology:
a line (no wrap), a ring (wraps), a 2D mesh (dimension-ordered, no wrap) or a torus (wraps).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
import numpy as np

from opbyop.boards import Topology
from opbyop.device.arch import DeviceSpec
from opbyop.device.program import split_top
from opbyop.device.tensor import Device
from opbyop.errors import OpbyopError


class MeshError(OpbyopError):
    pass


@dataclass(frozen=True)
class LinkSpec:
    """One direction of the Ethernet connection between two neighbouring chips."""

    bytes_per_cycle: float  # per link, per direction, at the chip's clock
    latency_cycles: int  # one hop: Ethernet subsystem, link and the receiving core
    links: int = 1  # parallel links between two neighbours that a collective uses


# Ethernet figures. Wormhole: 100 Gb/s per link and direction (12.5 GB/s), about 650 ns per hop
# measured by a ring ping over 8 chips (tenstorrent/tt-metal tech_reports/EthernetMultichip/
# BasicEthernetGuide.md, 'Ethernet Link' and 'Ring Ping Latency'); n300 has two links between its
# chips, one reserved for dispatch, so collectives get one (same page, 'N300'). At the 1 GHz AI clock
# (docs.tenstorrent.com/aibs/wormhole/specifications.html) that is 12.5 B/cycle and 650 cycles.
# Blackhole: each Ethernet tile drives one 400 GbE link (50 GB/s per direction; tenstorrent/
# tt-isa-documentation BlackholeA0/EthernetTile/README.md), a QSFP-DD port pairs two of them (800G,
# docs.tenstorrent.com/aibs/blackhole/multi-card-topologies.html). Blackhole's per-hop latency is
# not published: Wormhole's 650 ns is used, at Blackhole's 1.35 GHz clock.
WORMHOLE_LINK = LinkSpec(bytes_per_cycle=100e9 / 8 / 1.0e9, latency_cycles=650)
BLACKHOLE_LINK = LinkSpec(bytes_per_cycle=400e9 / 8 / 1.35e9, latency_cycles=round(650e-9 * 1.35e9))
LINKS = {"wormhole_b0": WORMHOLE_LINK, "blackhole": BLACKHOLE_LINK}


def default_topology(shape: tuple[int, int]) -> Topology:
    """A line for two chips or a 1xN board, a ring for four chips cabled as Tenstorrent validates
    them (a 'ring of four' of p150 cards), a 2D mesh otherwise (T3K 2x4, Galaxy 4x8)."""
    rows, cols = shape
    if rows == 1 or cols == 1:
        return Topology.RING if rows * cols == 4 else Topology.LINEAR
    return Topology.MESH_2D


@dataclass
class Transfer:
    """One logical send: `src` chip to each chip of `dsts` (a multicast forwards once per link)."""

    src: tuple[int, int]
    dsts: list[tuple[int, int]]
    nbytes: int


@dataclass
class Traffic:
    """What a collective put on the links."""

    payload_bytes: int = 0  # bytes the chips sent (each transfer once, whatever its route)
    link_bytes: int = 0  # bytes summed over every directed link they crossed
    busiest_link_bytes: int = 0
    hops: int = 0  # the longest route
    cycles: int = 0


class Mesh:
    """`shape` chips (rows x columns), each a simulated Device with its own DRAM and L1."""

    def __init__(self, spec: DeviceSpec, shape: tuple[int, int], topology: Topology | None = None,
                 link: LinkSpec | None = None):
        rows, cols = shape
        if rows < 1 or cols < 1:
            raise MeshError(f"mesh shape {rows}x{cols} has no chip", "use a shape such as 1x2 or 2x4")
        self.spec = spec
        self.shape = (rows, cols)
        if topology is None or topology in (Topology.SINGLE, Topology.UNKNOWN):  # links not known: the usual cabling
            topology = default_topology(self.shape)
        self.topology: Topology = topology
        if self.topology in (Topology.MESH_2D, Topology.TORUS_2D) and 1 in self.shape and rows * cols > 1:
            self.topology = Topology.RING if self.topology.wraps else Topology.LINEAR
        self.link = link or LINKS.get(spec.arch, WORMHOLE_LINK)
        self.devices = [Device(spec) for _ in range(rows * cols)]
        for device in self.devices[1:]:  # identical chips: an op or a buffer placed on one is placed alike on all
            device.placements = self.devices[0].placements
            device.memory.plans = self.devices[0].memory.plans

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    def coord(self, index: int) -> tuple[int, int]:
        return divmod(index, self.shape[1])

    def index(self, coord: Sequence[int]) -> int:
        r, c = (0, *coord)[-2:] if len(coord) < 2 else coord[-2:]
        return int(r) * self.shape[1] + int(c)

    def groups(self, cluster_axis: int) -> list[list[int]]:
        """Chips that a collective over `cluster_axis` joins: axis 1 joins each row's chips (the
        same row, every column), axis 0 each column's."""
        rows, cols = self.shape
        if cluster_axis == 1:
            return [[r * cols + c for c in range(cols)] for r in range(rows)]
        if cluster_axis == 0:
            return [[r * cols + c for r in range(rows)] for c in range(cols)]
        raise MeshError(f"cluster_axis {cluster_axis} is not an axis of a 2D mesh", "the program names 0 or 1")

    # -- routes and cost -------------------------------------------------------------------
    def _steps(self, a: int, b: int, n: int) -> list[int]:
        """Positions visited going from a to b on one axis of n chips (a excluded)."""
        if a == b:
            return []
        forward = (b - a) % n
        if self.topology.wraps and n > 2:
            step = 1 if forward <= n - forward else -1
        else:
            step = 1 if b > a else -1
        out, p = [], a
        while p != b:
            p = (p + step) % n if self.topology.wraps else p + step
            out.append(p)
        return out

    def route(self, src: tuple[int, int], dst: tuple[int, int]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        """Directed links from src to dst: along the row (columns) first, then along the column."""
        links, here = [], src
        for c in self._steps(src[1], dst[1], self.shape[1]):
            nxt = (here[0], c)
            links.append((here, nxt))
            here = nxt
        for r in self._steps(src[0], dst[0], self.shape[0]):
            nxt = (r, here[1])
            links.append((here, nxt))
            here = nxt
        return links

    def cost(self, transfers: Iterable[Transfer]) -> Traffic:
        load: dict[tuple, int] = {}
        traffic = Traffic()
        for t in transfers:
            crossed: set = set()
            for dst in t.dsts:
                path = self.route(t.src, dst)
                traffic.hops = max(traffic.hops, len(path))
                crossed.update(path)
            traffic.payload_bytes += t.nbytes if t.dsts else 0
            for link in crossed:
                load[link] = load.get(link, 0) + t.nbytes
        traffic.link_bytes = sum(load.values())
        traffic.busiest_link_bytes = max(load.values(), default=0)
        bandwidth = self.link.bytes_per_cycle * max(1, self.link.links)
        traffic.cycles = math.ceil(traffic.busiest_link_bytes / bandwidth) + traffic.hops * self.link.latency_cycles
        return traffic

    def close(self) -> None:
        for d in self.devices:
            d.close()


# -- shardings: which mesh axes split which tensor dimension --------------------------------------
@dataclass(frozen=True)
class Sharding:
    """Per tensor dimension, the mesh axes (0: rows, 1: columns) it is split over, major first.
    No axis anywhere: the tensor is replicated on every chip."""

    dims: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def replicated(cls, rank: int) -> Sharding:
        return cls(tuple(() for _ in range(rank)))

    def local_shape(self, shape: Sequence[int], mesh_shape: tuple[int, int]) -> tuple[int, ...]:
        out = []
        for size, axes in zip(shape, self._padded(len(shape))):
            parts = math.prod(mesh_shape[a] for a in axes)
            if size % parts:
                raise MeshError(f"dimension of {size} does not split into {parts} shards",
                                "shard a dimension the mesh axis divides")
            out.append(size // parts)
        return tuple(out)

    def _padded(self, rank: int) -> tuple[tuple[int, ...], ...]:
        return tuple(self.dims) + tuple(() for _ in range(rank - len(self.dims)))

    def _block(self, coord: tuple[int, int], axes: tuple[int, ...], mesh_shape: tuple[int, int]) -> int:
        index = 0
        for a in axes:  # major axis first
            index = index * mesh_shape[a] + coord[a]
        return index

    def shard(self, value: np.ndarray, mesh_shape: tuple[int, int]) -> list[np.ndarray]:
        """The shard each chip holds, chips in row-major order."""
        value = np.asarray(value)
        local = self.local_shape(value.shape, mesh_shape)
        dims = self._padded(value.ndim)
        blocks: dict[tuple[int, ...], np.ndarray] = {}  # chips holding the same block get the same array
        out = []
        for i in range(mesh_shape[0] * mesh_shape[1]):
            coord = divmod(i, mesh_shape[1])
            block = tuple(self._block(coord, axes, mesh_shape) for axes in dims)
            if block not in blocks:
                blocks[block] = np.ascontiguousarray(value[tuple(slice(b * n, (b + 1) * n) for b, n in zip(block, local))])
            out.append(blocks[block])
        return out

    def gather(self, shards: Sequence[np.ndarray], mesh_shape: tuple[int, int]) -> np.ndarray:
        """The global tensor from every chip's shard (a replicated part is read from the first chip
        that holds it)."""
        return self.gather_with_views(shards, mesh_shape)[0]

    def gather_with_views(self, shards: Sequence[np.ndarray],
                          mesh_shape: tuple[int, int]) -> tuple[np.ndarray, list[np.ndarray]]:
        """The global tensor, and each chip's shard as a view into it where that chip's block was
        read (or the chip holds the very array that was): the shards then cost no memory of their own.
        A chip holding a replicated block in an array of its own keeps that array (it may differ)."""
        first = np.asarray(shards[0])
        dims = self._padded(first.ndim)
        parts = [math.prod(mesh_shape[a] for a in axes) for axes in dims]
        out = np.empty(tuple(n * p for n, p in zip(first.shape, parts)), dtype=first.dtype)
        filled: dict[tuple[int, ...], object] = {}  # block -> the array it was read from
        views: list[np.ndarray] = []
        for i, s in enumerate(shards):
            coord = divmod(i, mesh_shape[1])
            blocks = tuple(self._block(coord, axes, mesh_shape) for axes in dims)
            where = tuple(slice(b * n, (b + 1) * n) for b, n in zip(blocks, first.shape))
            if blocks not in filled:
                filled[blocks] = s
                out[where] = np.asarray(s)
            views.append(out[where] if filled[blocks] is s else np.asarray(s))
        return out, views


_SDY_MESH = re.compile(r"sdy\.mesh @(\w+) = <\[([^\]]*)\]")
_SDY_AXIS = re.compile(r'"(\w+)"=(\d+)')
_SDY_SHARDING = re.compile(r"#sdy\.sharding<@\w+, \[(.*?)\](?:, replicated=\{[^}]*\})?>")


def sdy_mesh_axes(text: str) -> list[tuple[str, int]]:
    """The axes of the module's `sdy.mesh`, in order, e.g. [("x", 2)]."""
    m = _SDY_MESH.search(text)
    return [(n, int(s)) for n, s in _SDY_AXIS.findall(m.group(2))] if m else []


def sdy_to_mesh_axes(axes: list[tuple[str, int]]) -> dict[str, int]:
    """Shardy axis name -> TTNN mesh axis. The compiler right-aligns the module's axes on its 2D
    mesh (one axis ["x"=2] becomes a 1x2 mesh, "x" its columns; ["x"=2, "y"=4] a 2x4 mesh); axes of
    size 1 are dropped first when there are more than two."""
    named = [(n, s) for n, s in axes if s > 1] if len(axes) > 2 else list(axes)
    if len(named) > 2:
        raise MeshError(f"a mesh of {len(named)} axes ({', '.join(n for n, _ in named)}) is not a 2D mesh",
                        "use at most two mesh axes larger than 1")
    return {n: 2 - len(named) + i for i, (n, _) in enumerate(named)}


def parse_sdy_sharding(text: str, axes: dict[str, int]) -> Sharding:
    """`#sdy.sharding<@mesh, [{}, {"x"}]>` (or the `<@mesh, [...]>` of a manual computation)."""
    m = _SDY_SHARDING.search(text) or re.search(r"<@\w+, \[(.*?)\]>", text)
    if m is None:
        raise MeshError(f"not a Shardy sharding: {text[:80]}", "pass a #sdy.sharding<@mesh, [...]> attribute")
    dims = []
    for group in re.findall(r"\{([^}]*)\}", m.group(1)):
        names = re.findall(r'"(\w+)"', group)
        dims.append(tuple(axes[n] for n in names if n in axes))
    return Sharding(tuple(dims))


def infer_sharding(global_shape: Sequence[int], local_shape: Sequence[int], mesh_shape: tuple[int, int]) -> Sharding:
    """A sharding from the shapes alone, when the module does not say: each dimension the program
    holds smaller is split over the mesh axis whose size is the ratio, major dimensions on major
    axes (a 2x2 mesh cannot tell which axis split a dimension: the module's sharding can)."""
    free = [0, 1]
    dims: list[tuple[int, ...]] = []
    for g, n in zip(global_shape, local_shape):
        if g == n:
            dims.append(())
            continue
        ratio = g // max(1, n)
        axis = next((a for a in free if mesh_shape[a] == ratio), None)
        if axis is None and ratio == mesh_shape[0] * mesh_shape[1]:
            dims.append((0, 1))
            free.clear()
            continue
        if axis is None or g != n * ratio:
            raise MeshError(f"a {'x'.join(map(str, local_shape))} shard of a {'x'.join(map(str, global_shape))} "
                            f"tensor does not split over a {mesh_shape[0]}x{mesh_shape[1]} mesh",
                            "give the tensor's sharding")
        free.remove(axis)
        dims.append((axis,))
    return Sharding(tuple(dims))


@dataclass
class ModuleShardings:
    """The shardings a sharded StableHLO module gives its @main arguments and results."""

    mesh_axes: list[tuple[str, int]] = field(default_factory=list)
    inputs: list[Sharding | None] = field(default_factory=list)  # None: the module does not say
    outputs: list[Sharding | None] = field(default_factory=list)


def module_shardings(stablehlo: str) -> ModuleShardings:
    """Read `sdy.sharding` of @main's arguments and results. A result without one takes the
    out_shardings of a top-level `sdy.manual_computation` (shard_map), when there is one."""
    axes = sdy_mesh_axes(stablehlo)
    names = sdy_to_mesh_axes(axes) if axes else {}
    head = re.search(r"func\.func public @main\((.*?)\)\s*->\s*\((.*?)\)\s*\{", stablehlo, re.DOTALL) or \
        re.search(r"func\.func (?:public )?@main\((.*?)\)\s*->\s*\(?(.*?)\)?\s*(?:attributes.*?)?\{", stablehlo, re.DOTALL)
    if head is None:
        raise MeshError("the module has no @main", "pass a StableHLO module with func.func @main")
    args = _split_signature(head.group(1))
    results = _split_signature(head.group(2))

    def sharding(part: str) -> Sharding | None:
        return parse_sdy_sharding(part, names) if "#sdy.sharding" in part else None

    outs = [sharding(r) for r in results]
    manual = re.search(r"sdy\.manual_computation\(.*?out_shardings=\[(.*?)\] manual_axes", stablehlo)
    if manual and any(o is None for o in outs):
        declared = re.findall(r"<@\w+, \[.*?\]>", manual.group(1))
        outs = [o if o is not None or i >= len(declared) else parse_sdy_sharding(declared[i], names)
                for i, o in enumerate(outs)]
    return ModuleShardings(mesh_axes=axes, inputs=[sharding(a) for a in args], outputs=outs)


def _split_signature(text: str) -> list[str]:
    """A signature's tensor arguments (or results), split at its top-level commas."""
    return [p for p in split_top(text) if "tensor<" in p]
