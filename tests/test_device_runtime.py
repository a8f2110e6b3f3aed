"""The simulated chip: memory, placement, and the runtime API on programs tt-mlir really compiled."""

from __future__ import annotations

import numpy as np
import pytest

from core_fixtures import file_ops
from opbyop.device.arch import BLACKHOLE_P150, WORMHOLE_N150
from opbyop.device.executor import SimulationError
from opbyop.device.layout import Layout
from opbyop.device.memory import DeviceMemory, OutOfMemory
from opbyop.device.placement import Policy, Reason, candidates, nlp_targets, place, work_of
from opbyop.device.program import Op, TensorType
from opbyop.device.runtime import (Binary, deallocate, get_layout, open_device, run_of, submit, to_device, to_host,
                                   to_layout)
from opbyop.device.stitch import run_stitched
from opbyop.records import Stage, Status

RNG = np.random.default_rng(1)
TILE_F32 = Layout(tiled=True, dtype="f32")


@pytest.fixture(scope="module")
def programs(worker, compile_only, workspace):
    """Compiled TTNN programs of small single-op modules: name -> Binary."""
    out = {}
    for op in file_ops("runtime_ops.mlir"):
        result = worker.analyze(op, compile_only, timeout=60)
        assert result.compile.reached is Stage.FLATBUFFER, result.message
        out[op.op_name.removeprefix("stablehlo.")] = Binary.load(
            workspace.artifacts.read_text(result.compile.artifacts["ttnn_runtime"]))
    return out


@pytest.fixture
def device(programs):
    d = open_device(programs["add"].program.spec)
    yield d
    d.close()


def test_host_device_round_trip_keeps_or_rounds_values(device):
    x = RNG.standard_normal((4, 33)).astype(np.float32)
    assert np.array_equal(to_host(to_device(x, device)), x)
    as_bf16 = to_host(to_device(x, device, Layout(tiled=True, dtype="bf16")))
    assert not np.array_equal(as_bf16, x) and np.abs(as_bf16 - x).max() < 0.02


def test_deallocate_counts_references(device):
    x = to_device(np.ones((64, 64), np.float32), device)
    used = sum(device.memory.dram.used)
    assert used >= 64 * 64 * 4
    x.refs += 1  # a second holder (the runtime's const-eval cache holds references this way)
    deallocate(x)
    assert sum(device.memory.dram.used) == used and not x.deallocated
    deallocate(x)
    assert sum(device.memory.dram.used) == 0 and x.deallocated
    with pytest.raises(SimulationError, match="deallocated"):
        to_host(x)
    y = to_device(np.ones(8, np.float32), device)
    y.refs += 5
    deallocate(y, force=True)
    assert y.deallocated


def test_l1_overflow_is_an_out_of_memory_naming_the_buffer(device):
    huge = np.zeros((2048, 32 * 1024), np.float32)  # 256 MiB: more than all of L1
    with pytest.raises(SimulationError) as e:
        to_device(huge, device, Layout(tiled=True, dtype="f32", buffer="l1"), name="activations")
    message = str(e.value)
    assert "out of L1 memory" in message and "buffer activations needs" in message and "free of" in message


def test_dram_channel_capacity_is_enforced():
    memory = DeviceMemory(WORMHOLE_N150)
    with pytest.raises(OutOfMemory, match="out of DRAM memory: buffer weights"):
        memory.allocate(Layout(tiled=True, dtype="f32"), (1 << 18, 1 << 16), "weights")  # 64 GiB > 12 GiB


def test_get_layout_is_what_the_program_expects(programs):
    layout = get_layout(programs["add"], 0, 0)
    assert layout == programs["add"].input_types(0)[0].layout and layout.buffer == "dram"


def test_submit_is_non_blocking_and_converts_input_layouts(programs, device):
    x = RNG.standard_normal((32, 64)).astype(np.float32)
    y = RNG.standard_normal((32, 64)).astype(np.float32)
    a = to_device(x, device, Layout(tiled=True, dtype="bf16"))  # not the layout the program expects
    b = to_device(y, device, get_layout(programs["add"], 0, 1))
    (out,) = submit(device, programs["add"], 0, [a, b])
    assert out.ready is not None  # handed back before the program ran
    np.testing.assert_allclose(to_host(out), to_host(a) + y, rtol=1e-6)
    assert a.layout.dtype == "bf16" and not a.deallocated  # the caller's tensor is untouched
    assert run_of(out).ttnn_ops > 0


