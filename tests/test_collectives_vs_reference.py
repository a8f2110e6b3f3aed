"""Every collective kernel of the mesh simulator (exact arithmetic) against the reference's own
reading of the same TTNN CCL op, on random mesh shapes, cluster axes, dimensions, shapes and dtypes
(hypothesis): a kernel that groups the wrong chips or reads an attribute the wrong way round fails
here, instead of being copied into the reference that judges it."""

from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opbyop.corpus.mesh_catalog import mesh_cases
from opbyop.device.arch import BLACKHOLE_P150
from opbyop.device.kernels.ccl import KERNELS, MeshCall
from opbyop.device.layout import Layout
from opbyop.device.mesh import Mesh, Sharding
from opbyop.device.mesh_runtime import module_shapes
from opbyop.device.program import Op, TensorType
from opbyop.device.reference import Unreadable, fit
from opbyop.device.reference.collectives import (
    COLLECTIVES,
    assemble_value,
    cluster_groups,
    split_value,
)
from opbyop.device.simulator import DeviceSimulator

PROPERTY = settings(max_examples=50, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DTYPES = ("f32", "bf16", "si32")
HOST = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "si32": np.int32}

mesh_shapes = st.tuples(st.integers(1, 4), st.integers(1, 8)).filter(lambda s: s[0] * s[1] >= 2)
axes = st.sampled_from([0, 1, None])


def ttype(shape: tuple[int, ...], dtype: str) -> TensorType:
    return TensorType(tuple(shape), dtype, Layout(tiled=True, dtype=dtype))


def chip_values(draw, n: int, shape: tuple[int, ...], dtype: str, low: int = -4, high: int = 4) -> list[np.ndarray]:
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    if dtype == "si32":
        return [rng.integers(low * 3, high * 3 + 1, shape).astype(np.int32) for _ in range(n)]
    return [rng.uniform(low, high, shape).astype(HOST[dtype]) for _ in range(n)]


def both_readings(name: str, mesh_shape: tuple[int, int], inputs: list[list[np.ndarray]], dtype: str,
                  **attrs) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]]]:
    """(the kernel's results with exact=True, the reference's), per chip, each fitted to `dtype`."""
    op = Op(name=name, operands=list(range(len(inputs[0]))), results=[99],
            operand_types=[ttype(np.shape(x), dtype) for x in inputs[0]], result_types=[None], attrs=attrs)
    kernel, _ = KERNELS[name](MeshCall(op=op, inputs=[list(xs) for xs in inputs], mesh=Mesh(BLACKHOLE_P150, mesh_shape),
                                       exact=True))
    wide = [[fit(np.asarray(x).astype(np.int64 if dtype == "si32" else np.float64), ttype(np.shape(x), dtype))
             for x in xs] for xs in inputs]
    reference = COLLECTIVES[name](op, mesh_shape, wide)

    def fitted(per_chip: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        return [[fit(np.asarray(v), ttype(np.shape(v), dtype)) for v in values] for values in per_chip]

    return fitted(kernel), fitted(reference)


def assert_same(kernel: list[list[np.ndarray]], reference: list[list[np.ndarray]], context: str) -> None:
    assert len(kernel) == len(reference), context
    for chip, (k, r) in enumerate(zip(kernel, reference)):
        assert len(k) == len(r) == 1, f"{context}: chip {chip} has {len(k)} / {len(r)} results"
        assert k[0].shape == r[0].shape, f"{context}: chip {chip} shape {k[0].shape} != reference {r[0].shape}"
        assert np.allclose(k[0], r[0], rtol=1e-9, atol=1e-12, equal_nan=True), (
            f"{context}: chip {chip} differs from the reference, max abs error "
            f"{np.nanmax(np.abs(k[0].astype(np.float64) - r[0].astype(np.float64)))}")


def group_size(mesh_shape: tuple[int, int], axis: int | None) -> int:
    return mesh_shape[0] * mesh_shape[1] if axis is None else mesh_shape[axis]


def split_evenly(shape: tuple[int, ...], dim: int, n: int) -> tuple[int, ...]:
    """`shape` with dimension `dim` made n times longer: it then splits into n equal pieces."""
    return tuple(s * n if i == dim % len(shape) else s for i, s in enumerate(shape))


def attrs_with_axis(axis: int | None, **attrs) -> dict:
    return attrs if axis is None else {**attrs, "cluster_axis": axis}


local_shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)


