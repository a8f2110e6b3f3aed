"""The mesh simulator: collectives against numpy, real mesh programs against the unsharded result,
link costs, and per-chip records."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from opbyop.corpus.mesh_catalog import mesh_cases
from opbyop.device.arch import BLACKHOLE_P150, WORMHOLE_N150
from opbyop.device.kernels.ccl import KERNELS as CCL
from opbyop.device.kernels.ccl import MeshCall
from opbyop.device.mesh import (
    Mesh,
    Sharding,
    Topology,
    Transfer,
    infer_sharding,
    module_shardings,
)
from opbyop.device.mesh_runtime import (
    MeshSimulator,
    from_mesh,
    module_shapes,
    submit_mesh,
    to_mesh,
)
from opbyop.device.program import Op, program_mesh_shape
from opbyop.device.runtime import Binary
from opbyop.records import DeviceRun, Status

DATA = Path(__file__).parent / "data" / "mesh"


def _op(name: str, **attrs) -> Op:
    return Op(name=name, operands=[0], results=[1], operand_types=[None], result_types=[None], attrs=attrs)


def _chips(mesh: Mesh, rng: np.random.Generator, shape=(4, 8)) -> list[np.ndarray]:
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(mesh.size)]


@pytest.mark.parametrize("chips", [2, 4])
def test_all_reduce_gives_every_chip_the_sum_of_its_row(chips):
    mesh = Mesh(BLACKHOLE_P150, (1, chips))
    xs = _chips(mesh, np.random.default_rng(0))
    out, transfers = CCL["ttnn.all_reduce"](MeshCall(_op("ttnn.all_reduce", cluster_axis=1, reduce_type="sum"),
                                                     [[x] for x in xs], mesh))
    for chip in range(chips):
        np.testing.assert_allclose(out[chip][0], np.sum(xs, axis=0), rtol=1e-6)
    assert transfers


@pytest.mark.parametrize("chips", [2, 4])
def test_all_gather_concatenates_the_shards_in_chip_order(chips):
    mesh = Mesh(BLACKHOLE_P150, (1, chips))
    xs = _chips(mesh, np.random.default_rng(1))
    out, _ = CCL["ttnn.all_gather"](MeshCall(_op("ttnn.all_gather", all_gather_dim=1, cluster_axis=1),
                                             [[x] for x in xs], mesh))
    for chip in range(chips):
        np.testing.assert_array_equal(out[chip][0], np.concatenate(xs, axis=1))


@pytest.mark.parametrize("axis", [0, 1])
def test_mesh_partition_gives_each_chip_its_slice_along_its_group_and_moves_nothing(axis):
    mesh = Mesh(BLACKHOLE_P150, (2, 4))
    whole = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    xs = [whole + 100 * chip for chip in range(mesh.size)]  # each chip's own copy tells them apart
    out, transfers = CCL["ttnn.mesh_partition"](MeshCall(_op("ttnn.mesh_partition", cluster_axis=axis, dim=0),
                                                         [[x] for x in xs], mesh))
    groups = 2 if axis == 0 else 4
    for chip in range(mesh.size):
        row, col = divmod(chip, 4)
        k = row if axis == 0 else col
        np.testing.assert_array_equal(out[chip][0], np.split(xs[chip], groups, axis=0)[k])
    assert transfers == []


@pytest.mark.parametrize("chips", [2, 4])
def test_reduce_scatter_gives_chip_k_the_kth_slice_of_the_sum(chips):
    mesh = Mesh(BLACKHOLE_P150, (1, chips))
    xs = _chips(mesh, np.random.default_rng(2), shape=(8, 4 * chips))
    out, _ = CCL["ttnn.reduce_scatter"](MeshCall(
        _op("ttnn.reduce_scatter", scatter_dim=1, cluster_axis=1, reduce_type="sum"), [[x] for x in xs], mesh))
    slices = np.split(np.sum(xs, axis=0), chips, axis=1)
    for chip in range(chips):
        np.testing.assert_allclose(out[chip][0], slices[chip], rtol=1e-5)


@pytest.mark.parametrize("chips", [2, 4])
def test_all_to_all_sends_piece_k_of_every_chip_to_chip_k(chips):
    mesh = Mesh(BLACKHOLE_P150, (1, chips))
    xs = _chips(mesh, np.random.default_rng(3), shape=(4 * chips, 8))
    out, _ = CCL["ttnn.all_to_all"](MeshCall(_op("ttnn.all_to_all", split_dim=0, concat_dim=1, cluster_axis=1),
                                             [[x] for x in xs], mesh))
    for k in range(chips):
        np.testing.assert_array_equal(out[k][0], np.concatenate([np.split(x, chips, 0)[k] for x in xs], axis=1))


@pytest.mark.parametrize("chips", [2, 4])
def test_point_to_point_lands_on_the_receiver_and_others_keep_their_output_tensor(chips):
    mesh = Mesh(BLACKHOLE_P150, (1, chips))
    xs, keep = _chips(mesh, np.random.default_rng(4)), _chips(mesh, np.random.default_rng(5))
    out, transfers = CCL["ttnn.point_to_point"](MeshCall(
        _op("ttnn.point_to_point", sender_coord=[0, 0], receiver_coord=[0, chips - 1]),
        [[x, k] for x, k in zip(xs, keep)], mesh))
    np.testing.assert_array_equal(out[chips - 1][0], xs[0])
    for chip in range(chips - 1):
        np.testing.assert_array_equal(out[chip][0], keep[chip])
    assert [t.dsts for t in transfers] == [[(0, chips - 1)]]


@pytest.mark.parametrize("chips", [2, 4])
def test_collective_permute_moves_each_source_to_its_target_and_zeros_the_rest(chips):
    mesh = Mesh(BLACKHOLE_P150, (1, chips))
    xs = _chips(mesh, np.random.default_rng(6))
    out, _ = CCL["ttnn.collective_permute"](MeshCall(
        _op("ttnn.collective_permute", source_target_pairs=[0, 1]), [[x] for x in xs], mesh))
    np.testing.assert_array_equal(out[1][0], xs[0])
    assert not out[0][0].any()


def test_mesh_shard_splits_and_reassembles_a_tensor_on_a_2x2_mesh():
    mesh = Mesh(BLACKHOLE_P150, (2, 2))
    full = np.arange(8 * 8, dtype=np.float32).reshape(8, 8)
    op = _op("ttnn.mesh_shard", shard_direction="full_to_shard", shard_type="devices", shard_dims=[0, 1],
             shard_shape=[2, 2])
    shards, _ = CCL["ttnn.mesh_shard"](MeshCall(op, [[full]] * 4, mesh))
    np.testing.assert_array_equal(shards[1][0], full[:4, 4:])  # chip (0, 1): rows block 0, columns block 1
    back = _op("ttnn.mesh_shard", shard_direction="shard_to_full", shard_type="devices", shard_dims=[0, 1],
               shard_shape=[2, 2])
    gathered, _ = CCL["ttnn.mesh_shard"](MeshCall(back, shards, mesh))
    np.testing.assert_array_equal(gathered[3][0], full)


def test_a_2d_mesh_reduces_along_the_named_axis_only():
    mesh = Mesh(BLACKHOLE_P150, (2, 2))
    xs = _chips(mesh, np.random.default_rng(7))
    out, _ = CCL["ttnn.all_reduce"](MeshCall(_op("ttnn.all_reduce", cluster_axis=0, reduce_type="max"),
                                             [[x] for x in xs], mesh))
    np.testing.assert_array_equal(out[1][0], np.maximum(xs[1], xs[3]))  # column 1: chips (0,1) and (1,1)
    np.testing.assert_array_equal(out[2][0], np.maximum(xs[0], xs[2]))


# -- link costs --------------------------------------------------------------------------------------
def test_collective_cycles_grow_with_bytes_and_hops():
    mesh = Mesh(BLACKHOLE_P150, (1, 8), Topology.LINEAR)
    near = mesh.cost([Transfer((0, 0), [(0, 1)], 1 << 16)])
    far = mesh.cost([Transfer((0, 0), [(0, 7)], 1 << 16)])
    big = mesh.cost([Transfer((0, 0), [(0, 1)], 1 << 20)])
    assert (near.hops, far.hops) == (1, 7)
    assert far.cycles > near.cycles and big.cycles > near.cycles
    assert far.link_bytes == 7 * near.link_bytes and far.payload_bytes == near.payload_bytes


def test_a_ring_reaches_the_last_chip_in_one_hop_and_a_line_does_not():
    line = Mesh(BLACKHOLE_P150, (1, 4), Topology.LINEAR)
    ring = Mesh(BLACKHOLE_P150, (1, 4), Topology.RING)
    send = [Transfer((0, 3), [(0, 0)], 4096)]
    assert (line.cost(send).hops, ring.cost(send).hops) == (3, 1)
    assert ring.cost(send).cycles < line.cost(send).cycles


def test_the_same_all_gather_costs_less_on_a_ring_and_on_faster_links():
    rng = np.random.default_rng(8)
    costs = {}
    for name, spec, topology in [("line", BLACKHOLE_P150, Topology.LINEAR), ("ring", BLACKHOLE_P150, Topology.RING),
                                 ("wormhole ring", WORMHOLE_N150, Topology.RING)]:
        mesh = Mesh(spec, (1, 8), topology)
        xs = _chips(mesh, rng, shape=(64, 64))
        _, transfers = CCL["ttnn.all_gather"](MeshCall(_op("ttnn.all_gather", all_gather_dim=0, cluster_axis=1),
                                                       [[x] for x in xs], mesh))
        costs[name] = mesh.cost(transfers).cycles
    assert costs["ring"] < costs["line"]
    assert costs["ring"] < costs["wormhole ring"]  # 400 GbE links against 100 GbE


def test_a_torus_wraps_both_axes_of_a_2d_mesh():
    mesh2d = Mesh(BLACKHOLE_P150, (4, 8), Topology.MESH_2D)
    torus = Mesh(BLACKHOLE_P150, (4, 8), Topology.TORUS_2D)
    send = [Transfer((0, 0), [(3, 7)], 2048)]
    assert (mesh2d.cost(send).hops, torus.cost(send).hops) == (10, 2)


# -- shardings ---------------------------------------------------------------------------------------
def test_a_sharding_splits_and_gathers_a_tensor_over_a_2x2_mesh():
    full = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)
    sharding = Sharding(((0,), (1,)))
    shards = sharding.shard(full, (2, 2))
    assert shards[1].shape == (2, 3)
    np.testing.assert_array_equal(shards[2], full[2:, :3])
    np.testing.assert_array_equal(sharding.gather(shards, (2, 2)), full)
    assert infer_sharding((4, 6), (2, 3), (2, 2)) in (Sharding(((0,), (1,))), Sharding(((1,), (0,))))


def test_shardy_shardings_of_a_jax_module_map_onto_the_programs_mesh():
    text = (DATA / "4xp150" / "mesh2d_matmul" / "stablehlo.mlir").read_text()
    declared = module_shardings(text)
    assert declared.mesh_axes == [("x", 2), ("y", 2)]
    assert declared.inputs[0] == Sharding(((0,), (1,)))
    one_axis = module_shardings((DATA / "p300" / "matmul_allreduce" / "stablehlo.mlir").read_text())
    assert one_axis.inputs[0] == Sharding(((), (1,)))  # ["x"=2] is the 1x2 mesh's columns
    assert program_mesh_shape((DATA / "p300" / "psum" / "ttnn_runtime.mlir").read_text()) == (1, 2)


# -- real programs -----------------------------------------------------------------------------------
def _blocks(a, n, axis):
    return np.split(a, n, axis=axis)


def _tp_mlp(x, w1, b1, w2, g):
    """gelu(x @ w1 + b1) @ w2 + x, rms-normalised: the tensor-parallel MLP of tests/data/mesh/*/tp_mlp."""
    h = x @ w1 + b1
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    y = x + h @ w2
    return y / np.sqrt(np.mean(y * y, axis=-1, keepdims=True) + 1e-6) * g


_REFERENCE = {
    "tp_mlp": lambda x, n: _tp_mlp(*[v.astype(np.float64) for v in x]),
    "matmul_allreduce": lambda x, n: np.tanh(x[0] @ x[1]), "gspmd_matmul": lambda x, n: x[0] @ x[1],
    "mesh2d_matmul": lambda x, n: x[0] @ x[1],
    "add_gather_out": lambda x, n: x[0] + x[1], "add_sharded": lambda x, n: x[0] * x[1] + 1,
    "psum": lambda x, n: sum(_blocks(x[0], n, 0)), "pmax": lambda x, n: np.max(np.stack(_blocks(x[0], n, 0)), 0),
    "all_gather": lambda x, n: x[0], "psum_scatter": lambda x, n: sum(_blocks(x[0], n, 1)),
    "ppermute": lambda x, n: np.roll(x[0], x[0].shape[0] // n, axis=0), "all_to_all": lambda x, n: x[0],
    "mesh2d_psum_y": lambda x, n: np.concatenate([sum(_blocks(r, 2, 1)) for r in _blocks(x[0], 2, 0)], 0),
    "mesh2d_all_gather_x": lambda x, n: x[0],
}
_CASES = sorted(p.parent for p in DATA.glob("*/*/ttnn_runtime.mlir"))


