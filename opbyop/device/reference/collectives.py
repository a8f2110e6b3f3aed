"""The reference reading of TTNN's collectives (CCL ops) on a mesh: what each op means, computed from
chip coordinates and plain index arithmetic in float64/int64, written apart from the simulator's
collective kernels so that a kernel reading an attribute the wrong way is caught, not copied.

Chips are numbered row-major on a `rows x cols` mesh: chip (r, c) is r * cols + c. A collective over
`cluster_axis` 1 joins the chips of each row (every column, in column order), over axis 0 those of
each column (every row, in row order); without a cluster_axis it joins the whole mesh, row-major.
Each reading takes every chip's operands (values as the reference holds them) and gives every
chip's results; what it cannot read raises Unreadable.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence

import numpy as np

from opbyop.device.program import Op
from opbyop.device.reference.semantics import Unreadable

MeshShape = tuple[int, int]
ChipValues = list[list[np.ndarray | None]]  # per chip (row-major), per operand
Reading = Callable[[Op, MeshShape, ChipValues], list[list[np.ndarray]]]


# -- the mesh as coordinates -------------------------------------------------------------------------
def chip_index(shape: MeshShape, row: int, col: int) -> int:
    rows, cols = shape
    if not (0 <= row < rows and 0 <= col < cols):
        raise Unreadable(f"chip ({row}, {col}) is not on a {rows}x{cols} mesh")
    return row * cols + col


def cluster_groups(op: Op, shape: MeshShape) -> list[list[int]]:
    """The chips a collective joins, group by group, each group in coordinate order."""
    rows, cols = shape
    axis = op.attrs.get("cluster_axis")
    if axis is None:
        return [list(range(rows * cols))]
    if int(axis) == 1:  # a row: same row, every column
        return [[chip_index(shape, r, c) for c in range(cols)] for r in range(rows)]
    if int(axis) == 0:  # a column: same column, every row
        return [[chip_index(shape, r, c) for r in range(rows)] for c in range(cols)]
    raise Unreadable(f"{op.name} over cluster_axis {axis}: a 2D mesh has axes 0 and 1")


# -- operands and attributes ---------------------------------------------------------------------------
def _operand(op: Op, inputs: ChipValues, chip: int, index: int = 0) -> np.ndarray:
    held = inputs[chip]
    if index >= len(held) or held[index] is None:
        raise Unreadable(f"{op.name}: chip {chip} has no operand {index}")
    return np.asarray(held[index])


def _wide(x: np.ndarray) -> np.ndarray:
    """Exact arithmetic: floats in float64, integers and booleans in int64."""
    return x.astype(np.float64) if x.dtype.kind == "f" else x.astype(np.int64)


def _dim(op: Op, rank: int, *names: str) -> int:
    for name in names:
        value = op.attrs.get(name)
        if value is not None:
            d = int(value)  # type: ignore[arg-type]
            if not -rank <= d < rank:
                raise Unreadable(f"{op.name}: {name} {d} is not a dimension of a rank-{rank} tensor")
            return d + rank if d < 0 else d
    raise Unreadable(f"{op.name} without {' or '.join(names)}")


def _pieces(op: Op, x: np.ndarray, n: int, dim: int) -> list[np.ndarray]:
    """`x` cut into n equal consecutive pieces along `dim`: piece k holds indices [k*m, (k+1)*m)."""
    size = x.shape[dim]
    if size % n:
        raise Unreadable(f"{op.name}: dimension {dim} of {x.shape} does not split into {n} equal pieces")
    m = size // n
    return [x[(slice(None),) * dim + (slice(k * m, (k + 1) * m),)] for k in range(n)]


def _ints(value: object) -> list[int]:
    """Integers of an attribute however it was read: a list, `array<i64: 0, 1>`, `[1 : ui32, 2 : ui32]`."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return [i for v in value for i in (_ints(v) if isinstance(v, (list, tuple, np.ndarray)) else [int(v)])]
    return [int(v) for v in re.findall(r"-?\d+", re.sub(r"\b[a-z]+\d+\b", "", str(value)))]  # drop i64, ui32


def _word(value: object) -> str:
    """The keyword of an enum attribute: `#ttcore.reduce_type<sum>` or `sum` -> "sum"."""
    text = str(value).strip().lower()
    m = re.search(r"<\s*(\w+)\s*>\s*$", text)
    return m.group(1) if m else text