def test_the_reference_reads_every_collective_the_simulator_runs():
    assert set(KERNELS) == set(COLLECTIVES)


def test_a_collective_over_axis_1_joins_each_row_and_over_axis_0_each_column():
    op = Op(name="ttnn.all_reduce", operands=[0], results=[1], operand_types=[None], result_types=[None],
            attrs={"cluster_axis": 1})
    assert cluster_groups(op, (2, 3)) == [[0, 1, 2], [3, 4, 5]]
    op.attrs["cluster_axis"] = 0
    assert cluster_groups(op, (2, 3)) == [[0, 3], [1, 4], [2, 5]]


@PROPERTY
@given(st.data(), mesh_shapes, axes, local_shapes, st.sampled_from(DTYPES))
def test_all_gather_concatenates_the_groups_shards_like_the_reference(data, mesh_shape, axis, shape, dtype):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    xs = chip_values(data.draw, mesh_shape[0] * mesh_shape[1], shape, dtype)
    context = f"all_gather {mesh_shape} axis {axis} dim {dim} {shape} {dtype}"
    assert_same(*both_readings("ttnn.all_gather", mesh_shape, [[x] for x in xs], dtype,
                               **attrs_with_axis(axis, all_gather_dim=dim)), context)


@PROPERTY
@given(st.data(), mesh_shapes, axes, local_shapes, st.sampled_from(DTYPES),
       st.sampled_from(["sum", "max", "min", "mean", "prod", "std", "var"]))
def test_all_reduce_reduces_each_group_like_the_reference(data, mesh_shape, axis, shape, dtype, kind):
    xs = chip_values(data.draw, mesh_shape[0] * mesh_shape[1], shape, dtype, -2, 2)
    context = f"all_reduce {kind} {mesh_shape} axis {axis} {shape} {dtype}"
    assert_same(*both_readings("ttnn.all_reduce", mesh_shape, [[x] for x in xs], dtype,
                               **attrs_with_axis(axis, reduce_type=kind)), context)


@PROPERTY
@given(st.data(), mesh_shapes, axes, local_shapes, st.sampled_from(DTYPES), st.sampled_from(["sum", "max", "mean"]))
def test_reduce_scatter_gives_each_chip_its_piece_like_the_reference(data, mesh_shape, axis, shape, dtype, kind):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    shape = split_evenly(shape, dim, group_size(mesh_shape, axis))
    xs = chip_values(data.draw, mesh_shape[0] * mesh_shape[1], shape, dtype)
    context = f"reduce_scatter {kind} {mesh_shape} axis {axis} dim {dim} {shape} {dtype}"
    assert_same(*both_readings("ttnn.reduce_scatter", mesh_shape, [[x] for x in xs], dtype,
                               **attrs_with_axis(axis, scatter_dim=dim, reduce_type=kind)), context)


@PROPERTY
@given(st.data(), mesh_shapes, axes, local_shapes, st.sampled_from(DTYPES))
def test_all_to_all_exchanges_pieces_like_the_reference(data, mesh_shape, axis, shape, dtype):
    split = data.draw(st.integers(0, len(shape) - 1))
    concat = data.draw(st.integers(-len(shape), len(shape) - 1))
    shape = split_evenly(shape, split, group_size(mesh_shape, axis))
    xs = chip_values(data.draw, mesh_shape[0] * mesh_shape[1], shape, dtype)
    context = f"all_to_all {mesh_shape} axis {axis} split {split} concat {concat} {shape} {dtype}"
    assert_same(*both_readings("ttnn.all_to_all", mesh_shape, [[x] for x in xs], dtype,
                               **attrs_with_axis(axis, split_dim=split, concat_dim=concat)), context)


@PROPERTY
@given(st.data(), mesh_shapes, axes, local_shapes, st.sampled_from(DTYPES))
def test_mesh_partition_keeps_each_chips_piece_like_the_reference(data, mesh_shape, axis, shape, dtype):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    shape = split_evenly(shape, dim, group_size(mesh_shape, axis))
    xs = chip_values(data.draw, mesh_shape[0] * mesh_shape[1], shape, dtype)
    context = f"mesh_partition {mesh_shape} axis {axis} dim {dim} {shape} {dtype}"
    assert_same(*both_readings("ttnn.mesh_partition", mesh_shape, [[x] for x in xs], dtype,
                               **attrs_with_axis(axis, dim=dim)), context)