@pytest.fixture(scope="module")
def simulator():
    sim = MeshSimulator()
    yield sim
    sim.close()


@pytest.mark.parametrize("case", _CASES, ids=[f"{c.parent.name}-{c.name}" for c in _CASES])
def test_a_compiled_mesh_program_matches_the_unsharded_numpy_result(case, simulator):
    program, module = (case / "ttnn_runtime.mlir").read_text(), (case / "stablehlo.mlir").read_text()
    chips = {"p300": 2, "4xp150": 4, "8xp150": 8, "galaxy": 32}[case.parent.name]
    shapes, _ = module_shapes(module)
    rng = np.random.default_rng(0)
    corpus = {c.name: c for c in mesh_cases([(2, 4), (4, 8)])}.get(case.name)  # cases of the multichip corpus
    dtype = {"bf16": ml_dtypes.bfloat16, "i32": np.int32}.get(corpus.dtype if corpus else "f32", np.float32)
    inputs = [(rng.integers(-8, 8, s) if dtype is np.int32 else rng.standard_normal(s)).astype(dtype) for s in shapes]
    result = simulator.run(program, inputs, stablehlo=module)
    want = corpus.reference(inputs[0].astype(np.float64)) if corpus else _REFERENCE[case.name](inputs, chips)
    got = np.asarray(result.outputs[0], dtype=np.float64)
    assert got.shape == want.shape
    assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.9999
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=0.15)  # matmuls carry the chip's numerics
    run = result.run
    assert len(run.chip_peak_dram_bytes) == run.mesh_shape[0] * run.mesh_shape[1] == chips
    assert all(b > 0 for b in run.chip_peak_dram_bytes)
    if run.collectives:
        assert run.collective_bytes > 0 and run.collective_cycles > 0 and run.cycles > max(c.cycles for c in run.collectives)
        assert 0 < run.collective_seconds < run.seconds  # the simulator's own time in them, part of the run's