def test_a_program_s_output_is_freed_when_its_holder_drops_it_without_waiting_for_the_garbage_collector(programs,
                                                                                                        device):
    import gc
    import weakref

    a = to_device(np.ones((32, 64), np.float32), device, get_layout(programs["add"], 0, 0))
    b = to_device(np.ones((32, 64), np.float32), device, get_layout(programs["add"], 0, 1))
    (out,) = submit(device, programs["add"], 0, [a, b])
    assert run_of(out).ttnn_ops > 0
    values = weakref.ref(out)
    gc.disable()  # a reference cycle (output -> its future -> output) would keep a gigabyte output alive
    try:
        deallocate(out)
        del out
        assert values() is None
    finally:
        gc.enable()


def test_l1_tensors_the_program_does_not_use_move_to_dram(programs, device):
    resident = to_device(np.arange(32 * 32, dtype=np.float32).reshape(32, 32), device,
                         Layout(tiled=True, dtype="f32", buffer="l1"), name="kv-cache")
    inputs = [to_device(RNG.standard_normal((32, 64)).astype(np.float32), device, get_layout(programs["add"], 0, i))
              for i in range(2)]
    submit(device, programs["add"], 0, inputs)[0].ready.result()
    assert resident.layout.buffer == "dram" and max(device.memory.l1.used) == 0
    assert np.array_equal(to_host(resident), np.arange(32 * 32, dtype=np.float32).reshape(32, 32))


def test_programs_stitch_on_device_without_a_host_round_trip(programs, device):
    x = RNG.standard_normal((32, 64)).astype(np.float32)
    y = RNG.standard_normal((32, 64)).astype(np.float32)
    (summed,) = submit(device, programs["add"], 0, [to_device(x, device), to_device(y, device)])
    (expd,) = submit(device, programs["exponential"], 0, [summed])  # a device tensor, not yet computed
    np.testing.assert_allclose(to_host(expd), np.exp(x + y), rtol=1e-5)


def test_single_op_runs_leave_no_memory_behind(programs):
    from opbyop.device.simulator import DeviceSimulator

    simulator = DeviceSimulator()
    x = RNG.standard_normal((32, 64)).astype(np.float32)
    for name in ("constant", "add", "constant", "multiply"):  # a cached constant returned as the output
        binary = programs[name]
        outputs, run = simulator.run(binary.program.text, [x] * len(binary.function(0).arguments))
        device = simulator.device_for(binary.program.spec)
        assert sum(device.memory.dram.used) == 0 and not device.live, name
    np.testing.assert_array_equal(outputs[0], x * 2.0)
    assert run.peak_dram_bytes >= 2 * x.nbytes and run.peak_l1_bytes > 0  # inputs in DRAM, buffers in L1


def test_a_simulator_gap_fails_the_run_not_the_process_and_leaks_nothing(device):
    from opbyop.device.executor import Executor
    from opbyop.device.program import Function, Program

    f32 = lambda *shape: TensorType(shape, "f32", TILE_F32)  # noqa: E731
    wrong = Op("ttnn.reshape", [0], [1], [f32(4, 8)], [f32(5, 7)], {"shape": [5, 7]})  # 32 values into 35
    function = Function("main", "forward_device", [0], [f32(4, 8)], [wrong], [1], [f32(5, 7)])
    program = Program({"main": function}, "main", device.spec, "")
    x = to_device(np.ones((4, 8), np.float32), device, TILE_F32)
    with pytest.raises(SimulationError, match="simulator error in ttnn.reshape"):
        Executor(device, program).run(function, [x])
    assert x.refs == 1  # the failed call gave its reference back
    deallocate(x)
    assert sum(device.memory.dram.used) == 0


def test_to_layout_returns_a_new_tensor(device):
    x = to_device(RNG.standard_normal((8, 8)).astype(np.float32), device)
    y = to_layout(x, device, TILE_F32.with_(buffer="l1"))
    assert y is not x and y.layout.buffer == "l1" and x.layout.buffer == "dram"
    assert np.array_equal(to_host(x), to_host(y))