# -- reductions (tt-mlir's reduce_type) ---------------------------------------------------------------
_FOLDS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduce(op: Op, values: Sequence[np.ndarray]) -> np.ndarray:
    """The element-wise reduction of the group's operands, in exact arithmetic, in group order. std
    and var are the sample statistics (divided by n - 1), as tt-mlir's golden functions for its CCL
    ops define them."""
    kind = _word(op.attrs.get("reduce_type", "sum"))
    xs = [_wide(v) for v in values]
    if kind in _FOLDS:
        return functools.reduce(_FOLDS[kind], xs)
    if kind not in ("mean", "std", "var"):
        raise Unreadable(f"{op.name} with reduce_type {kind}")
    fs = [x.astype(np.float64) for x in xs]
    mean = functools.reduce(np.add, fs) / len(fs)
    if kind == "mean":
        return mean
    with np.errstate(divide="ignore", invalid="ignore"):  # one chip: 0 / 0, undefined as in tt-mlir's golden
        var = functools.reduce(np.add, [(x - mean) ** 2 for x in fs]) / (len(fs) - 1)
    return var if kind == "var" else np.sqrt(var)


def _per_chip(shape: MeshShape) -> list[list[np.ndarray]]:
    return [[] for _ in range(shape[0] * shape[1])]


# -- the collectives ------------------------------------------------------------------------------------
def all_gather(op: Op, shape: MeshShape, inputs: ChipValues) -> list[list[np.ndarray]]:
    """Every chip of a group gets the group's operands concatenated along all_gather_dim, in group order."""
    out = _per_chip(shape)
    for group in cluster_groups(op, shape):
        parts = [_operand(op, inputs, c) for c in group]
        dim = _dim(op, parts[0].ndim, "all_gather_dim", "dim")
        whole = np.concatenate(parts, axis=dim)
        for c in group:
            out[c] = [whole]
    return out


def all_reduce(op: Op, shape: MeshShape, inputs: ChipValues) -> list[list[np.ndarray]]:
    """Every chip of a group gets the reduction of the group's operands."""
    out = _per_chip(shape)
    for group in cluster_groups(op, shape):
        reduced = _reduce(op, [_operand(op, inputs, c) for c in group])
        for c in group:
            out[c] = [reduced]
    return out


def reduce_scatter(op: Op, shape: MeshShape, inputs: ChipValues) -> list[list[np.ndarray]]:
    """The k-th chip of a group gets the k-th of n equal pieces (along scatter_dim) of the reduction."""
    out = _per_chip(shape)
    for group in cluster_groups(op, shape):
        values = [_operand(op, inputs, c) for c in group]
        dim = _dim(op, values[0].ndim, "scatter_dim", "scatter_dimension", "dim")
        for c, piece in zip(group, _pieces(op, _reduce(op, values), len(group), dim)):
            out[c] = [piece]
    return out


def all_to_all(op: Op, shape: MeshShape, inputs: ChipValues) -> list[list[np.ndarray]]:
    """Each chip of a group cuts its operand into n pieces along split_dim; the k-th chip gets every
    chip's k-th piece, concatenated along concat_dim in group order."""
    out = _per_chip(shape)
    for group in cluster_groups(op, shape):
        values = [_operand(op, inputs, c) for c in group]
        rank = values[0].ndim
        split = _dim(op, rank, "split_dim", "in_dim")
        concat = _dim(op, rank, "concat_dim", "out_dim")
        pieces = [_pieces(op, v, len(group), split) for v in values]
        for k, c in enumerate(group):
            out[c] = [np.concatenate([p[k] for p in pieces], axis=concat)]
    return out


def mesh_partition(op: Op, shape: MeshShape, inputs: ChipValues) -> list[list[np.ndarray]]:
    """The k-th chip of a group keeps the k-th of n equal pieces (along dim) of its own operand:
    all_gather's inverse, nothing sent (TTNN's mesh_partition)."""
    out = _per_chip(shape)
    for group in cluster_groups(op, shape):
        for k, c in enumerate(group):
            x = _operand(op, inputs, c)
            out[c] = [_pieces(op, x, len(group), _dim(op, x.ndim, "dim", "partition_dim"))[k]]
    return out


def _coordinate(op: Op, name: str, shape: MeshShape) -> int:
    items = _ints(op.attrs.get(name))
    if len(items) != 2:
        raise Unreadable(f"{op.name}: {name} {op.attrs.get(name)!r} is not a (row, column) coordinate")
    return chip_index(shape, items[0], items[1])