def test_a_mesh_run_records_each_collective_with_its_bytes_and_survives_a_json_round_trip(simulator):
    case = DATA / "p300" / "matmul_allreduce"
    rng = np.random.default_rng(1)
    shapes, _ = module_shapes((case / "stablehlo.mlir").read_text())
    result = simulator.run((case / "ttnn_runtime.mlir").read_text(),
                           [rng.standard_normal(s).astype(np.float32) for s in shapes],
                           stablehlo=(case / "stablehlo.mlir").read_text())
    (collective,) = result.run.collectives
    assert (collective.op, collective.cluster_axis, collective.group_size) == ("ttnn.all_reduce", 1, 2)
    assert collective.payload_bytes == 2 * 2 * (32 * 64 * 4) // 2  # reduce-scatter then gather halves
    assert result.run.mesh_shape == [1, 2] and result.run.topology == "linear"
    assert DeviceRun.model_validate_json(result.run.model_dump_json()) == result.run


def test_submitting_to_a_mesh_of_another_shape_is_refused():
    binary = Binary.load((DATA / "p300" / "psum" / "ttnn_runtime.mlir").read_text())
    mesh = Mesh(binary.program.spec, (1, 4))
    x = to_mesh(np.zeros((128, 64), np.float32), mesh, Sharding(((1,), ())))
    with pytest.raises(Exception, match="compiled for a 1x2 mesh"):
        submit_mesh(mesh, binary, 0, [x])