@PROPERTY
@given(st.data(), mesh_shapes, local_shapes, st.sampled_from(DTYPES))
def test_point_to_point_moves_the_senders_tensor_like_the_reference(data, mesh_shape, shape, dtype):
    rows, cols = mesh_shape
    sender = [data.draw(st.integers(0, rows - 1)), data.draw(st.integers(0, cols - 1))]
    receiver = [data.draw(st.integers(0, rows - 1)), data.draw(st.integers(0, cols - 1))]
    xs = chip_values(data.draw, rows * cols, shape, dtype)
    outs = chip_values(data.draw, rows * cols, shape, dtype)
    context = f"point_to_point {mesh_shape} {sender} -> {receiver} {shape} {dtype}"
    assert_same(*both_readings("ttnn.point_to_point", mesh_shape, [[x, o] for x, o in zip(xs, outs)], dtype,
                               sender_coord=sender, receiver_coord=receiver), context)


@PROPERTY
@given(st.data(), mesh_shapes, local_shapes, st.sampled_from(DTYPES))
def test_collective_permute_moves_each_source_to_its_target_like_the_reference(data, mesh_shape, shape, dtype):
    size = mesh_shape[0] * mesh_shape[1]
    targets = data.draw(st.permutations(range(size)))
    count = data.draw(st.integers(0, size))
    pairs = [v for src, dst in list(enumerate(targets))[:count] for v in (src, dst)]
    if data.draw(st.booleans()):  # the same pairs nested, [[source, target], ...]
        pairs = [pairs[i:i + 2] for i in range(0, len(pairs), 2)]
    xs = chip_values(data.draw, size, shape, dtype)
    context = f"collective_permute {mesh_shape} pairs {pairs} {shape} {dtype}"
    assert_same(*both_readings("ttnn.collective_permute", mesh_shape, [[x] for x in xs], dtype,
                               source_target_pairs=pairs), context)


def _global_shape(shape: tuple[int, ...], splits: list[tuple[int, int]]) -> tuple[int, ...]:
    """`shape` grown so that each (mesh axis size, tensor dim) in `splits` divides its dimension."""
    return tuple(s * math.prod(n for n, d in splits if d == i) for i, s in enumerate(shape))


@PROPERTY
@given(st.data(), mesh_shapes, local_shapes, st.sampled_from(DTYPES))
def test_mesh_shard_splits_and_assembles_like_the_reference(data, mesh_shape, shape, dtype):
    rank = len(shape)
    shard_dims = [data.draw(st.integers(-1, rank - 1)), data.draw(st.integers(-1, rank - 1))]
    full_shape = _global_shape(shape, list(zip(mesh_shape, shard_dims)))
    size = mesh_shape[0] * mesh_shape[1]
    full = chip_values(data.draw, 1, full_shape, dtype)[0]
    context = f"mesh_shard {mesh_shape} shard_dims {shard_dims} {full_shape} {dtype}"
    to_shards = dict(shard_direction="full_to_shard", shard_type="devices", shard_dims=shard_dims)
    kernel, reference = both_readings("ttnn.mesh_shard", mesh_shape, [[full]] * size, dtype, **to_shards)
    assert_same(kernel, reference, context + " full_to_shard")
    shards = [[s[0].astype(HOST[dtype])] for s in kernel]
    back = dict(to_shards, shard_direction="shard_to_full")
    assert_same(*both_readings("ttnn.mesh_shard", mesh_shape, shards, dtype, **back), context + " shard_to_full")
    for kind in ("replicate", "identity"):
        for direction in ("full_to_shard", "shard_to_full"):
            assert_same(*both_readings("ttnn.mesh_shard", mesh_shape, shards, dtype, shard_direction=direction,
                                       shard_type=kind, shard_dims=[-1]), f"{context} {kind} {direction}")