def point_to_point(op: Op, shape: MeshShape, inputs: ChipValues) -> list[list[np.ndarray]]:
    """The sender's input lands in the receiver's output tensor (the second operand); every other
    chip's output tensor keeps what it held. Without an output tensor the other chips' result is
    not defined: unreadable."""
    sender, receiver = _coordinate(op, "sender_coord", shape), _coordinate(op, "receiver_coord", shape)
    sent = _operand(op, inputs, sender)
    out = _per_chip(shape)
    for chip in range(shape[0] * shape[1]):
        if chip == receiver:
            out[chip] = [sent]
            continue
        held = inputs[chip]
        if len(held) < 2 or held[1] is None:
            raise Unreadable(f"{op.name} without an output tensor: chip {chip}'s result is not defined")
        out[chip] = [np.asarray(held[1])]
    return out


def collective_permute(op: Op, shape: MeshShape, inputs: ChipValues) -> list[list[np.ndarray]]:
    """Each (source, target) pair of device ids (row-major) puts the source's operand on the target;
    a chip no pair targets gets zeros, as StableHLO's collective_permute defines."""
    if op.attrs.get("source_target_pairs") is None:  # a dense attribute the loader does not keep reads as None
        raise Unreadable(f"{op.name} without readable source_target_pairs")
    flat = _ints(op.attrs["source_target_pairs"])
    if len(flat) % 2:
        raise Unreadable(f"{op.name}: source_target_pairs {flat} are not pairs")
    size = shape[0] * shape[1]
    out: list[list[np.ndarray]] = [[np.zeros_like(_operand(op, inputs, c))] for c in range(size)]
    targets: set[int] = set()
    for src, dst in zip(flat[::2], flat[1::2]):
        if not (0 <= src < size and 0 <= dst < size) or dst in targets:
            raise Unreadable(f"{op.name}: pair ({src}, {dst}) on a mesh of {size} chips")
        targets.add(dst)
        out[dst] = [_operand(op, inputs, src)]
    return out


# -- host <-> mesh --------------------------------------------------------------------------------------
Split = Sequence[Sequence[int]]  # per tensor dimension, the axes of the layout that split it, major first


def _positions(layout: Sequence[int]) -> list[tuple[int, ...]]:
    """The positions of a layout (a mesh shape, or a mapper's distribution shape) in row-major order:
    position k is chip k's."""
    return [tuple(int(i) for i in p) for p in np.ndindex(*layout)]


def _block(split: Split, layout: Sequence[int], position: Sequence[int], rank: int) -> list[tuple[int, int]]:
    """(block index, number of blocks) along each tensor dimension at `position`."""
    out = []
    for d in range(rank):
        axes = split[d] if d < len(split) else ()
        index, parts = 0, 1
        for a in axes:
            index, parts = index * layout[a] + position[a], parts * layout[a]
        out.append((index, parts))
    return out


