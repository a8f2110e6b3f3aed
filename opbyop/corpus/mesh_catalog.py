"""The multichip part of the single-op corpus: each StableHLO collective x dtype x mesh shape x mesh
axis, as a sharded module the compiler must compile for its mesh.

A case is what `jax.jit(shard_map(...))` lowers to: a `sdy.mesh`, an argument with its
`#sdy.sharding`, and a `sdy.manual_computation` holding the one collective on per-chip shapes, its
replica groups those of one mesh axis. Meshes are written as JAX writes them: a 1xN board has one
axis "x"; an RxC mesh has axes "x" (rows) and "y" (columns), and each collective runs along one of
them. Every case carries a numpy reference computed on the global tensor, independent of any
per-chip simulation.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from jaxlib.mlir import ir
from pydantic import BaseModel

from opbyop.atomic import write_text
from opbyop.errors import OpbyopError
from opbyop.ir.context import make_context

# Boards' meshes: p300 and n300 (1x2), 4x p150 (1x4, 2x2), 8x p150 / T3K (2x4, 1x8), Galaxy (4x8).
MESH_SHAPES: tuple[tuple[int, int], ...] = ((1, 2), (1, 4), (2, 2), (1, 8), (2, 4), (4, 8))
DTYPES = ("f32", "bf16", "i32")
_ROWS, _COLS = 32, 64  # a chip's shard: one tile high, two wide


@dataclass(frozen=True)
class MeshCase:
    op: str  # the StableHLO collective, without the dialect
    variant: str  # sum, max ...
    dtype: str
    mesh: tuple[int, int]
    axis: str  # the Shardy axis the collective runs along: "x" or "y"
    local_in: tuple[int, int]
    local_out: tuple[int, int]
    in_axes: tuple[tuple[str, ...], tuple[str, ...]]  # per dimension, the Shardy axes splitting it
    out_axes: tuple[tuple[str, ...], tuple[str, ...]]
    attrs: str
    region: str = ""
    reference: Callable[[np.ndarray], np.ndarray] | None = None

    @property
    def name(self) -> str:
        variant = f"-{self.variant}" if self.variant else ""
        return f"{self.op}{variant}-{self.dtype}-{self.mesh[0]}x{self.mesh[1]}-{self.axis}"

    @property
    def mesh_axes(self) -> list[tuple[str, int]]:
        rows, cols = self.mesh
        return [("x", cols)] if rows == 1 else [("x", rows), ("y", cols)]

    def _global(self, local: tuple[int, int], axes: tuple[tuple[str, ...], ...]) -> tuple[int, ...]:
        size = dict(self.mesh_axes)
        return tuple(n * int(np.prod([size[a] for a in names] or [1])) for n, names in zip(local, axes))

    @property
    def global_in(self) -> tuple[int, ...]:
        return self._global(self.local_in, self.in_axes)

    @property
    def global_out(self) -> tuple[int, ...]:
        return self._global(self.local_out, self.out_axes)

    def render(self) -> str:
        """The case as the sharded StableHLO module JAX would lower."""
        mesh = ", ".join(f'"{n}"={s}' for n, s in self.mesh_axes)
        described = ", ".join(f'{{name = "{n}", size = {s} : i64}}' for n, s in self.mesh_axes)
        manual = ", ".join(f'"{n}"' for n, _ in self.mesh_axes)
        t_in, t_out = _tensor(self.global_in, self.dtype), _tensor(self.global_out, self.dtype)
        l_in, l_out = _tensor(self.local_in, self.dtype), _tensor(self.local_out, self.dtype)
        shard_in, shard_out = _sharding(self.in_axes), _sharding(self.out_axes)
        region = f" ({{\n{self.region}      }})" if self.region else ""
        return (
            f"module @{self.name.replace('-', '_')} attributes {{mhlo.num_partitions = {self.mesh[0] * self.mesh[1]} : i32, "
            f"mhlo.num_replicas = 1 : i32}} {{\n"
            f"  sdy.mesh @mesh = <[{mesh}]> {{stablehlo.mesh = {{axes = [{described}]}}}}\n"
            f"  func.func public @main(%arg0: {t_in} {{sdy.sharding = #sdy.sharding<@mesh, {shard_in}>}}) -> "
            f"({t_out} {{jax.result_info = \"result\", sdy.sharding = #sdy.sharding<@mesh, {shard_out}>}}) {{\n"
            f"    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, {shard_in}>] out_shardings=[<@mesh, {shard_out}>] "
            f"manual_axes={{{manual}}} (%arg1: {l_in}) {{\n"
            f"      %1 = \"stablehlo.{self.op}\"(%arg1) <{{{self.attrs}}}>{region} : ({l_in}) -> {l_out}\n"
            f"      sdy.return %1 : {l_out}\n"
            f"    }} : ({t_in}) -> {t_out}\n"
            f"    return %0 : {t_out}\n"
            f"  }}\n"
            f"}}\n")


def _tensor(shape: tuple[int, ...], dtype: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>"


def _sharding(axes: tuple[tuple[str, ...], ...]) -> str:
    return "[" + ", ".join("{" + ", ".join(f'"{a}"' for a in names) + "}" for names in axes) + "]"


def groups(mesh: tuple[int, int], axis: str) -> list[list[int]]:
    """Device ids (row-major) of the chips a collective along `axis` joins."""
    rows, cols = mesh
    if rows == 1 or axis == "y":
        return [[r * cols + c for c in range(cols)] for r in range(rows)]
    return [[r * cols + c for r in range(rows)] for c in range(cols)]


def _groups_attr(mesh: tuple[int, int], axis: str) -> str:
    g = groups(mesh, axis)
    return f"replica_groups = dense<{g}> : tensor<{len(g)}x{len(g[0])}xi64>"


_CHANNEL = "channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>"


def _region(op: str, dtype: str) -> str:
    t = f"tensor<{dtype}>"
    return (f"      ^bb0(%a: {t}, %b: {t}):\n        %r = stablehlo.{op} %a, %b : {t}\n"
            f"        stablehlo.return %r : {t}\n")


def _blocks(x: np.ndarray, n: int, width: int) -> list[np.ndarray]:
    return [x[:, k * width:(k + 1) * width] for k in range(n)]


def cases_for(mesh: tuple[int, int], dtype: str) -> Iterator[MeshCase]:
    axes = ["x"] if mesh[0] == 1 else ["x", "y"]
    size = {"x": mesh[1]} if mesh[0] == 1 else {"x": mesh[0], "y": mesh[1]}
    for axis in axes:
        other = tuple(a for a in axes if a != axis)
        n = size[axis]
        sharded_in = (other, (axis,))
        replicated_out = (other, ())
        groups_attr = _groups_attr(mesh, axis)
        common = {"dtype": dtype, "mesh": mesh, "axis": axis}
        for variant, body in (("sum", "add"), ("max", "maximum")):
            yield MeshCase("all_reduce", variant, local_in=(_ROWS, _COLS), local_out=(_ROWS, _COLS), in_axes=sharded_in,
                           out_axes=replicated_out, attrs=f"{_CHANNEL}, {groups_attr}, use_global_device_ids",
                           region=_region(body, dtype),
                           reference=(lambda x, n=n: sum(_blocks(x, n, _COLS))) if body == "add" else
                           (lambda x, n=n: np.max(np.stack(_blocks(x, n, _COLS)), axis=0)), **common)
        yield MeshCase("all_gather", "", local_in=(_ROWS, _COLS), local_out=(_ROWS, _COLS * n), in_axes=sharded_in,
                       out_axes=replicated_out,
                       attrs=f"all_gather_dim = 1 : i64, {_CHANNEL}, {groups_attr}, use_global_device_ids",
                       reference=lambda x: x, **common)
        width = _ROWS * n
        yield MeshCase("reduce_scatter", "sum", local_in=(_ROWS, width), local_out=(_ROWS, _ROWS), in_axes=sharded_in,
                       out_axes=sharded_in,
                       attrs=f"{_CHANNEL}, {groups_attr}, scatter_dimension = 1 : i64, use_global_device_ids",
                       region=_region("add", dtype), reference=lambda x, n=n, w=width: sum(_blocks(x, n, w)), **common)
        yield MeshCase("all_to_all", "", local_in=(_ROWS, width), local_out=(width, _ROWS), in_axes=sharded_in,
                       out_axes=sharded_in,
                       attrs=f"{_CHANNEL}, concat_dimension = 0 : i64, {groups_attr}, split_count = {n} : i64, "
                             "split_dimension = 1 : i64",
                       reference=lambda x, n=n: _all_to_all_reference(x, n), **common)
        pairs = [[g[i], g[(i + 1) % len(g)]] for g in groups(mesh, axis) for i in range(len(g))]
        yield MeshCase("collective_permute", "", local_in=(_ROWS, _COLS), local_out=(_ROWS, _COLS), in_axes=sharded_in,
                       out_axes=sharded_in,
                       attrs=f"{_CHANNEL}, source_target_pairs = dense<{pairs}> : tensor<{len(pairs)}x2xi64>",
                       reference=lambda x: np.roll(x, _COLS, axis=1), **common)
        yield MeshCase("collective_broadcast", "", local_in=(_ROWS, _COLS), local_out=(_ROWS, _COLS),
                       in_axes=sharded_in, out_axes=replicated_out, attrs=f"{_CHANNEL}, {groups_attr}",
                       reference=lambda x: x[:, :_COLS], **common)


def _all_to_all_reference(x: np.ndarray, n: int) -> np.ndarray:
    """Chip k gets piece k (columns) of every chip of its group, stacked by source along rows."""
    outer = x.shape[0] // _ROWS
    blocks = x.reshape(outer, _ROWS, n, n, _ROWS)  # [o, r, source j, piece k, c]
    return blocks.transpose(0, 2, 1, 3, 4).reshape(outer * n * _ROWS, n * _ROWS)


def mesh_cases(meshes: list[tuple[int, int]] | None = None, dtypes: list[str] | None = None) -> Iterator[MeshCase]:
    """Every multichip case for the named mesh shapes and dtypes (all by default)."""
    unknown = [d for d in dtypes or [] if d not in DTYPES]
    if unknown:
        raise OpbyopError(f"the multichip corpus has no dtype {', '.join(unknown)}", f"use {', '.join(DTYPES)}")
    small = [m for m in meshes or [] if min(m) < 1 or m[0] * m[1] < 2]
    if small:
        raise OpbyopError(f"mesh {small[0][0]}x{small[0][1]} has fewer than two chips", "use a shape such as 1x2 or 2x4")
    for mesh in meshes or list(MESH_SHAPES):
        for dtype in dtypes or list(DTYPES):
            yield from cases_for(mesh, dtype)


MESH_MANIFEST = "mesh_corpus.json"


class MeshEntry(BaseModel):
    """What one multichip corpus file exercises."""

    file: str
    op: str  # stablehlo.<op>
    variant: str
    dtype: str
    mesh: tuple[int, int]
    axis: str
    global_shape: list[int]  # of the argument


def generate_mesh(out: Path, meshes: list[tuple[int, int]] | None = None,
                  dtypes: list[str] | None = None) -> list[MeshEntry]:
    """Write the selected multichip cases into `out` (created), each parsed and verified with jaxlib's
    MLIR first, and their manifest; returns the entries."""
    out.mkdir(parents=True, exist_ok=True)
    ctx = make_context()
    entries = []
    for case in mesh_cases(meshes, dtypes):
        text = case.render()
        try:
            ir.Module.parse(text, ctx).operation.verify()
        except ir.MLIRError as e:
            raise OpbyopError(f"multichip corpus case {case.name} is not valid StableHLO: {e}",
                              "fix its builder in opbyop/corpus/mesh_catalog.py") from None
        write_text(out / f"{case.name}.mlir", text)
        entries.append(MeshEntry(file=f"{case.name}.mlir", op=f"stablehlo.{case.op}", variant=case.variant,
                                 dtype=case.dtype, mesh=case.mesh, axis=case.axis, global_shape=list(case.global_in)))
    write_text(out / MESH_MANIFEST, json.dumps([e.model_dump() for e in entries], indent=1))
    return entries