@PROPERTY
@given(st.data(), mesh_shapes, local_shapes, st.sampled_from(DTYPES))
def test_distribute_tensor_places_the_host_tensor_like_the_reference(data, mesh_shape, shape, dtype):
    """The distribution shape is the mesh's, or mesh_shape_override's: the mesh itself, the mesh
    transposed, or one axis of every chip (TTNN's shard_tensor_to_mesh_mapper); its positions go to
    the chips in row-major order."""
    rows, cols = mesh_shape
    layout = data.draw(st.sampled_from([None, (rows, cols), (cols, rows), (rows * cols,)]))
    sizes = layout or mesh_shape
    dims = [data.draw(st.integers(-1, len(shape) - 1)) for _ in sizes]
    full_shape = _global_shape(shape, list(zip(sizes, dims)))
    full = chip_values(data.draw, 1, full_shape, dtype)[0]
    placements = ", ".join(f"<shard, {d} : i32>" if d >= 0 else "<replicate, -1 : i32>" for d in dims)
    config = {"placements": f"[{placements}]"}
    if layout is not None:
        config["mesh_shape_override"] = "[" + ", ".join(f"{n} : ui32" for n in layout) + "]"
    context = f"distribute_tensor {mesh_shape} {config} {full_shape} {dtype}"
    assert_same(*both_readings("ttnn.distribute_tensor", mesh_shape, [[full]] * (mesh_shape[0] * mesh_shape[1]), dtype,
                               mapper_config=config), context)


@PROPERTY
@given(st.data(), mesh_shapes, local_shapes, st.sampled_from(DTYPES))
def test_a_host_value_splits_and_assembles_over_the_mesh_as_the_simulators_sharding_does(data, mesh_shape, shape,
                                                                                        dtype):
    """The reference's own block arithmetic for a mesh program's inputs and outputs against the
    simulator's Sharding, with axes nesting both ways on one dimension."""
    split: list[tuple[int, ...]] = [() for _ in shape]
    for axis in data.draw(st.permutations([0, 1])):
        d = data.draw(st.integers(-1, len(shape) - 1))
        if d >= 0:
            split[d] = split[d] + (axis,)
    full_shape = tuple(s * math.prod(mesh_shape[a] for a in axes) for s, axes in zip(shape, split))
    full = chip_values(data.draw, 1, full_shape, dtype)[0]
    sharding = Sharding(tuple(split))
    mine, theirs = split_value(full, split, mesh_shape), sharding.shard(full, mesh_shape)
    assert [m.tolist() for m in mine] == [t.tolist() for t in theirs], f"{mesh_shape} {split} {full_shape}"
    assert assemble_value(mine, split, mesh_shape).tolist() == sharding.gather(theirs, mesh_shape).tolist()
    assert assemble_value(mine, split, mesh_shape).tolist() == full.tolist()


# -- real compiled mesh programs ---------------------------------------------------------------------------
DATA = Path(__file__).parent / "data" / "mesh"
PROGRAMS = sorted(p.parent for p in DATA.glob("*/*/ttnn_runtime.mlir") if (p.parent / "stablehlo.mlir").exists())


@pytest.fixture(scope="module")
def simulator():
    sim = DeviceSimulator()
    yield sim
    sim.close()


@pytest.mark.parametrize("case", PROGRAMS, ids=[f"{c.parent.name}-{c.name}" for c in PROGRAMS])
def test_every_compiled_mesh_program_reads_in_the_reference_as_the_numerics_off_mesh_runs_it(case, simulator):
    from opbyop.analysis.attribution import _read, agree

    program, module = (case / "ttnn_runtime.mlir").read_text(), (case / "stablehlo.mlir").read_text()
    corpus = {c.name: c for c in mesh_cases([(2, 4), (4, 8)])}.get(case.name)  # cases of the multichip corpus
    dtype = {"bf16": ml_dtypes.bfloat16, "i32": np.int32}.get(corpus.dtype if corpus else "f32", np.float32)
    rng = np.random.default_rng(1)
    shapes, _ = module_shapes(module)
    inputs = [(rng.integers(-8, 8, s) if dtype is np.int32 else rng.standard_normal(s)).astype(dtype) for s in shapes]
    binary = simulator.load(program)
    simulated, _ = simulator.run_binary(binary, inputs, stablehlo=module, chip_numerics=False)
    reading = _read(binary, inputs, module)
    assert len(simulated) == len(reading.outputs)
    for k, (got, want) in enumerate(zip(simulated, reading.outputs)):
        assert np.shape(got) == np.shape(want), f"output {k}"
        assert agree(np.asarray(got), np.asarray(want)), f"output {k} differs from the reference's reading"