def test_tensors_pushed_to_a_mesh_come_back_whole():
    mesh = Mesh(BLACKHOLE_P150, (2, 2))
    full = np.random.default_rng(9).standard_normal((64, 64)).astype(np.float32)
    sharding = Sharding(((0,), (1,)))
    tensors = to_mesh(full, mesh, sharding)
    assert [t.shape for t in tensors] == [(32, 32)] * 4
    assert all(t.device is d for t, d in zip(tensors, mesh.devices))
    np.testing.assert_array_equal(from_mesh(tensors, mesh, sharding), full)


def test_chips_holding_the_same_block_share_its_stored_values_but_each_has_its_own_buffer():
    mesh = Mesh(BLACKHOLE_P150, (2, 2))
    full = np.random.default_rng(11).standard_normal((64, 64)).astype(np.float32)
    rows = to_mesh(full, mesh, Sharding(((0,), ())))  # split over the rows, replicated along each row
    assert rows[0].values is rows[1].values and rows[2].values is rows[3].values
    assert rows[0].values is not rows[2].values
    np.testing.assert_array_equal(rows[2].values, full[32:])
    assert len({id(t.buffer) for t in rows}) == 4
    assert all(sum(d.memory.dram.used) == rows[0].buffer.nbytes for d in mesh.devices)
    np.testing.assert_array_equal(from_mesh(rows, mesh, Sharding(((0,), ()))), full)