def split_value(full: np.ndarray, split: Split, layout: Sequence[int]) -> list[np.ndarray]:
    """The block of a host value each position of `layout` holds (row-major): tensor dimension d is
    cut into as many equal consecutive blocks as its splitting axes have positions together."""
    full = np.asarray(full)
    out = []
    for position in _positions(layout):
        index = []
        for n, (b, parts) in zip(full.shape, _block(split, layout, position, full.ndim)):
            if n % parts:
                raise Unreadable(f"dimension {len(index)} of {full.shape} does not split into {parts} equal blocks")
            index.append(slice(b * (n // parts), (b + 1) * (n // parts)))
        out.append(full[tuple(index)])
    return out


def assemble_value(blocks: Sequence[np.ndarray], split: Split, layout: Sequence[int]) -> np.ndarray:
    """The host value whose blocks the positions of `layout` hold (row-major); a block several
    positions hold (an axis that splits nothing) is read from the first of them."""
    first = np.asarray(blocks[0])
    where = [_block(split, layout, p, first.ndim) for p in _positions(layout)]
    full = np.zeros(tuple(n * parts for n, (_, parts) in zip(first.shape, where[0])), dtype=first.dtype)
    seen: set[tuple[int, ...]] = set()
    for block, at in zip(blocks, where):
        key = tuple(b for b, _ in at)
        if key in seen:
            continue
        seen.add(key)
        block = np.asarray(block)
        if block.shape != first.shape:
            raise Unreadable(f"blocks of shapes {first.shape} and {block.shape} do not assemble")
        full[tuple(slice(b * n, (b + 1) * n) for n, (b, _) in zip(first.shape, at))] = block
    return full


def _split_of(op: Op, per_axis: Sequence[int], rank: int) -> list[tuple[int, ...]]:
    """Per tensor dimension, the axes whose entry of `per_axis` names it (-1: the axis splits nothing)."""
    for d in per_axis:
        if not -1 <= d < rank:
            raise Unreadable(f"{op.name}: tensor dimension {d} of a rank-{rank} tensor")
    return [tuple(a for a, named in enumerate(per_axis) if named == d) for d in range(rank)]


def mesh_shard(op: Op, shape: MeshShape, inputs: ChipValues) -> list[list[np.ndarray]]:
    """tt-mlir's mesh_shard. shard_type identity: each chip keeps its own tensor (it is already its
    shard); replicate: full_to_shard copies the host tensor to every chip, shard_to_full reads chip
    (0, 0)'s copy; devices: shard_dims names, per mesh axis (rows, columns; right-aligned when it
    names one), the tensor dimension that axis splits (-1: none); full_to_shard gives chip (r, c) its
    block, shard_to_full assembles the full tensor from the blocks."""
    direction = _word(op.attrs.get("shard_direction", ""))
    kind = _word(op.attrs.get("shard_type", ""))
    size = shape[0] * shape[1]
    if direction not in ("full_to_shard", "shard_to_full"):
        raise Unreadable(f"{op.name} with shard_direction {direction or 'missing'}")
    if kind == "identity":
        return [[_operand(op, inputs, c)] for c in range(size)]
    if kind == "replicate":
        source = _operand(op, inputs, 0)
        return [[source if direction == "shard_to_full" else _operand(op, inputs, c)] for c in range(size)]
    if kind != "devices":
        raise Unreadable(f"{op.name} with shard_type {kind or 'missing'}")
    dims = _ints(op.attrs.get("shard_dims") or [])
    if len(dims) not in (1, 2):
        raise Unreadable(f"{op.name}: shard_dims {dims} on a 2D mesh")
    per_axis = [-1, dims[0]] if len(dims) == 1 else dims
    first = _operand(op, inputs, 0)
    split = _split_of(op, per_axis, first.ndim)
    if direction == "full_to_shard":
        return [[b] for b in split_value(first, split, shape)]
    full = assemble_value([_operand(op, inputs, c) for c in range(size)], split, shape)
    return [[full] for _ in range(size)]


_PLACEMENT = re.compile(r"<\s*(replicate|shard)\s*(?:,\s*(-?\d+)[^>]*)?>")
_OVERRIDE = re.compile(r"mesh_shape_override\W+\[([^\]]*)\]")


def distribute_tensor(op: Op, shape: MeshShape, inputs: ChipValues) -> list[list[np.ndarray]]:
    """ttnn.distribute_tensor: the host tensor over the mesh as its mapper_config says. The
    distribution shape (mesh_shape_override, else the mesh) has one placement per axis: replicate, or
    shard tensor dimension d among that axis's positions (axes sharding one dimension nest, the
    earlier major). Positions of the distribution shape go to chips in row-major order."""
    config = str(op.attrs.get("mapper_config", ""))
    placements = [int(d) if kind == "shard" else -1 for kind, d in _PLACEMENT.findall(config)]
    override = _OVERRIDE.search(config)
    layout = _ints("[" + override.group(1) + "]") if override else list(shape)
    if not placements or len(placements) != len(layout) or math.prod(layout) != shape[0] * shape[1]:
        raise Unreadable(f"ttnn.distribute_tensor with mapper {config!r} on a {shape[0]}x{shape[1]} mesh")
    full = _operand(op, inputs, 0)
    split = _split_of(op, placements, full.ndim)
    return [[b] for b in split_value(full, split, layout)]


COLLECTIVES: dict[str, Reading] = {
    "ttnn.all_gather": all_gather, "ttnn.all_reduce": all_reduce, "ttnn.reduce_scatter": reduce_scatter,
    "ttnn.all_to_all": all_to_all, "ttnn.point_to_point": point_to_point,
    "ttnn.collective_permute": collective_permute, "ttnn.mesh_shard": mesh_shard,
    "ttnn.distribute_tensor": distribute_tensor, "ttnn.mesh_partition": mesh_partition,
}