def test_weights_are_pushed_once_across_iterations(worker, mlp_graph, settings, workspace):
    whole = worker.analyze_whole(mlp_graph, settings)
    binary = Binary.load(workspace.artifacts.read_text(whole.compile.artifacts["ttnn_runtime"]))
    device = open_device(binary.program.spec)
    parameters = [i for i, a in enumerate(mlp_graph.arguments) if a.kind.value == "parameter"]
    run = run_stitched(device, binary, mlp_graph.argument_values, parameters, iterations=3)
    assert run.iterations == 3 and run.weight_bytes_pushed >= sum(
        mlp_graph.argument_values[i].nbytes for i in parameters)
    assert run.first.cycles > run.steady.cycles  # const-eval work ran once, in the first iteration
    np.testing.assert_allclose(run.outputs[0], mlp_graph.reference_outputs[0], atol=1e-3)
    assert sum(device.memory.dram.used) > 0  # the prepared weights stay cached on the device
    device.release_constants()
    assert sum(device.memory.dram.used) == 0  # every buffer freed: nothing leaked
    device.close()


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_stitched_whole_model_matches_torch(worker, settings, model, mlp_graph, cnn_graph):
    graph = {"mlp": mlp_graph, "cnn": cnn_graph}[model]
    whole = worker.analyze_whole(graph, settings)
    assert whole.status is Status.SUCCESS and whole.depth is Stage.GOLDEN, whole.message
    assert whole.pcc > 0.99 and whole.max_abs_error < 0.05  # bf16 tolerance
    assert whole.device.peak_dram_bytes > 0 and whole.device.placements
    assert whole.device.peak_l1_bytes >= max(p.l1_bytes_per_core for p in whole.device.placements) > 0  # its CBs


# -- placement -----------------------------------------------------------------------------

def matmul(m: int, k: int, n: int, config: dict | None = None, dtype: str = "f32") -> Op:
    attrs = {"compute_config": {"math_fidelity": "hifi4", "fp32_dest_acc_en": True}}
    if config:
        attrs["matmul_program_config"] = config
    tensor = lambda *s: TensorType(s, dtype, Layout(tiled=True, dtype=dtype))  # noqa: E731
    return Op("ttnn.matmul", [0, 1], [2], [tensor(m, k), tensor(k, n)], [tensor(m, n)], attrs)


def mcast_2d(grid_x: int, grid_y: int, per_core: tuple[int, int], out_block: tuple[int, int], in0_block_w: int) -> dict:
    """A MatmulMultiCoreReuseMultiCastProgramConfig as tt-mlir prints it."""
    return {"compute_with_storage_grid_size": [grid_x, grid_y], "in0_block_w": in0_block_w,
            "out_block_h": out_block[0], "out_block_w": out_block[1],
            "per_core_m": per_core[0], "per_core_n": per_core[1]}


def test_placement_enumerates_rejects_with_reasons_and_picks_by_policy():
    op = matmul(1024, 4096, 1024)
    fastest = place(op, BLACKHOLE_P150)
    assert fastest.legal < fastest.candidates and fastest.rejected
    assert set(fastest.rejected) <= {"IllegalStackForGrid", "IllegalStreaming", "L1UsageOverMaxLimit",
                                     "PaddingConstraintsNotSatisfied", "InputBufferAllocationFailure",
                                     "ExceededDramChannelCapacity"}
    assert fastest.policy == "fewest_cycles"
    fewest = place(op, BLACKHOLE_P150, Policy.FEWEST_CORES)
    assert fewest.grid[0] * fewest.grid[1] < fastest.grid[0] * fastest.grid[1]
    assert fewest.cycles > fastest.cycles
    assert fastest.l1_bytes_per_core <= BLACKHOLE_P150.l1_per_core