def test_a_const_eval_function_runs_once_for_the_whole_mesh_and_every_chip_caches_its_result():
    case = DATA / "p300" / "add_sharded"  # @main_const_eval_0 makes the constant 1 the program adds
    binary = Binary.load((case / "ttnn_runtime.mlir").read_text())
    mesh = Mesh(binary.program.spec, binary.program.mesh_shape)
    rng = np.random.default_rng(13)
    x, y = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    sharding = Sharding(((1,), ()))
    inputs = [to_mesh(v, mesh, sharding) for v in (x, y)]
    runs = [submit_mesh(mesh, binary, 0, inputs)[0] for _ in range(2)]
    constants = [list(d.const_cache.values()) for d in mesh.devices]
    assert [len(c) for c in constants] == [1, 1]  # the second run found it cached on both chips
    first, second = (c[0].results[0] for c in constants)
    assert first.values is second.values and first.buffer is not second.buffer  # computed once, two buffers
    for outputs in runs:
        np.testing.assert_allclose(from_mesh(outputs[0], mesh, sharding), x * y + 1, rtol=1e-6)
    for tensors in [*inputs, *(o for outputs in runs for o in outputs)]:
        for t in tensors:
            t.device.release(t)
    for device in mesh.devices:
        device.release_constants()
        assert sum(device.memory.dram.used) == 0 and sum(device.memory.l1.used) == 0


@pytest.mark.parametrize("name", ["psum", "psum_scatter"])
def test_a_mesh_runs_outputs_come_back_once_each_chips_shard_a_view_into_the_gathered_value(name, simulator):
    # a replicated output (psum: every chip takes the all_reduce's one result) is copied to the host
    # once; a sharded one (psum_scatter) is gathered, and each chip's shard is its block of it
    case = DATA / "4xp150" / name
    module = (case / "stablehlo.mlir").read_text()
    shapes, _ = module_shapes(module)
    x = np.random.default_rng(12).standard_normal(shapes[0]).astype(np.float32)
    result = simulator.run((case / "ttnn_runtime.mlir").read_text(), [x], stablehlo=module)
    whole, chips = result.outputs[0], result.chip_outputs[0]
    assert len(chips) == 4 and all(np.shares_memory(c, whole) for c in chips)
    want = sum(np.split(x, 4, axis=1 if name == "psum_scatter" else 0))
    np.testing.assert_allclose(whole, want, rtol=1e-5, atol=1e-5)


def test_the_device_simulator_runs_a_mesh_program_on_global_inputs():
    from opbyop.device.simulator import DeviceSimulator

    case = DATA / "4xp150" / "psum_scatter"
    simulator = DeviceSimulator()
    binary = simulator.load((case / "ttnn_runtime.mlir").read_text())
    x = np.random.default_rng(10).standard_normal((128, 128)).astype(np.float32)
    try:
        (out,), run = simulator.run_binary(binary, [x], stablehlo=(case / "stablehlo.mlir").read_text())
    finally:
        simulator.close()
    np.testing.assert_allclose(out, sum(np.split(x, 4, axis=1)), rtol=1e-5, atol=1e-5)
    assert run.mesh_shape == [1, 4] and run.topology == "ring"
    assert [c.op for c in run.collectives] == ["ttnn.reduce_scatter"]


