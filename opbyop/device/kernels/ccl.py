"""Collectives (TTNN's CCL ops) on a mesh: every chip's operands in, every chip's results out, and
the transfers each one puts on the Ethernet links (the mesh turns them into bytes and cycles).

A collective over `cluster_axis` joins the chips of each row (axis 1) or each column (axis 0) of the
mesh, in coordinate order; its costs follow the algorithms tt-metal's CCL library uses:
all_gather forwards each chip's shard to the others (a multicast: once per link), reduce_scatter
sends each chip the slice it reduces, all_reduce is a reduce_scatter then an all_gather.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from opbyop.device.kernels.base import NotSimulated
from opbyop.device.mesh import Mesh, Sharding, Transfer
from opbyop.device.program import Op


@dataclass
class MeshCall:
    op: Op
    inputs: list[list[np.ndarray | None]]  # per chip (row-major), per operand
    mesh: Mesh
    exact: bool = False  # reduce floats in float64 (the reference reading), not in the chip's f32

    def attr(self, name: str, default: object = None) -> object:
        return self.op.attrs.get(name, default)

    def operand(self, chip: int, index: int = 0) -> np.ndarray:
        value = self.inputs[chip][index]
        if value is None:
            raise NotSimulated(f"{self.op.name}: operand {index} is not a tensor")
        return np.asarray(value)

    def nbytes(self, value: np.ndarray, operand: int = 0) -> int:
        """Bytes of `value` in the format the operand is stored in on the chip (tiles padded)."""
        t = self.op.operand_types[operand] if operand < len(self.op.operand_types) else None
        if t is not None and t.layout is not None:
            return int(t.layout.nbytes(tuple(value.shape)))
        return int(value.nbytes)

    def groups(self) -> list[list[int]]:
        """The chips the op joins, group by group: a point_to_point only its sender and receiver
        (other chips go on with their own ops), a CCL op each row or column of its cluster_axis."""
        if self.op.name == "ttnn.point_to_point":
            ends = [self.mesh.index(_coord(self.attr("sender_coord"))), self.mesh.index(_coord(self.attr("receiver_coord")))]
            return [list(dict.fromkeys(ends))]
        axis = self.attr("cluster_axis")
        if axis is None:
            return [list(range(self.mesh.size))]
        return self.mesh.groups(int(axis))


Result = tuple[list[list[np.ndarray]], list[Transfer]]

_REDUCE: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
    "sum": lambda x, a: np.sum(x, axis=a), "max": lambda x, a: np.max(x, axis=a),
    "min": lambda x, a: np.min(x, axis=a), "mean": lambda x, a: np.mean(x, axis=a),
    "prod": lambda x, a: np.prod(x, axis=a),
    # the sample statistics (divided by n - 1), as tt-mlir's golden functions for its CCL ops define them
    "std": lambda x, a: np.std(x, axis=a, ddof=1), "var": lambda x, a: np.var(x, axis=a, ddof=1),
}


def _reduce(call: MeshCall, values: list[np.ndarray]) -> np.ndarray:
    kind = str(call.attr("reduce_type", "sum")).lower()
    if kind not in _REDUCE:
        raise NotSimulated(f"{call.op.name} with reduce_type {kind}")
    stacked = np.stack([_widened(np.asarray(v), call.exact) for v in values])
    return _REDUCE[kind](stacked, 0)


def _widened(x: np.ndarray, exact: bool) -> np.ndarray:
    """Exact: every float (bf16 too) in float64. Otherwise f32/f64 reduce in the chip's f32 and a
    bf16 stays bf16 (each hop of the chip's reduction packs its partial sum to bf16)."""
    if x.dtype.kind in "iub":
        return x
    if exact:
        return x.astype(np.float64)
    return x.astype(np.float32) if x.dtype.kind == "f" else x


def _dim(call: MeshCall, *names: str) -> int:
    for name in names:
        if call.attr(name) is not None:
            return int(call.attr(name))  # type: ignore[arg-type]
    raise NotSimulated(f"{call.op.name} without {' or '.join(names)}")


def all_gather(call: MeshCall) -> Result:
    out: list[list[np.ndarray]] = [[] for _ in range(call.mesh.size)]
    transfers = []
    for group in call.groups():
        parts = [call.operand(c) for c in group]
        dim = _dim(call, "all_gather_dim", "dim") % parts[0].ndim
        gathered = np.concatenate(parts, axis=dim)
        for c in group:
            out[c] = [gathered]
            others = [call.mesh.coord(o) for o in group if o != c]
            transfers.append(Transfer(call.mesh.coord(c), others, call.nbytes(parts[0])))
    return out, transfers


def _scatter_parts(call: MeshCall, group: list[int], dim: int) -> tuple[list[np.ndarray], list[Transfer]]:
    """Reduce the group's operands and cut the result in one slice per chip along `dim`; each chip
    sends every other chip the slice that chip reduces."""
    reduced = _reduce(call, [call.operand(c) for c in group])
    n = len(group)
    if reduced.shape[dim] % n:
        raise NotSimulated(f"{call.op.name}: dimension {dim} of {reduced.shape} does not split in {n}")
    slices = np.split(reduced, n, axis=dim)
    chunk = call.nbytes(slices[0])
    transfers = [Transfer(call.mesh.coord(src), [call.mesh.coord(dst)], chunk)
                 for src in group for dst in group if src != dst]
    return slices, transfers


def reduce_scatter(call: MeshCall) -> Result:
    out: list[list[np.ndarray]] = [[] for _ in range(call.mesh.size)]
    transfers = []
    for group in call.groups():
        dim = _dim(call, "scatter_dim", "scatter_dimension", "dim") % call.operand(group[0]).ndim
        slices, sent = _scatter_parts(call, group, dim)
        transfers += sent
        for k, c in enumerate(group):
            out[c] = [slices[k]]
    return out, transfers


def all_reduce(call: MeshCall) -> Result:
    out: list[list[np.ndarray]] = [[] for _ in range(call.mesh.size)]
    transfers = []
    for group in call.groups():
        first = call.operand(group[0])
        reduced = _reduce(call, [call.operand(c) for c in group])
        for c in group:
            out[c] = [reduced]
        if len(group) < 2:
            continue
        # reduce_scatter then all_gather, over the dimension with the most elements
        n = len(group)
        chunk = math.ceil(call.nbytes(first) / n)
        transfers += [Transfer(call.mesh.coord(s), [call.mesh.coord(d)], chunk) for s in group for d in group if s != d]
        transfers += [Transfer(call.mesh.coord(s), [call.mesh.coord(d) for d in group if d != s], chunk) for s in group]
    return out, transfers


def mesh_partition(call: MeshCall) -> Result:
    """The inverse of all_gather, with no data moved: each chip keeps the k-th of n equal slices of
    its own operand along `dim`, k its place among the n chips of its group (the chips of its row or
    column along `cluster_axis`, or the whole mesh without one). tt-mlir emits it where a value
    replicated over a mesh axis becomes sharded over it."""
    out: list[list[np.ndarray]] = [[] for _ in range(call.mesh.size)]
    for group in call.groups():
        dim = _dim(call, "dim", "partition_dim") % call.operand(group[0]).ndim
        for k, c in enumerate(group):
            operand = call.operand(c)
            if operand.shape[dim] % len(group):
                raise NotSimulated(f"{call.op.name}: dimension {dim} of {operand.shape} does not split in {len(group)}")
            out[c] = [np.split(operand, len(group), axis=dim)[k]]
    return out, []


def _coord(value: object) -> tuple[int, int]:
    items = [int(v) for v in (value if isinstance(value, (list, tuple)) else str(value).replace(",", " ").split())]
    return (0, *items)[-2:] if len(items) < 2 else (items[-2], items[-1])  # type: ignore[return-value]


def point_to_point(call: MeshCall) -> Result:
    """The sender's first operand lands on the receiver; every other chip keeps its second operand
    (the output tensor the program passes in) or, without one, its own first operand."""
    sender, receiver = _coord(call.attr("sender_coord")), _coord(call.attr("receiver_coord"))
    s, r = call.mesh.index(sender), call.mesh.index(receiver)
    out = []
    for chip in range(call.mesh.size):
        keep = call.inputs[chip][1] if len(call.inputs[chip]) > 1 and call.inputs[chip][1] is not None else call.inputs[chip][0]
        out.append([call.operand(s) if chip == r else np.asarray(keep)])
    return out, [Transfer(sender, [receiver], call.nbytes(call.operand(s)))] if s != r else []


def all_to_all(call: MeshCall) -> Result:
    out: list[list[np.ndarray]] = [[] for _ in range(call.mesh.size)]
    transfers = []
    for group in call.groups():
        split = _dim(call, "split_dim", "in_dim") % call.operand(group[0]).ndim
        concat = _dim(call, "concat_dim", "out_dim") % call.operand(group[0]).ndim
        n = len(group)
        pieces = {c: np.split(call.operand(c), n, axis=split) for c in group}
        for k, c in enumerate(group):
            out[c] = [np.concatenate([pieces[src][k] for src in group], axis=concat)]
        chunk = call.nbytes(pieces[group[0]][0])
        transfers += [Transfer(call.mesh.coord(s), [call.mesh.coord(d)], chunk) for s in group for d in group if s != d]
    return out, transfers


def collective_permute(call: MeshCall) -> Result:
    """Each (source, target) pair sends the source's operand to the target; a chip that is no
    pair's target gets zeros (StableHLO's collective_permute)."""
    pairs = np.asarray(call.attr("source_target_pairs") or [], dtype=np.int64).reshape(-1, 2)
    first = call.operand(0)
    out = [[np.zeros_like(call.operand(c))] for c in range(call.mesh.size)]
    transfers = []
    for src, dst in pairs:
        out[int(dst)] = [call.operand(int(src))]
        if src != dst:
            transfers.append(Transfer(call.mesh.coord(int(src)), [call.mesh.coord(int(dst))], call.nbytes(first)))
    return out, transfers


def mesh_shard(call: MeshCall) -> Result:
    """Host <-> mesh: full_to_shard gives each chip its block (shard_dims names the tensor dimension
    each mesh axis splits, -1 none), shard_to_full assembles the full tensor from the blocks; a
    replicate shard_type copies the whole tensor (full_to_shard) or reads the first chip's copy
    (shard_to_full); an identity one leaves each chip its own tensor. PCIe traffic, not Ethernet: no link is crossed."""
    direction = str(call.attr("shard_direction", "")).lower()
    kind = str(call.attr("shard_type", "")).lower()
    first = call.operand(0)
    if kind == "identity":  # the runtime forwards each chip's tensor, presharded both ways
        return [[call.operand(c)] for c in range(call.mesh.size)], []
    if kind == "replicate":
        if "shard_to_full" in direction:
            return [[first] for _ in range(call.mesh.size)], []
        return [[call.operand(c)] for c in range(call.mesh.size)], []
    axes_dims = [int(d) for d in (call.attr("shard_dims") or [])]
    rank = first.ndim
    dims: list[tuple[int, ...]] = [() for _ in range(rank)]
    for axis, tensor_dim in enumerate(axes_dims[-2:] if len(axes_dims) > 1 else [-1, *axes_dims]):
        if tensor_dim >= 0:
            dims[tensor_dim] = dims[tensor_dim] + (axis,)
    sharding = Sharding(tuple(dims))
    if "full_to_shard" in direction:
        shards = sharding.shard(first, call.mesh.shape)
        return [[s] for s in shards], []
    if "shard_to_full" in direction:
        full = sharding.gather([call.operand(c) for c in range(call.mesh.size)], call.mesh.shape)
        return [[full] for _ in range(call.mesh.size)], []
    raise NotSimulated(f"ttnn.mesh_shard with shard_direction {direction or 'missing'}")


_PLACEMENT = re.compile(r"<\s*(replicate|shard)\s*,\s*(-?\d+)")
_OVERRIDE = re.compile(r"mesh_shape_override\W+\[([^\]]*)\]")


def distribute_tensor(call: MeshCall) -> Result:
    """Host -> mesh for an argument the program takes whole (shard_status unsharded): its mapper
    has one placement per axis of the distribution shape (mesh_shape_override, else the mesh),
    replicate or split tensor dimension d among that axis's positions; the positions go to the
    chips in row-major order (TTNN's row-major distribution when the shape is not the mesh's).
    PCIe traffic: no link is crossed."""
    config = str(call.attr("mapper_config", ""))
    placements = _PLACEMENT.findall(config)
    override = _OVERRIDE.search(config)
    layout = tuple(int(n) for n in re.findall(r"(\d+)(?:\s*:\s*\w+)?", override.group(1))) if override \
        else call.mesh.shape
    if not placements or len(placements) != len(layout) or len(layout) > 2 or math.prod(layout) != call.mesh.size:
        raise NotSimulated(f"ttnn.distribute_tensor with mapper {call.attr('mapper_config')!r}")
    if len(layout) == 1:  # one axis of every chip: a 1xN distribution
        layout, placements = (1, layout[0]), [("replicate", "-1"), *placements]
    first = call.operand(0)
    dims: list[tuple[int, ...]] = [() for _ in range(first.ndim)]
    for axis, (kind, tensor_dim) in enumerate(placements):
        if kind == "shard":
            dims[int(tensor_dim)] = dims[int(tensor_dim)] + (axis,)
    if not any(dims):
        return [[call.operand(c)] for c in range(call.mesh.size)], []
    return [[s] for s in Sharding(tuple(dims)).shard(first, (layout[0], layout[1]))], []


KERNELS: dict[str, Callable[[MeshCall], Result]] = {
    "ttnn.all_gather": all_gather, "ttnn.reduce_scatter": reduce_scatter, "ttnn.all_reduce": all_reduce,
    "ttnn.point_to_point": point_to_point, "ttnn.all_to_all": all_to_all,
    "ttnn.collective_permute": collective_permute, "ttnn.mesh_shard": mesh_shard,
    "ttnn.distribute_tensor": distribute_tensor, "ttnn.mesh_partition": mesh_partition,
}