def test_t_streaming_makes_an_op_fit_where_whole_blocks_do_not():
    """A 32x32x32-tile matmul on one core: its whole output block overflows L1; streamed in slices
    of rows or columns (the balancer's t-streaming) it fits."""
    models = [m for m in candidates(work_of(matmul(1024, 1024, 1024)), WORMHOLE_N150) if m.grid == (1, 1)]
    unstreamed = [m for m in models if not m.stream]
    assert unstreamed and all(m.reason in (Reason.L1_USAGE_OVER_MAX_LIMIT, Reason.INPUT_BUFFER_ALLOCATION_FAILURE)
                              for m in unstreamed)
    assert Reason.L1_USAGE_OVER_MAX_LIMIT in {m.reason for m in unstreamed}  # inputs fit, the output block not
    legal = [m for m in models if m.reason is None]
    assert legal and {m.stream for m in legal} == {"R", "C"} and all(m.t >= 2 for m in legal)
    # each slice re-reads the operand its cut does not divide: more slices, more cycles
    by_t = {m.t: m.cycles for m in legal if m.stream == "R" and m.k_block == 1 and m.buffer_factor == 2}
    assert by_t and list(by_t.values()) == sorted(by_t.values())


def test_streaming_rejections_name_their_reason():
    odd = work_of(matmul(96, 64, 64))  # 3 tiles of rows: two slices of 1.5 tiles are not a thing
    rejected = {m.reason for m in candidates(odd, WORMHOLE_N150) if m.grid == (1, 1) and m.stream == "R" and m.t == 2}
    assert rejected == {Reason.ILLEGAL_STREAMING}
    f32 = lambda *s: TensorType(s, "f32", TILE_F32)  # noqa: E731
    permute = Op("ttnn.permute", [0], [1], [f32(64, 128)], [f32(128, 64)], {"permutation": [1, 0]})
    streamed = [m for m in candidates(work_of(permute), WORMHOLE_N150) if m.stream]
    assert streamed and all(m.reason is Reason.OPERAND_ACCESS_PREVENTS_STREAMING for m in streamed)
    add = Op("ttnn.add", [0, 1], [2], [f32(64, 128)] * 2, [f32(64, 128)], {})
    assert any(m.stream and m.reason is None for m in candidates(work_of(add), WORMHOLE_N150))


def test_nlp_policy_keeps_pace_with_its_neighbours_on_fewer_cores():
    """A small add between two big matmuls: fewest-cycles spreads it over many cores, the NLP
    policy gives it the fewest cores that still finish within its neighbours' time."""
    f32 = lambda *s: TensorType(s, "f32", TILE_F32)  # noqa: E731
    ops = [matmul(1024, 2048, 1024), Op("ttnn.add", [0, 1], [2], [f32(256, 1024)] * 2, [f32(256, 1024)], {}),
           matmul(1024, 2048, 1024)]
    targets = nlp_targets(ops, WORMHOLE_N150)
    fastest = place(ops[1], WORMHOLE_N150)
    nlp = place(ops[1], WORMHOLE_N150, Policy.NLP, targets[1])
    assert targets[1] == targets[0] > fastest.cycles  # the neighbours are the slower ones
    assert nlp.policy == "nlp" and nlp.grid[0] * nlp.grid[1] < fastest.grid[0] * fastest.grid[1]
    assert fastest.cycles <= nlp.cycles <= targets[1]


def test_big_blocks_on_few_cores_exceed_l1():
    models = candidates(work_of(matmul(4096, 8192, 4096)), WORMHOLE_N150)
    whole = [m for m in models if m.grid == (1, 1) and not m.stream]
    assert all(m.reason is not None for m in whole)
    assert "L1UsageOverMaxLimit" in {m.reason.value for m in whole}
    # tt-metal slices a core's output into blocks until they fit: one core still runs it, slowly
    sliced = [m for m in models if m.grid == (1, 1) and m.reason is None]
    assert sliced and all(m.t >= 64 for m in sliced)


def test_a_harvested_grid_changes_the_chosen_placement():
    op = matmul(256, 1024, 256)
    full = place(op, WORMHOLE_N150)
    harvested = place(op, WORMHOLE_N150.harvested(0b1111010))  # five of eight rows disabled
    assert WORMHOLE_N150.harvested(0b1111010).worker_grid == (3, 8)
    assert harvested.grid != full.grid and harvested.grid[0] <= 3
    assert harvested.candidates < full.candidates and harvested.cycles > full.cycles