def test_a_whole_sharded_model_runs_stitched_on_its_mesh_with_weights_pushed_once():
    from opbyop.device.runtime import open_device
    from opbyop.device.stitch import run_stitched

    case = DATA / "p300" / "matmul_allreduce"
    binary = Binary.load((case / "ttnn_runtime.mlir").read_text())
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((32, 128)).astype(np.float32) / 8, rng.standard_normal((128, 64)).astype(np.float32) / 8
    run = run_stitched(open_device(binary.program.spec), binary, [x, w], parameters=[1], iterations=3,
                       stablehlo=(case / "stablehlo.mlir").read_text())
    assert np.corrcoef(run.outputs[0].ravel(), np.tanh(x @ w).ravel())[0, 1] > 0.9999
    assert run.weight_transfers.to_device_tensors == 2  # one shard per chip, once
    assert [t.to_device_tensors for t in run.iteration_transfers] == [2, 2, 2]  # only x's shards move
    assert run.steady.collective_bytes > 0 and len(run.steady.chip_peak_dram_bytes) == 2


def test_point_to_points_between_disjoint_chips_overlap_in_the_runs_cycles(simulator):
    case = DATA / "8xp150" / "collective_permute-f32-2x4-x"  # each column's two chips swap: 4 disjoint pairs
    x = np.random.default_rng(12).standard_normal((128, 128)).astype(np.float32)
    run = simulator.run((case / "ttnn_runtime.mlir").read_text(), [x],
                        stablehlo=(case / "stablehlo.mlir").read_text()).run
    assert [c.group_size for c in run.collectives] == [2] * 8
    compute = sum(p.cycles for p in run.placements)  # one chip's own ops
    each = run.collectives[0].cycles
    assert run.cycles == compute + 2 * each  # a chip waits for its own two transfers, not all eight


def test_a_mesh_program_run_without_its_module_says_the_results_need_the_shardings(simulator):
    from opbyop.device.mesh import MeshError

    case = DATA / "p300" / "psum_scatter"
    with pytest.raises(MeshError, match="pass the StableHLO module"):
        simulator.run((case / "ttnn_runtime.mlir").read_text(), [np.zeros((64, 64), np.float32)])


@pytest.mark.parametrize("board", ["p300", "8xp150"])
def test_a_tensor_parallel_mlp_runs_whole_and_stitched_on_its_mesh(board):
    """Columns of w1 and rows of w2 split over the chips (and the batch over the rows of a 2x4 mesh):
    weights pushed once as shards, one all_reduce per step, the result the unsharded model's."""
    from opbyop.device.runtime import open_device
    from opbyop.device.stitch import run_stitched

    case = DATA / board / "tp_mlp"
    module = (case / "stablehlo.mlir").read_text()
    binary = Binary.load((case / "ttnn_runtime.mlir").read_text())
    rng = np.random.default_rng(13)
    values = [(rng.standard_normal(s) / np.sqrt(s[0] if len(s) > 1 else 1)).astype(np.float32)
              for s in module_shapes(module)[0]]
    run = run_stitched(open_device(binary.program.spec), binary, values, parameters=[1, 2, 3, 4], iterations=2,
                       stablehlo=module)
    want = _tp_mlp(*[v.astype(np.float64) for v in values])
    assert np.corrcoef(run.outputs[0].ravel(), want.ravel())[0, 1] > 0.99999
    chips = {"p300": 2, "8xp150": 8}[board]
    assert run.weight_transfers.to_device_tensors == 4 * chips
    assert [t.to_device_tensors for t in run.iteration_transfers] == [chips, chips]  # x's shards only
    assert [c.op for c in run.steady.collectives] == ["ttnn.all_reduce"]
    assert len(set(run.steady.chip_peak_dram_bytes)) == 1 and len(run.steady.chip_peak_dram_bytes) == chips


@pytest.mark.parametrize("case", ["8xp150/tp_mlp", "p300/matmul_allreduce", "4xp150/mesh2d_matmul"])
def test_chips_sharing_their_common_work_give_the_values_cycles_and_peaks_of_chips_run_in_full(case):
    program, module = (DATA / case / "ttnn_runtime.mlir").read_text(), (DATA / case / "stablehlo.mlir").read_text()
    shapes, _ = module_shapes(module)
    inputs = [np.random.default_rng(3).standard_normal(s).astype(np.float32) for s in shapes]
    shared, full = MeshSimulator(), MeshSimulator(share=False)
    try:
        a, b = shared.run(program, inputs, stablehlo=module), full.run(program, inputs, stablehlo=module)
    finally:
        shared.close()
        full.close()
    for x, y in zip(a.outputs, b.outputs):
        np.testing.assert_array_equal(x, y)
    assert a.run.cycles == b.run.cycles and a.run.ttnn_ops == b.run.ttnn_ops
    assert a.run.chip_peak_dram_bytes == b.run.chip_peak_dram_bytes and a.run.chip_peak_l1_bytes == b.run.chip_peak_l1_bytes
    assert len(a.run.placements) == len(b.run.placements)