# -- what the reference refuses ------------------------------------------------------------------------
def _op(name: str, **attrs) -> Op:
    return Op(name=name, operands=[0], results=[1], operand_types=[None], result_types=[None], attrs=attrs)


@pytest.mark.parametrize("name, attrs, why", [
    ("ttnn.all_reduce", {"cluster_axis": 2, "reduce_type": "sum"}, "cluster_axis 2"),
    ("ttnn.all_reduce", {"cluster_axis": 1, "reduce_type": "and"}, "reduce_type and"),
    ("ttnn.reduce_scatter", {"cluster_axis": 1, "scatter_dim": 0, "reduce_type": "sum"}, "does not split"),
    ("ttnn.point_to_point", {"sender_coord": [0, 0], "receiver_coord": [0, 1]}, "without an output tensor"),
    ("ttnn.point_to_point", {"sender_coord": [0, 0], "receiver_coord": [1, 1]}, "not on a 1x2 mesh"),
    ("ttnn.collective_permute", {}, "without readable source_target_pairs"),
    ("ttnn.mesh_shard", {"shard_direction": "full_to_shard", "shard_type": "maximal"}, "shard_type maximal"),
    ("ttnn.distribute_tensor", {"mapper_config": "{'placements': '[<shard, 0 : i32>]'}"}, "mapper"),
])
def test_the_reference_says_what_it_cannot_read(name, attrs, why):
    xs = [[np.arange(3.0)], [np.arange(3.0)]]
    with pytest.raises(Unreadable, match=why):
        COLLECTIVES[name](_op(name, **attrs), (1, 2), xs)


def test_the_reference_reading_of_a_mesh_never_loads_the_simulators_collective_kernels():
    import subprocess
    import sys

    probe = ("import sys, opbyop.device.reference, opbyop.device.reference.mesh; "
             "print('opbyop.device.kernels.ccl' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stdout + done.stderr


# -- the kernel defects these readings found -------------------------------------------------------------
def _call(name: str, xs: list[np.ndarray], mesh_shape: tuple[int, int], exact: bool = True, **attrs) -> list:
    out, _ = KERNELS[name](MeshCall(op=_op(name, **attrs), inputs=[[x] for x in xs],
                                    mesh=Mesh(BLACKHOLE_P150, mesh_shape), exact=exact))
    return [values[0] for values in out]


def test_an_identity_mesh_shard_leaves_each_chip_its_own_tensor_in_both_directions():
    xs = [np.full((2, 2), c, np.float32) for c in range(4)]
    for direction in ("full_to_shard", "shard_to_full"):
        out = _call("ttnn.mesh_shard", xs, (2, 2), shard_direction=direction, shard_type="identity", shard_dims=[-1])
        assert [float(o[0, 0]) for o in out] == [0.0, 1.0, 2.0, 3.0], direction


def test_all_reduce_std_and_var_are_the_sample_statistics_tt_mlir_defines():
    xs = [np.array([1.0, 2.0], np.float32), np.array([3.0, 6.0], np.float32)]
    var = _call("ttnn.all_reduce", xs, (1, 2), cluster_axis=1, reduce_type="var")
    std = _call("ttnn.all_reduce", xs, (1, 2), cluster_axis=1, reduce_type="std")
    np.testing.assert_allclose(var[0], [2.0, 8.0])  # (1 - 2)^2 + (3 - 2)^2 over n - 1 = 1
    np.testing.assert_allclose(std[1], np.sqrt([2.0, 8.0]))


def test_an_exact_bf16_reduction_is_summed_in_float64_not_in_bf16():
    big, small = ml_dtypes.bfloat16(256.0), ml_dtypes.bfloat16(1.0)
    xs = [np.array([big], ml_dtypes.bfloat16)] + [np.array([small], ml_dtypes.bfloat16)] * 3
    out = _call("ttnn.all_reduce", xs, (1, 4), cluster_axis=1, reduce_type="sum")
    assert float(out[0][0]) == 259.0  # bf16 steps would round 256 + 1 back to 256 each time


def test_distribute_tensor_over_a_one_axis_override_splits_among_every_chip_in_row_major_order():
    full = np.arange(8.0, dtype=np.float32)
    config = {"placements": "[<shard, 0 : i32>]", "mesh_shape_override": "[4 : ui32]"}
    out = _call("ttnn.distribute_tensor", [full] * 4, (2, 2), mapper_config=config)
    assert [o.tolist() for o in out] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]