def test_a_placement_memo_places_repeated_layers_once_and_answers_as_without_it():
    memo: dict = {}
    layer = [matmul(256, 1024, 256), matmul(256, 256, 1024)]
    first = [place(op, WORMHOLE_N150, memo=memo) for op in layer]
    again = [place(op, WORMHOLE_N150, memo=memo) for op in [matmul(256, 1024, 256), matmul(256, 256, 1024)]]
    assert len(memo) == 2 and all(a is b for a, b in zip(first, again))  # the second layer is looked up
    assert first == [place(op, WORMHOLE_N150) for op in layer]  # the same answer as placing afresh
    fewest = place(layer[0], WORMHOLE_N150, Policy.FEWEST_CORES, memo=memo)
    harvested = place(layer[0], WORMHOLE_N150.harvested(0b1111010), memo=memo)
    assert len(memo) == 4 and fewest != first[0] and harvested != first[0]  # policy and grid are part of the key


def test_the_compilers_matmul_program_config_is_honoured():
    config = {"compute_with_storage_grid_size": [4, 2], "per_core_m": 2, "per_core_n": 4, "in0_block_w": 2}
    placed = place(matmul(128, 256, 512, config), BLACKHOLE_P150)
    assert placed.fixed_by_compiler and placed.grid == (2, 4) and placed.block_tiles == (2, 4)


@pytest.mark.parametrize("chip, config, buffers", [
    # in0 4x32 and in1 32x4 tiles double-buffered, a 4x4 output block in bf16 and its f32 partial sums
    (WORMHOLE_N150, mcast_2d(8, 8, (16, 16), (4, 4), 32), (4 * 32 * 2 + 32 * 4 * 2 + 16) * 2048 + 16 * 4096),
    # per_core_m 13 on 10 rows of 128 tiles: the last row of cores holds 11 tiles and 2 of padding
    (BLACKHOLE_P150, mcast_2d(11, 10, (13, 12), (13, 3), 16), (13 * 16 * 2 + 16 * 3 * 2 + 39) * 2048 + 39 * 4096),
])
def test_a_compilers_output_blocks_size_the_circular_buffers_as_tt_metal_does(chip, config, buffers):
    """tt-mlir's configs for a 4096^3 bf16 matmul: the buffers hold one output block at a time
    (out_block_h x out_block_w), not a core's whole output, and fit L1 as on silicon."""
    placed = place(matmul(4096, 4096, 4096, config, "bf16"), chip)
    assert placed.fixed_by_compiler and placed.legal == 1 and not placed.rejected
    assert placed.block_tiles == (config["out_block_h"], config["out_block_w"])
    assert placed.l1_bytes_per_core == buffers <= chip.l1_per_core


def test_a_compilers_blocks_that_overflow_l1_fail_the_run_naming_what_to_shrink():
    """A program config whose K block cannot fit is a real failure: the run stops at the matmul
    and says which of the config's blocks to make smaller."""
    from opbyop.device.executor import Executor
    from opbyop.device.program import Function, Program

    op = matmul(64, 8192, 64, mcast_2d(2, 2, (1, 1), (1, 1), 256))  # 256 f32 K tiles per input, twice over
    placed = place(op, WORMHOLE_N150)
    assert placed.legal == 0 and placed.rejected == {"InputBufferAllocationFailure": 1}
    device = open_device(WORMHOLE_N150)
    f32 = lambda *shape: TensorType(shape, "f32", TILE_F32)  # noqa: E731
    function = Function("main", "forward_device", [0, 1], [f32(64, 8192), f32(8192, 64)], [op], [2], [f32(64, 64)])
    a = to_device(np.ones((64, 8192), np.float32), device, TILE_F32)
    b = to_device(np.ones((8192, 64), np.float32), device, TILE_F32)
    with pytest.raises(SimulationError, match="out of L1 memory: ttnn.matmul.*in0_block_w need less"):
        Executor(device, Program({"main": function}, "main", device.spec, "")).run(function, [a, b])
    device.close()


def test_a_prime_count_of_tiles_per_core_slices_into_single_tiles():
    """1,571 output columns of tiles on one core: no power of two divides them, tt-metal's output
    blocks (any divisor) still cut them into single tiles that fit."""
    models = [m for m in candidates(work_of(matmul(32, 1024, 32 * 1571, dtype="bf16")), WORMHOLE_N150)
              if m.grid == (1, 1)]
    assert all(m.reason is not None for m in models if m.stream != "C" or m.t != 1571)
    assert any(m.reason is None and m.block == (1, 1) for m in models if m.stream == "C" and m.t == 1571)


