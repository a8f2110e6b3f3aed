"""Placing one TTNN compute op on the core grid (the idea of pybuda's balancer).

For each op, candidate op models are enumerated as the balancer did: a grid of cores (r, c) within
the worker grid (harvested rows excluded), a t-streaming direction and factor (the output cut into
t slices streamed through the cores one after another, along rows "R" or columns "C"), a block of
output tiles per core, a K block (matmul) and a buffer factor (2 = double-buffered). Each
candidate is checked against the chip and rejected with ONE of the balancer's reasons; a policy
picks one legal model: fewest cycles, fewest cores, or the NLP policy (execution times matched
to the neighbouring ops').

A matmul's slices are tt-metal's output blocks (out_block_h x out_block_w of a core's per_core_M x
per_core_N): its circular buffers hold one output block and one K block of each input at a time
(matmul_multicore_reuse_mcast_2d_program_factory.cpp), so a slice may be any divisor of the core's
tiles, down to single tiles, as tt-metal's get_multi_dim_per_core_factor shrinks blocks until they
fit L1; and a grid need not divide the tiles: the last row or column of cores takes the remainder.
A program config the compiler set fixes the grid, the blocks and the K block (in0_block_w).

Cycles are a model, not a measurement. Every constant comes from a published figure, cited:
- matrix engine (tenstorrent/tt-metal tech_reports/matrix_engine/matrix_engine.md): a matmul of
  8x16 x 16x16 per cycle (4,096 FLOP/cycle at LoFi, divided by the fidelity's phases), a 16x16
  reduction per cycle (sum/average times the phases, max not), an 8x16 element-wise add/sub/mul
  per cycle (multiply times the phases);
- vector unit: a tile is 4 faces x 8 iterations of the 32-lane SFPU (ITERATIONS = 8 per face in
  tt-metal's ckernel_sfpu_*.h); the accurate exp_21f body is 17 instructions per iteration, the
  fast exp 2.125 cycles per iteration (ckernel_sfpu_exp.h, _sfpu_exp_21f_bf16_tti_ BODY_LEN and
  the replay-buffer comment);
- op dispatch: "roughly 4k cycles constant dispatch time regardless the kernel"
  (tenstorrent/tt-metal issue #12074);
- DRAM and NoC bandwidths and clocks: see opbyop/device/arch.py (_PERFORMANCE).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Iterable, Sequence

from opbyop.device.arch import DeviceSpec
from opbyop.device.formats import BYTES_PER_ELEMENT, FIDELITY_PHASES
from opbyop.device.program import Op, TensorType
from opbyop.records import OpPlacement

TILE = 32
TILE_ELEMENTS = TILE * TILE
# tech_reports/matrix_engine: 8x16 x 16x16 per cycle = 4,096 FLOP; a 32x32x32 tile product is 65,536 FLOP
MATMUL_TILE_CYCLES = 2 * TILE ** 3 // 4096  # 16 cycles per tile product at LoFi, x fidelity phases
# tech_reports/matrix_engine: a 16x16 reduction per cycle: a 32x32 tile in 4 cycles (x phases for sum/avg)
REDUCE_TILE_CYCLES = TILE_ELEMENTS // (16 * 16)
# tech_reports/matrix_engine: 8x16 element-wise per cycle: a tile in 8 cycles (x phases for multiply)
ELTWISE_TILE_CYCLES = TILE_ELEMENTS // (8 * 16)
# a tile is 4 faces x 8 SFPU iterations of 32 lanes (ckernel_sfpu_*.h: ITERATIONS = 8 per face)
SFPU_ITERATIONS_PER_TILE = 4 * 8
SFPU_TRANSCENDENTAL_CYCLES = 17 * SFPU_ITERATIONS_PER_TILE  # exp_21f: 17 instructions per iteration
SFPU_SIMPLE_CYCLES = 4 * SFPU_ITERATIONS_PER_TILE  # load, op, store, advance: the shortest SFPU body
OP_OVERHEAD_CYCLES = 4_000  # tt-metal issue #12074: ~4k cycles of dispatch per op
STREAM_SLICE_CYCLES = 200  # per streamed slice: a circular-buffer handshake (an estimate, no published figure)
STREAM_TILES = 8  # element-wise and data-movement ops move tiles through L1 in chunks of this many
STREAM_FACTORS = (1, 2, 4, 8, 16, 32)
F32_TILE_BYTES = TILE_ELEMENTS * 4


class Reason(str, Enum):
    """Why a candidate op model was rejected (the seed balancer's names)."""

    ILLEGAL_STACK_FOR_GRID = "IllegalStackForGrid"
    ILLEGAL_STREAMING = "IllegalStreaming"
    OPERAND_ACCESS_PREVENTS_STREAMING = "OperandAccessPreventsStreaming"
    L1_USAGE_OVER_MAX_LIMIT = "L1UsageOverMaxLimit"
    EXCEEDED_DRAM_CHANNEL_CAPACITY = "ExceededDramChannelCapacity"
    INPUT_BUFFER_ALLOCATION_FAILURE = "InputBufferAllocationFailure"
    PADDING_CONSTRAINTS_NOT_SATISFIED = "PaddingConstraintsNotSatisfied"


class Policy(str, Enum):
    FEWEST_CYCLES = "fewest_cycles"
    FEWEST_CORES = "fewest_cores"
    NLP = "nlp"  # fewest cores whose time meets the neighbouring ops' (pybuda's NLP balancer policy)


@dataclass(frozen=True)
class Candidate:
    grid: tuple[int, int]
    stream: str  # "" (none), "R" (slices of output rows), "C" (of columns) or "RC" (both: a compiler's blocks)
    t: int  # t-stream factor: slices streamed one after another
    block: tuple[int, int]  # output tiles per core per slice (rows, columns)
    k_block: int
    buffer_factor: int
    l1_bytes: int
    cycles: int
    reason: Reason | None  # None: legal
    slices: tuple[int, int] = (1, 1)  # slices along rows and columns (t = their product)

    @property
    def cores(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def stream_label(self) -> str:
        if self.stream == "RC":
            return f"R{self.slices[0]}C{self.slices[1]}"
        return f"{self.stream}{self.t}" if self.stream else ""


@dataclass(frozen=True)
class Work:
    """An op reduced to what placement needs: an (M x N) tile output, K tiles deep."""

    kind: str  # matmul | eltwise | multiply | reduce_sum | reduce_max | sfpu | sfpu_simple | data
    m_tiles: int
    n_tiles: int
    k_tiles: int
    batch: int
    in_bytes_per_tile: float
    out_bytes_per_tile: float
    inputs: int
    fidelity: str
    total_bytes: int  # everything read and written, for the DRAM bound
    streamable: str = "RC"  # directions the op's operand access allows streaming along
    interm_bytes_per_tile: float = 0.0  # a matmul's partial sums in a buffer of their own; 0: in the output's
    bias: bool = False  # a linear's bias: one row of tiles per output block
    in1_bytes_per_tile: float = 0.0  # a matmul's second operand (its weights) when stored otherwise; 0: as in0
    rows_per_batch: int = 0  # a batched matmul's row tiles per batch when each batch has its own in1; 0: shared

    @property
    def in1_bytes(self) -> float:
        return self.in1_bytes_per_tile or self.in_bytes_per_tile


MATRIX_OPS = {"ttnn.matmul", "ttnn.linear", "ttnn.conv2d", "ttnn.conv1d", "ttnn.conv_transpose2d"}
SFPU_OPS = {"ttnn.exp", "ttnn.log", "ttnn.log1p", "ttnn.expm1", "ttnn.sqrt", "ttnn.rsqrt", "ttnn.tanh", "ttnn.sigmoid",
            "ttnn.gelu", "ttnn.silu", "ttnn.sin", "ttnn.cos", "ttnn.tan", "ttnn.atan", "ttnn.atan2", "ttnn.erf",
            "ttnn.reciprocal", "ttnn.pow_scalar", "ttnn.pow", "ttnn.pow_tensor", "ttnn.divide", "ttnn.remainder",
            "ttnn.cbrt", "ttnn.softmax", "ttnn.rms_norm", "ttnn.layer_norm", "ttnn.batch_norm_inference",
            "ttnn.batch_norm_training"}
FPU_ELTWISE_OPS = {"ttnn.add", "ttnn.subtract"}
REDUCE_SUM_OPS = {"ttnn.sum", "ttnn.mean"}
REDUCE_MAX_OPS = {"ttnn.max", "ttnn.min", "ttnn.argmax"}
DATA_OPS = {"ttnn.permute", "ttnn.concat", "ttnn.slice_static", "ttnn.slice_dynamic", "ttnn.repeat",
            "ttnn.repeat_interleave", "ttnn.to_layout", "ttnn.typecast", "ttnn.pad", "ttnn.embedding",
            "ttnn.rows_gather", "ttnn.rows_scatter", "ttnn.transpose", "ttnn.sort", "ttnn.topk", "ttnn.bitcast_convert",
            "ttnn.assign", "ttnn.clone", "ttnn.to_memory_config", "ttnn.max_pool2d", "ttnn.avg_pool2d",
            "ttnn.max_pool2d_with_indices", "ttnn.cumsum", "ttnn.moreh_cumsum", "ttnn.global_avg_pool2d"}
# Ops whose operand access prevents streaming: they read across the whole tensor (transposes,
# gathers, sorts along the last dimension) before writing any slice.
NOT_STREAMABLE = {"ttnn.permute", "ttnn.transpose", "ttnn.rows_gather", "ttnn.rows_scatter", "ttnn.sort",
                  "ttnn.topk", "ttnn.softmax", "ttnn.cumsum", "ttnn.moreh_cumsum", "ttnn.embedding"}
NOT_PLACED = {"ttnn.deallocate", "ttnn.get_device", "ttcore.load_cached", "ttnn.reshape", "ttcore.while_loop",
              "ttcore.case"}  # no kernel of their own, no cores


def _tiles(n: int) -> int:
    return max(1, math.ceil(n / TILE))


def _bytes(t: TensorType | None) -> float:
    return BYTES_PER_ELEMENT.get(t.storage if t else "f32", 4.0)


def _size(t: TensorType | None) -> int:
    return math.ceil(math.prod(t.shape or (1,)) * _bytes(t)) if t else 0


def _kind(name: str) -> str:
    if name in SFPU_OPS:
        return "sfpu"
    if name in FPU_ELTWISE_OPS:
        return "eltwise"
    if name == "ttnn.multiply":
        return "multiply"
    if name in REDUCE_SUM_OPS:
        return "reduce_sum"
    if name in REDUCE_MAX_OPS:
        return "reduce_max"
    if name in DATA_OPS or not name.startswith("ttnn."):
        return "data"
    return "sfpu_simple"  # comparisons, logical and bitwise ops, abs, neg ... on the vector unit


def work_of(op: Op) -> Work | None:
    """The placement problem of `op`; None for ops that occupy no cores."""
    if op.name in NOT_PLACED or not op.result_types or op.result_types[0] is None:
        return None
    out = op.result_types[0]
    tensors = [t for t in op.operand_types if t is not None]
    total = sum(_size(t) for t in tensors) + sum(_size(t) for t in op.result_types if t is not None)
    config = op.attrs.get("compute_config") if isinstance(op.attrs.get("compute_config"), dict) else {}
    fidelity = str(config.get("math_fidelity", "hifi4"))
    in_b = TILE_ELEMENTS * (_bytes(tensors[0]) if tensors else 4.0)
    out_b = TILE_ELEMENTS * _bytes(out)
    shape = out.shape or (1,)
    if op.name in MATRIX_OPS:
        m = math.prod(shape[:-1]) if len(shape) > 1 else 1
        batch = 1
        if op.name.startswith("ttnn.conv"):
            kernel = op.attrs.get("kernel_size", [1, 1])
            kernel = [int(k) for k in (kernel if isinstance(kernel, list) else [kernel])]
            k = math.prod(kernel) * int(op.attrs.get("in_channels", 1)) // max(1, int(op.attrs.get("groups", 1)))
        else:
            a = tensors[0].shape or (1,)
            k = a[-2] if op.attrs.get("transpose_a") else a[-1]
            batch = math.prod(shape[:-2]) if len(shape) > 2 else 1
            m = shape[-2] if len(shape) > 1 else 1
        # tt-metal spreads a batched matmul's output over the cores batch by batch (fuse_batch, and
        # the bmm factories' B x Mt x Nt output tiles): the batch is more rows of tiles, each batch
        # padded to whole tiles; when every batch has its own in1, a core reads each batch's in1.
        b = tensors[1].shape if len(tensors) > 1 and tensors[1].shape else ()
        own_in1 = batch > 1 and len(b) > 2 and math.prod(b[:-2]) > 1
        in1_b = TILE_ELEMENTS * _bytes(tensors[1]) if len(tensors) > 1 else in_b
        # K is read in full by every output block: streaming may cut M or N, never K
        return Work("matmul", _tiles(m) * batch, _tiles(shape[-1]), _tiles(k), 1, in_b, out_b, 2, fidelity, total,
                    "RC", _interm_bytes(config, out_b), op.name == "ttnn.linear" and len(tensors) >= 3,
                    0.0 if in1_b == in_b else in1_b, _tiles(m) if own_in1 else 0)
    kind = _kind(op.name)
    source = tensors[0].shape if tensors and tensors[0].shape else shape
    rows = math.prod(source[:-1]) if len(source) > 1 else 1
    streamable = "" if op.name in NOT_STREAMABLE else "RC"
    if kind in ("reduce_sum", "reduce_max"):
        streamable = "R"  # the reduced (last) dimension cannot be cut: rows stream, columns do not
    return Work(kind, _tiles(rows), _tiles(source[-1]), 1, 1, in_b, out_b, max(1, len(tensors)), fidelity, total,
                streamable)


def _interm_bytes(config: dict, out_bytes_per_tile: float) -> float:
    """Bytes per tile of a matmul's partial-sum buffer when it cannot share the output's: tt-metal
    packs partial sums in f32 with fp32 accumulation, in bf16 with packer L1 accumulation, and
    shares the output buffer only when that is the output's own format."""
    if bool(config.get("fp32_dest_acc_en", True)):  # tt-mlir's default, as the kernels read it
        interm = float(F32_TILE_BYTES)
    elif bool(config.get("packer_l1_acc", False)):
        interm = TILE_ELEMENTS * BYTES_PER_ELEMENT["bf16"]
    else:
        return 0.0
    return 0.0 if interm == out_bytes_per_tile else interm


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _per_tile_cycles(work: Work) -> int:
    phases = FIDELITY_PHASES.get(work.fidelity, 4)
    return {"eltwise": ELTWISE_TILE_CYCLES, "multiply": ELTWISE_TILE_CYCLES * phases,
            "reduce_sum": REDUCE_TILE_CYCLES * phases, "reduce_max": REDUCE_TILE_CYCLES,
            "sfpu": SFPU_TRANSCENDENTAL_CYCLES, "sfpu_simple": SFPU_SIMPLE_CYCLES}.get(work.kind, 0)


def _cost(work: Work, spec: DeviceSpec, block: tuple[int, int], slices: tuple[int, int], buffer_factor: int) -> int:
    """Cycles of one op model: compute per core against its data movement (overlapped when
    double-buffered), plus dispatch and one handshake per streamed slice."""
    rows, cols = slices
    t = rows * cols
    tiles_per_core = block[0] * block[1] * work.batch * t
    if work.kind == "matmul":
        compute = tiles_per_core * work.k_tiles * MATMUL_TILE_CYCLES * FIDELITY_PHASES.get(work.fidelity, 4)
        # every slice re-reads the operand its cut does not divide: in0 once per column slice, in1 per row slice
        in0 = block[0] * rows * work.k_tiles * cols
        # a batched in1 is read once per batch the core's rows span
        batches = math.ceil(block[0] * rows / work.rows_per_batch) if work.rows_per_batch else 1
        in1 = block[1] * cols * work.k_tiles * max(rows, batches)
        noc_bytes = ((in0 * work.in_bytes_per_tile + in1 * work.in1_bytes) * work.batch
                     + tiles_per_core * work.out_bytes_per_tile)
    else:
        compute = tiles_per_core * _per_tile_cycles(work) * (work.inputs if work.kind == "eltwise" else 1)
        noc_bytes = tiles_per_core * (work.inputs * work.in_bytes_per_tile + work.out_bytes_per_tile)
    noc = noc_bytes / spec.noc_bytes_per_cycle  # this core's reads and writes through its NoC interface
    dram = work.total_bytes / spec.dram_bytes_per_cycle  # the whole op's traffic, shared by all cores
    data = max(noc, dram)
    body = max(compute, data) if buffer_factor >= 2 else compute + data
    return int(OP_OVERHEAD_CYCLES + body + (t - 1) * STREAM_SLICE_CYCLES)


def _l1(work: Work, block: tuple[int, int], k_block: int, buffer_factor: int) -> tuple[int, int]:
    """(input buffers, total) bytes of L1 per core: a slice's blocks stay resident while K streams."""
    if work.kind == "matmul":
        in_block = block[0] * k_block * work.in_bytes_per_tile + k_block * block[1] * work.in1_bytes
        out_block = block[0] * block[1] * (work.out_bytes_per_tile + work.interm_bytes_per_tile)
        if work.bias:
            out_block += block[1] * work.out_bytes_per_tile
    else:  # element-wise and data movement move their tiles through small circular buffers
        chunk = min(block[0] * block[1], STREAM_TILES)
        in_block = chunk * work.inputs * work.in_bytes_per_tile
        out_block = chunk * work.out_bytes_per_tile
    inputs = int(buffer_factor * in_block)
    return inputs, int(inputs + out_block)


def _idle(tiles: int, cores: int) -> bool:
    """Whether the last of `cores` would hold padding only once each takes ceil(tiles / cores)."""
    return (cores - 1) * math.ceil(tiles / cores) >= tiles


def _shape_reason(work: Work, spec: DeviceSpec, grid: tuple[int, int], stream: str, t: int) -> Reason | None:
    """What rules a grid and stream out whatever the blocks and buffers: the stack, the streaming,
    the padding (checked in the balancer's order)."""
    rows, cols = spec.worker_grid
    within = grid[0] <= rows and grid[1] <= cols or _one_dimensional(work, spec, grid)
    if not within or grid[0] > work.m_tiles or grid[1] > work.n_tiles:
        return Reason.ILLEGAL_STACK_FOR_GRID
    if stream and stream not in work.streamable:
        return Reason.OPERAND_ACCESS_PREVENTS_STREAMING
    if stream:
        cut = work.m_tiles if stream == "R" else work.n_tiles
        per_core = math.ceil(cut / (grid[0] if stream == "R" else grid[1]))
        if t > per_core or per_core % t:
            return Reason.ILLEGAL_STREAMING  # a slice must be a whole number of tiles on every core
    # tt-metal pads the last row and column of cores (last_per_core_M/N): a grid need not divide the
    # tiles, but one whose last row or column would hold padding only is a smaller grid's model
    if work.kind == "matmul" and (_idle(work.m_tiles, grid[0]) or _idle(work.n_tiles, grid[1])):
        return Reason.PADDING_CONSTRAINTS_NOT_SATISFIED
    return None


def _memory_reason(work: Work, spec: DeviceSpec, inputs: int, l1: int) -> Reason | None:
    if inputs > spec.l1_per_core:
        return Reason.INPUT_BUFFER_ALLOCATION_FAILURE
    if l1 > spec.l1_per_core:
        return Reason.L1_USAGE_OVER_MAX_LIMIT
    if work.total_bytes / spec.num_dram_channels > spec.dram_per_channel:
        return Reason.EXCEEDED_DRAM_CHANNEL_CAPACITY
    return None


def _one_dimensional(work: Work, spec: DeviceSpec, grid: tuple[int, int]) -> bool:
    """A matmul's 1D layout longer than a row or column of the grid: tt-metal's 1D multicast
    program (MatmulMultiCoreReuseMultiCast1DProgramConfig) lays a core's columns (or rows) of the
    output over the cores in row-major order, any number up to the whole grid, which is how a
    one-tile-high decode matmul spreads its weights over every core. Only for outputs too short (or
    too narrow) to fill the 2D grid's rows (columns): there tt-metal takes the 2D program."""
    rows, cols = spec.worker_grid
    if work.kind != "matmul" or max(grid) > spec.cores:
        return False
    return grid[0] == 1 and work.m_tiles < rows or grid[1] == 1 and work.n_tiles < cols


def _grids(work: Work, spec: DeviceSpec) -> Iterable[tuple[int, int]]:
    rows, cols = spec.worker_grid
    for r in range(1, rows + 1):
        for c in range(1, cols + 1):
            yield (r, c)
    longer = [(1, c) for c in range(cols + 1, spec.cores + 1)] + [(r, 1) for r in range(rows + 1, spec.cores + 1)]
    yield from (g for g in longer if _one_dimensional(work, spec, g))


def _block(work: Work, grid: tuple[int, int], stream: str, t: int) -> tuple[int, int]:
    m = math.ceil(work.m_tiles / grid[0])
    n = math.ceil(work.n_tiles / grid[1])
    return (math.ceil(m / t), n) if stream == "R" else (m, math.ceil(n / t)) if stream == "C" else (m, n)


def _stream_factors(cut: int) -> tuple[list[int], list[int]]:
    """Slices of a core's `cut` tiles to try: the balancer's powers of two up to the first the tiles
    cannot take, and the other divisors (tt-metal's output blocks may be any divisor of a core's
    tiles: a prime count of tiles slices into single tiles)."""
    powers = []
    for t in STREAM_FACTORS[1:]:
        powers.append(t)
        if t >= cut:
            break
    return powers, [d for d in _divisors(cut) if d > 1 and d not in powers]


@dataclass(frozen=True)
class Fixed:
    """What a matmul's program config fixed: the grid, each core's output tiles (per_core_M x
    per_core_N), the output block its buffers hold at a time (out_block_h x out_block_w) and the K
    block (in0_block_w)."""

    grid: tuple[int, int]
    per_core: tuple[int, int]
    block: tuple[int, int]
    k_block: int


def _fixed_candidate(work: Work, spec: DeviceSpec, fixed: Fixed) -> Candidate:
    """The one op model a program config leaves, with tt-metal's buffers for it."""
    slices = (math.ceil(fixed.per_core[0] / fixed.block[0]), math.ceil(fixed.per_core[1] / fixed.block[1]))
    stream = ("R" if slices[0] > 1 else "") + ("C" if slices[1] > 1 else "")
    # tt-metal double-buffers the inputs when more than one K block (or batch) passes through them
    buffer_factor = 2 if work.batch * math.ceil(work.k_tiles / fixed.k_block) > 1 else 1
    inputs, l1 = _l1(work, fixed.block, fixed.k_block, buffer_factor)
    uneven = fixed.per_core[0] % fixed.block[0] or fixed.per_core[1] % fixed.block[1]
    reason = Reason.ILLEGAL_STREAMING if uneven else _memory_reason(work, spec, inputs, l1)
    return Candidate(fixed.grid, stream, slices[0] * slices[1], fixed.block, fixed.k_block, buffer_factor, l1,
                     _cost(work, spec, fixed.block, slices, buffer_factor), reason, slices)


@lru_cache(maxsize=4096)
def candidates(work: Work, spec: DeviceSpec, fixed: Fixed | None = None) -> tuple[Candidate, ...]:
    """Every candidate op model; `fixed` when the compiler chose the grid and blocks.

    A grid and stream that their shape rules out count once (whatever blocks and buffers would go
    with them); the others once per K block and buffer factor. Stream factors are the divisors of
    a core's tiles and the balancer's powers of two up to the first the op's tiles cannot take."""
    if fixed is not None:
        return (_fixed_candidate(work, spec, fixed),)
    k_blocks = [k for k in (1, 2, 4, 8) if work.k_tiles % k == 0] if work.kind == "matmul" else [1]
    out: list[Candidate] = []

    def add(grid: tuple[int, int], stream: str, t: int) -> bool:
        """Add the shape's candidates; whether every one of them is legal."""
        block = _block(work, grid, stream, t)
        slices = (t, 1) if stream == "R" else (1, t) if stream == "C" else (1, 1)
        reason = _shape_reason(work, spec, grid, stream, t)
        if reason is not None:
            inputs, l1 = _l1(work, block, k_blocks[0], 1)
            out.append(Candidate(grid, stream, t, block, k_blocks[0], 1, l1, 0, reason, slices))
            return False
        legal = True
        cycles = {factor: _cost(work, spec, block, slices, factor) for factor in (1, 2)}  # the K block costs nothing
        for k_block in k_blocks:
            for buffer_factor in (1, 2):
                inputs, l1 = _l1(work, block, k_block, buffer_factor)
                memory = _memory_reason(work, spec, inputs, l1)
                legal = legal and memory is None
                out.append(Candidate(grid, stream, t, block, k_block, buffer_factor, l1, cycles[buffer_factor],
                                     memory, slices))
        return legal

    for grid in _grids(work, spec):
        add(grid, "", 1)
        if grid[0] > work.m_tiles or grid[1] > work.n_tiles:
            continue  # the stack alone rules it out: no streams to try
        for direction, cut in (("R", math.ceil(work.m_tiles / grid[0])), ("C", math.ceil(work.n_tiles / grid[1]))):
            powers, others = _stream_factors(cut)
            fitted = [t for t in powers if add(grid, direction, t)]
            # more slices only add re-reads and handshakes: past a factor whose every model fits,
            # the other divisors cannot be chosen by any policy
            for t in others:
                if any(f < t for f in fitted) or add(grid, direction, t):
                    break
    return tuple(out)


def choose(models: Sequence[Candidate], policy: Policy, target_cycles: int | None = None) -> Candidate | None:
    legal = [m for m in models if m.reason is None]
    if not legal:
        return None
    if policy is Policy.FEWEST_CORES:
        return min(legal, key=lambda m: (m.cores, m.cycles))
    if policy is Policy.NLP:
        target = target_cycles if target_cycles is not None else min(m.cycles for m in legal)
        meeting = [m for m in legal if m.cycles <= target]
        return min(meeting, key=lambda m: (m.cores, m.cycles)) if meeting else min(legal, key=lambda m: m.cycles)
    return min(legal, key=lambda m: (m.cycles, m.cores, -m.buffer_factor))


def _compiler_choice(op: Op, work: Work) -> Fixed | None:
    """The grid and blocks a matmul's program config fixed, if the compiler fixed them."""
    config = op.attrs.get("matmul_program_config")
    if not isinstance(config, dict) or "compute_with_storage_grid_size" not in config:
        return None
    x, y = (int(v) for v in config["compute_with_storage_grid_size"])
    per_m, per_n = max(1, int(config.get("per_core_m", 1))), max(1, int(config.get("per_core_n", 1)))
    rows = min(y, math.ceil(work.m_tiles / per_m))
    cols = min(x, math.ceil(work.n_tiles / per_n))
    # configs without output blocks hold a core's whole output at once
    block = (max(1, int(config.get("out_block_h", per_m))), max(1, int(config.get("out_block_w", per_n))))
    return Fixed((max(1, rows), max(1, cols)), (per_m, per_n), block, max(1, int(config.get("in0_block_w", 1))))


class PlacementError(Exception):
    pass


def nlp_targets(ops: Sequence[Op], spec: DeviceSpec, window: int = 1) -> list[int | None]:
    """Per op, the execution time the NLP policy aims for: the slowest best time among the op and
    its `window` placed neighbours on each side (ops that occupy no cores are skipped), so each
    op takes the fewest cores that keep pace with its neighbours."""
    best: list[int | None] = []
    for op in ops:
        work = work_of(op)
        legal = [m.cycles for m in candidates(work, spec, _compiler_choice(op, work)) if m.reason is None] \
            if work is not None else []
        best.append(min(legal) if legal else None)
    placed = [i for i, b in enumerate(best) if b is not None]
    targets: list[int | None] = [None] * len(ops)
    for position, i in enumerate(placed):
        neighbours = placed[max(0, position - window):position + window + 1]
        targets[i] = max(best[j] for j in neighbours)  # type: ignore[type-var]
    return targets


def place(op: Op, spec: DeviceSpec, policy: Policy = Policy.FEWEST_CYCLES,
          target_cycles: int | None = None, memo: dict | None = None) -> OpPlacement | None:
    """The op model for `op` on `spec`; None if the op occupies no cores; raises if none is legal.
    `memo` keeps placements by what they depend on: a model's repeated layers are placed once."""
    work = work_of(op)
    if work is None:
        return None
    fixed = _compiler_choice(op, work)
    if fixed is not None and (fixed.grid[0] > spec.worker_grid[0] or fixed.grid[1] > spec.worker_grid[1]):
        # compiled for a larger grid than this device has (rows harvested since): it cannot run here
        raise PlacementError(f"{op.name}'s program config needs a {fixed.grid[0]}x{fixed.grid[1]} core grid; "
                             f"the device has {spec.worker_grid[0]}x{spec.worker_grid[1]} (harvesting mask "
                             f"{spec.harvesting_mask:#b}): compile with the harvested device's descriptor")
    key = (op.name, work, fixed, spec, policy, target_cycles)
    if memo is not None and key in memo:
        return memo[key]
    placement = _place_work(op.name, work, fixed, spec, policy, target_cycles)
    if memo is not None:
        memo[key] = placement
    return placement


def _place_work(name: str, work: Work, fixed: Fixed | None, spec: DeviceSpec, policy: Policy,
                target_cycles: int | None) -> OpPlacement:
    models = candidates(work, spec, fixed)
    chosen = choose(models, policy, target_cycles)
    rejected = Counter(m.reason.value for m in models if m.reason is not None)
    if chosen is None and fixed is not None:
        # The compiler's own choice is honoured even where this model calls it illegal; the
        # record says so (legal = 0, with the reasons).
        chosen = models[0]
    if chosen is None:
        reasons = ", ".join(f"{r} x{n}" for r, n in rejected.most_common())
        raise PlacementError(f"no legal op model for {name} on the {spec.worker_grid[0]}x{spec.worker_grid[1]} "
                             f"grid ({len(models)} tried: {reasons})")
    return OpPlacement(ttnn_op=name, grid=chosen.grid, block_tiles=chosen.block, buffer_factor=chosen.buffer_factor,
                       l1_bytes_per_core=chosen.l1_bytes, cycles=chosen.cycles, candidates=len(models),
                       legal=sum(1 for m in models if m.reason is None), rejected=dict(rejected),
                       fixed_by_compiler=fixed is not None, t_stream=chosen.stream_label, policy=policy.value)
