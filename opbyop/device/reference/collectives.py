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
def _reduce(op: Op, values: Sequence[np.ndarray]) -> np.ndarray:
    """The element-wise reduction of the group's operands, in exact arithmetic. std and var are the
    sample statistics (divided by n - 1), as tt-mlir's golden functions for its CCL ops define them."""
    kind = _word(op.attrs.get("reduce_type", "sum"))
    xs = [_wide(v) for v in values]
    n = len(xs)
    if kind == "sum":
        out = xs[0].copy()
        for x in xs[1:]:
            out = out + x
        return out
    if kind == "prod":
        out = xs[0].copy()
        for x in xs[1:]:
            out = out * x
        return out
    if kind == "max":
        out = xs[0]
        for x in xs[1:]:
            out = np.maximum(out, x)
        return out
    if kind == "min":
        out = xs[0]
        for x in xs[1:]:
            out = np.minimum(out, x)
        return out
    if kind in ("mean", "std", "var"):
        fs = [x.astype(np.float64) for x in xs]
        mean = sum(fs[1:], fs[0]) / n
        if kind == "mean":
            return mean
        with np.errstate(divide="ignore", invalid="ignore"):
            var = sum(((x - mean) ** 2 for x in fs[1:]), (fs[0] - mean) ** 2) / (n - 1)
        return var if kind == "var" else np.sqrt(var)
    raise Unreadable(f"{op.name} with reduce_type {kind}")


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
def _split_over(op: Op, full: np.ndarray, axes: Sequence[tuple[int, int]], position: Sequence[int]) -> np.ndarray:
    """The block of `full` at `position` of a distribution whose axes are (size, tensor dim or -1):
    the axes that split one tensor dimension nest, the earlier one major."""
    index = [slice(None)] * full.ndim
    for d in range(full.ndim):
        splitting = [(size, pos) for (size, tensor_dim), pos in zip(axes, position) if tensor_dim == d]
        if not splitting:
            continue
        parts = math.prod(size for size, _ in splitting)
        if full.shape[d] % parts:
            raise Unreadable(f"{op.name}: dimension {d} of {full.shape} does not split into {parts} equal blocks")
        block = 0
        for size, pos in splitting:
            block = block * size + pos
        m = full.shape[d] // parts
        index[d] = slice(block * m, (block + 1) * m)
    return full[tuple(index)]


def _checked_dims(op: Op, dims: Sequence[int], rank: int) -> list[int]:
    for d in dims:
        if not -1 <= d < rank:
            raise Unreadable(f"{op.name}: tensor dimension {d} of a rank-{rank} tensor")
    return list(dims)


def mesh_shard(op: Op, shape: MeshShape, inputs: ChipValues) -> list[list[np.ndarray]]:
    """tt-mlir's mesh_shard. shard_type identity: each chip keeps its own tensor (it is already its
    shard); replicate: full_to_shard copies the host tensor to every chip, shard_to_full reads chip
    (0, 0)'s copy; devices: shard_dims names, per mesh axis (rows, columns; right-aligned when it
    names one), the tensor dimension that axis splits (-1: none); full_to_shard gives chip (r, c) its
    block, shard_to_full assembles the full tensor from the blocks (a block several chips hold is
    read from the one with the lowest coordinates)."""
    direction = _word(op.attrs.get("shard_direction", ""))
    kind = _word(op.attrs.get("shard_type", ""))
    rows, cols = shape
    size = rows * cols
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
    row_dim, col_dim = (-1, dims[0]) if len(dims) == 1 else (dims[0], dims[1])
    first = _operand(op, inputs, 0)
    row_dim, col_dim = _checked_dims(op, [row_dim, col_dim], first.ndim)
    axes = [(rows, row_dim), (cols, col_dim)]
    if direction == "full_to_shard":
        return [[_split_over(op, first, axes, divmod(c, cols))] for c in range(size)]
    return [[_assemble(op, inputs, shape, axes)] for _ in range(size)]


def _assemble(op: Op, inputs: ChipValues, shape: MeshShape, axes: Sequence[tuple[int, int]]) -> np.ndarray:
    """The full tensor whose blocks the chips hold (mesh_shard's shard_to_full over devices)."""
    rows, cols = shape
    block = _operand(op, inputs, 0)
    grow = [1] * block.ndim
    for size, d in axes:
        if d >= 0:
            grow[d] *= size
    full = np.zeros(tuple(n * g for n, g in zip(block.shape, grow)), dtype=block.dtype)
    written: set[tuple[int, ...]] = set()
    for r in range(rows):
        for c in range(cols):
            key = tuple(p if d >= 0 else 0 for p, (_, d) in zip((r, c), axes))
            if key in written:
                continue
            written.add(key)
            index = _block_index(block.shape, axes, (r, c))
            full[index] = _operand(op, inputs, chip_index(shape, r, c))
    return full


def _block_index(block_shape: Sequence[int], axes: Sequence[tuple[int, int]], position: Sequence[int]) -> tuple:
    index = []
    for d, n in enumerate(block_shape):
        b = 0
        for (size, tensor_dim), pos in zip(axes, position):
            if tensor_dim == d:
                b = b * size + pos
        index.append(slice(b * n, (b + 1) * n))
    return tuple(index)


_PLACEMENT = re.compile(r"<\s*(replicate|shard)\s*(?:,\s*(-?\d+)[^>]*)?>")
_OVERRIDE = re.compile(r"mesh_shape_override\W+\[([^\]]*)\]")


def distribute_tensor(op: Op, shape: MeshShape, inputs: ChipValues) -> list[list[np.ndarray]]:
    """ttnn.distribute_tensor: the host tensor over the mesh as its mapper_config says. The
    distribution shape (mesh_shape_override, else the mesh) has one placement per axis: replicate, or
    shard tensor dimension d among that axis's positions (axes sharding one dimension nest, the
    earlier major). Positions of the distribution shape go to chips in row-major order."""
    config = str(op.attrs.get("mapper_config", ""))
    placements = [(kind, int(d) if kind == "shard" else -1) for kind, d in _PLACEMENT.findall(config)]
    override = _OVERRIDE.search(config)
    layout = _ints("[" + override.group(1) + "]") if override else list(shape)
    size = shape[0] * shape[1]
    if not placements or len(placements) != len(layout) or math.prod(layout) != size:
        raise Unreadable(f"ttnn.distribute_tensor with mapper {config!r} on a {shape[0]}x{shape[1]} mesh")
    full = _operand(op, inputs, 0)
    tensor_dims = _checked_dims(op, [d for _, d in placements], full.ndim)
    axes = list(zip(layout, tensor_dims))
    out = _per_chip(shape)
    for chip in range(size):
        position, rest = [], chip
        for n in reversed(layout):
            rest, p = divmod(rest, n)
            position.insert(0, p)
        out[chip] = [_split_over(op, full, axes, position)]
    return out


COLLECTIVES: dict[str, Reading] = {
    "ttnn.all_gather": all_gather, "ttnn.all_reduce": all_reduce, "ttnn.reduce_scatter": reduce_scatter,
    "ttnn.all_to_all": all_to_all, "ttnn.point_to_point": point_to_point,
    "ttnn.collective_permute": collective_permute, "ttnn.mesh_shard": mesh_shard,
    "ttnn.distribute_tensor": distribute_tensor,
}