def test_a_grid_need_not_divide_a_matmuls_tiles_but_every_core_holds_some():
    """Five rows of tiles on three rows of cores take 2, 2 and 1 (tt-metal pads the last); a
    fourth row of cores would hold padding only."""
    by_grid = {m.grid: m.reason for m in candidates(work_of(matmul(160, 64, 64)), WORMHOLE_N150) if not m.stream}
    assert by_grid[(3, 1)] is None and by_grid[(5, 1)] is None
    assert by_grid[(4, 1)] is Reason.PADDING_CONSTRAINTS_NOT_SATISFIED


def test_gpt_oss_lm_head_finds_an_op_model_on_a_p150():
    """128x2880 by 2880x201088 bf16: 6,284 output tiles, 4 x 1,571, divide no grid but 1, 2 and 4
    columns; with padded grids and output blocks of any divisor it runs."""
    op = matmul(128, 2880, 201088, dtype="bf16")
    placed = place(op, BLACKHOLE_P150)
    assert placed.legal > 0 and placed.grid[0] * placed.grid[1] <= BLACKHOLE_P150.cores
    assert any(m.reason is None and m.grid[0] == 4 and m.grid[1] > 4 for m in candidates(work_of(op), BLACKHOLE_P150))
    assert placed.l1_bytes_per_core <= BLACKHOLE_P150.l1_per_core


def test_a_linears_bias_and_f32_partial_sums_take_buffers_of_their_own():
    """tt-metal gives a bias one row of tiles per output block, and partial sums under fp32
    accumulation an f32 buffer beside a bf16 output; an f32 output holds its own partial sums."""
    config = mcast_2d(1, 1, (2, 2), (2, 2), 2)  # one core, four output tiles, K in two blocks
    bf16 = lambda *s: TensorType(s, "bf16", Layout(tiled=True, dtype="bf16"))  # noqa: E731
    attrs = {"compute_config": {"math_fidelity": "hifi4", "fp32_dest_acc_en": True}, "matmul_program_config": config}
    linear = Op("ttnn.linear", [0, 1, 2], [3], [bf16(64, 128), bf16(128, 64), bf16(64)], [bf16(64, 64)], attrs)
    inputs = (2 * 2 + 2 * 2) * 2 * 2048  # in0 2x2 and in1 2x2 tiles, double-buffered
    assert place(matmul(64, 128, 64, config, "bf16"), WORMHOLE_N150).l1_bytes_per_core == inputs + 4 * (2048 + 4096)
    assert place(linear, WORMHOLE_N150).l1_bytes_per_core == inputs + 4 * (2048 + 4096) + 2 * 2048
    assert place(matmul(64, 128, 64, config), WORMHOLE_N150).l1_bytes_per_core == 2 * inputs + 4 * 4096


def _mixed_matmul(a: tuple[int, ...], b: tuple[int, ...], weights: str = "bf16") -> Op:
    bf16 = lambda *s: TensorType(s, "bf16", Layout(tiled=True, dtype="bf16"))  # noqa: E731
    weight = TensorType(b, weights, Layout(tiled=True, dtype=weights))
    attrs = {"compute_config": {"math_fidelity": "hifi2", "fp32_dest_acc_en": False}}
    return Op("ttnn.matmul", [0, 1], [2], [bf16(*a), weight], [bf16(*a[:-1], b[-1])], attrs)


def test_a_one_tile_high_matmul_spreads_its_weights_over_more_cores_than_a_row():
    """A decode step's projection (32 x 4096 by 4096 x 14336): tt-metal's 1D multicast program lays
    its output columns over the whole grid, so the weights stream from DRAM at the chip's bandwidth
    instead of through one row of cores."""
    op = _mixed_matmul((32, 4096), (4096, 14336))
    placed = place(op, WORMHOLE_N150)
    assert placed.grid[0] == 1 and placed.grid[1] > WORMHOLE_N150.worker_grid[1]
    dram_floor = work_of(op).total_bytes / WORMHOLE_N150.dram_bytes_per_cycle
    assert placed.cycles <= 1.1 * dram_floor + 4_000  # the weights' DRAM read, plus dispatch