def test_chips_holding_equal_operands_run_the_kernel_once_and_each_allocate_their_own_result():
    from opbyop.device.executor import Executor

    # matmul of each chip's shards, all_reduce (both chips then hold the same sum), reshape, tanh
    case = DATA / "p300" / "matmul_allreduce"
    program, module = (case / "ttnn_runtime.mlir").read_text(), (case / "stablehlo.mlir").read_text()
    shapes, _ = module_shapes(module)
    inputs = [np.random.default_rng(4).standard_normal(s).astype(np.float32) for s in shapes]
    calls: list[str] = []
    compute = Executor.compute

    def counted(self, op, operands):
        calls.append(op.name)
        return compute(self, op, operands)

    simulator = MeshSimulator()
    try:
        Executor.compute = counted
        result = simulator.run(program, inputs, stablehlo=module)
    finally:
        Executor.compute = compute
        simulator.close()
    assert calls.count("ttnn.matmul") == 2  # different shards: each chip its own
    assert calls.count("ttnn.tanh") == 1  # the same sum on both chips: computed once
    np.testing.assert_array_equal(result.chip_outputs[0][0], result.chip_outputs[0][1])
    assert result.run.chip_peak_dram_bytes[0] == result.run.chip_peak_dram_bytes[1] > 0


def _judged(case: str, expected_of, thresholds=None):
    from opbyop.analysis.attribution import judge
    from opbyop.device.simulator import DeviceSimulator
    from opbyop.golden.compare import Thresholds, compare, verdict

    program, module = (DATA / case / "ttnn_runtime.mlir").read_text(), (DATA / case / "stablehlo.mlir").read_text()
    shapes, _ = module_shapes(module)
    inputs = [np.random.default_rng(5).standard_normal(s).astype(np.float32) for s in shapes]
    simulator = DeviceSimulator()
    try:
        binary = simulator.load(program)
        outputs, _ = simulator.run_binary(binary, inputs, stablehlo=module)
        expected = [np.asarray(e, np.float32) for e in expected_of(inputs)]
        thresholds = thresholds or Thresholds()
        comparison = compare(outputs, expected, ["f32"], thresholds)
        return judge(binary, inputs, expected, ["f32"], thresholds, simulator, verdict(comparison), stablehlo=module)
    finally:
        simulator.close()


def test_a_mesh_program_whose_exact_reading_differs_from_xla_is_the_compilers_lowering():
    # XLA's value taken as the negated true one: the exact reading of every chip cannot match it
    judgment = _judged("p300/matmul_allreduce", lambda x: [-np.tanh(x[0] @ x[1])])
    assert judgment.status is Status.MISCOMPILED, judgment.message
    assert "exact reading differs from XLA" in judgment.message and "not judged" not in judgment.message


def test_a_mesh_program_whose_simulated_collective_is_wrong_on_one_chip_is_the_simulators_error(monkeypatch):
    from opbyop.device import mesh_executor

    right = CCL["ttnn.all_reduce"]

    def wrong_on_chip_1(call):  # a broken simulator kernel; the reference reads the collective itself
        out, transfers = right(call)
        return [out[0], [o + 1 for o in out[1]]], transfers

    monkeypatch.setitem(mesh_executor.COLLECTIVES, "ttnn.all_reduce", wrong_on_chip_1)  # the reference is untouched
    judgment = _judged("p300/matmul_allreduce", lambda x: [np.tanh(x[0] @ x[1])])
    assert judgment.status is Status.SIMULATOR_ERROR, judgment.message
    assert "ttnn.all_reduce" in judgment.message and "on chip 1" in judgment.message


def test_a_mesh_program_right_in_exact_arithmetic_leaves_only_the_chips_numerics():
    from opbyop.golden.compare import DtypeThreshold, Thresholds

    strict = Thresholds(per_dtype={"f32": DtypeThreshold(atol=1e-5, rtol=1e-5, require_allclose=True)})
    judgment = _judged("p300/matmul_allreduce", lambda x: [np.tanh(x[0].astype(np.float64) @ x[1])], strict)
    assert judgment.status is Status.GOLDEN_FAILED, judgment.message
    assert judgment.message.startswith("the chip's numerics") and "not judged" not in judgment.message