def test_a_batched_matmul_spreads_its_batch_over_the_cores():
    """Attention scores, 256 heads of 32 x 128 by 128 x 128: each batch is one row of tiles, the
    batch spreads over the cores (tt-metal's bmm), and each core reads its own batches' in1."""
    op = _mixed_matmul((256, 32, 128), (256, 128, 128))
    work = work_of(op)
    assert (work.m_tiles, work.batch, work.rows_per_batch) == (256, 1, 1)
    placed = place(op, WORMHOLE_N150)
    one = place(_mixed_matmul((32, 128), (128, 128)), WORMHOLE_N150)
    assert placed.grid[0] * placed.grid[1] > 4  # more cores than one batch's 4 output tiles could use
    assert placed.cycles < 256 * (one.cycles - 4_000) / 3  # not the batches one after another
    assert placed.cycles <= 1.1 * work.total_bytes / WORMHOLE_N150.dram_bytes_per_cycle + 4_000  # DRAM-bound


def test_weights_in_block_floating_point_stream_faster_and_take_less_l1_than_bf16():
    """A decode projection is bound by reading its weights: bfp4 (0.5625 B per element) reads
    3.5x fewer bytes than bf16, and its K blocks of in1 take less L1."""
    bf16 = place(_mixed_matmul((32, 4096), (4096, 14336)), WORMHOLE_N150)
    bfp4 = place(_mixed_matmul((32, 4096), (4096, 14336), "bfp_bf4"), WORMHOLE_N150)
    assert bf16.cycles > 2.5 * bfp4.cycles
    work = work_of(_mixed_matmul((32, 4096), (4096, 14336), "bfp_bf4"))
    assert work.in1_bytes == 1024 * (0.5 + 1 / 16) < work.in_bytes_per_tile


def test_a_dram_bound_add_takes_the_time_tt_metals_dram_microbenchmark_gives():
    """8192^2 bf16 + 8192^2 bf16: 384 MiB through DRAM, which tt-metal's read microbenchmark moves
    at 267 GB/s on Wormhole and 500 GB/s on Blackhole (not the spec's 288 and 512)."""
    bf16 = lambda *s: TensorType(s, "bf16", Layout(tiled=True, dtype="bf16"))  # noqa: E731
    add = Op("ttnn.add", [0, 1], [2], [bf16(8192, 8192)] * 2, [bf16(8192, 8192)], {})
    for spec, gb_per_s in ((WORMHOLE_N150, 267), (BLACKHOLE_P150, 500)):
        seconds = place(add, spec).cycles / (spec.clock_mhz * 1e6)
        assert seconds == pytest.approx(3 * 8192 ** 2 * 2 / (gb_per_s * 1e9), rel=0.01)


def test_a_whole_model_s_failed_run_is_the_device_s_verdict_and_any_other_exception_an_analyzer_error():
    from opbyop.analysis.analyzer import whole_run_failure
    from opbyop.device.executor import NotSimulatedError
    from opbyop.records import CompileOutcome
    from opbyop.stage_call import StageCall

    def raising(error: Exception) -> StageCall:
        def fail():
            raise error
        return StageCall.of(fail, Stage.DEVICE_RUN)

    compiled = CompileOutcome(reached=Stage.FLATBUFFER)
    failed = whole_run_failure(raising(SimulationError("out of L1 memory: ttnn.matmul")), compiled, 1.5)
    assert (failed.status, failed.failed_stage, failed.message) == (
        Status.RUN_FAILED, Stage.DEVICE_RUN, "out of L1 memory: ttnn.matmul")
    assert failed.device.message == failed.message and failed.seconds == 1.5
    gap = whole_run_failure(raising(NotSimulatedError("ttnn.sort is not simulated")), compiled, 0.1)
    assert gap.status is NotSimulatedError.status
    bug = whole_run_failure(raising(KeyError("shape")), compiled, 0.1)
    assert (bug.status, bug.message) == (Status.ANALYZER_ERROR, "simulator error: KeyError: 'shape'")
