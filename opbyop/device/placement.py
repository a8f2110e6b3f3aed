"""Placing one TTNN compute op on the core grid (the pybuda balancer's idea, seed 001).

For each op, candidate op models are enumerated: a grid of cores (r, c) within the worker grid, a
block of output tiles per core, a K block, and a buffer factor (2 = double-buffered). Each is
checked against the chip (L1 per core, DRAM per channel, tile counts) and rejected with one reason
from the seed's list; a policy picks one legal model. Cycles are a model, not a measurement:
compute per core (tiles x cycles per tile, by math fidelity and data format) against the data it
must read from DRAM and over the NoC, overlapped when double-buffered.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Iterable

from opbyop.device.arch import DeviceSpec
from opbyop.device.formats import BYTES_PER_ELEMENT, FIDELITY_PHASES
from opbyop.device.program import Op, TensorType
from opbyop.records import OpPlacement

TILE = 32
TILE_ELEMENTS = TILE * TILE
OP_OVERHEAD_CYCLES = 2_000  # dispatch and kernel launch, per op
MATMUL_TILE_CYCLES = 16  # one 32x32x32 tile product at LoFi on bf16 operands
SFPU_TILE_CYCLES = 64  # one tile of a transcendental on the vector unit
FPU_TILE_CYCLES = 16  # one tile of an element-wise add/multiply
STREAM_TILES = 8  # element-wise and data-movement ops stream through L1 in chunks of this many tiles


class Reason(str, Enum):
    """Why a candidate op model was rejected (the seed balancer's names)."""

    ILLEGAL_STACK_FOR_GRID = "IllegalStackForGrid"
    L1_USAGE_OVER_MAX_LIMIT = "L1UsageOverMaxLimit"
    EXCEEDED_DRAM_CHANNEL_CAPACITY = "ExceededDramChannelCapacity"
    INPUT_BUFFER_ALLOCATION_FAILURE = "InputBufferAllocationFailure"
    PADDING_CONSTRAINTS_NOT_SATISFIED = "PaddingConstraintsNotSatisfied"


class Policy(str, Enum):
    FEWEST_CYCLES = "fewest_cycles"
    FEWEST_CORES = "fewest_cores"
    BALANCED = "balanced"  # fewest cores that still meet a target time (e.g. the slowest neighbour's)


@dataclass(frozen=True)
class Candidate:
    grid: tuple[int, int]
    block: tuple[int, int]  # output tiles per core (rows, columns)
    k_block: int
    buffer_factor: int
    l1_bytes: int
    cycles: int
    reason: Reason | None  # None: legal

    @property
    def cores(self) -> int:
        return self.grid[0] * self.grid[1]


@dataclass(frozen=True)
class Work:
    """An op reduced to what placement needs: an (M x N) tile output, K tiles deep."""

    kind: str  # matmul | eltwise | sfpu | data
    m_tiles: int
    n_tiles: int
    k_tiles: int
    batch: int
    in_bytes_per_tile: float
    out_bytes_per_tile: float
    inputs: int
    fidelity: str
    total_bytes: int  # everything read and written, for the DRAM bound


MATRIX_OPS = {"ttnn.matmul", "ttnn.linear", "ttnn.conv2d"}
SFPU_OPS = {"ttnn.exp", "ttnn.log", "ttnn.sqrt", "ttnn.rsqrt", "ttnn.tanh", "ttnn.sigmoid", "ttnn.gelu",
            "ttnn.silu", "ttnn.sin", "ttnn.cos", "ttnn.erf", "ttnn.reciprocal", "ttnn.pow_scalar", "ttnn.divide",
            "ttnn.softmax", "ttnn.rms_norm", "ttnn.layer_norm", "ttnn.pow"}
NOT_PLACED = {"ttnn.deallocate", "ttnn.get_device", "ttcore.load_cached", "ttnn.reshape"}  # no kernel, no cores


def _tiles(n: int) -> int:
    return max(1, math.ceil(n / TILE))


def _bytes(t: TensorType | None) -> float:
    return BYTES_PER_ELEMENT.get(t.storage if t else "f32", 4.0)


def _size(t: TensorType | None) -> int:
    return math.ceil(math.prod(t.shape or (1,)) * _bytes(t)) if t else 0


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
    if op.name in MATRIX_OPS:
        shape = out.shape or (1,)
        m = math.prod(shape[:-1]) if len(shape) > 1 else 1
        if op.name == "ttnn.conv2d":
            kh, kw = (int(k) for k in op.attrs.get("kernel_size", [1, 1]))
            k = kh * kw * int(op.attrs.get("in_channels", 1)) // max(1, int(op.attrs.get("groups", 1)))
            batch = 1
        else:
            a = tensors[0].shape or (1,)
            k = a[-2] if op.attrs.get("transpose_a") else a[-1]
            batch = math.prod(shape[:-2]) if len(shape) > 2 else 1
            m = shape[-2] if len(shape) > 1 else 1
        return Work("matmul", _tiles(m), _tiles(shape[-1]), _tiles(k), batch, in_b, out_b, 2, fidelity, total)
    shape = out.shape or (1,)
    rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
    kind = "sfpu" if op.name in SFPU_OPS else ("eltwise" if op.name.startswith("ttnn.") else "data")
    if op.name in ("ttnn.permute", "ttnn.concat", "ttnn.slice_static", "ttnn.repeat", "ttnn.to_layout",
                   "ttnn.typecast", "ttnn.pad", "ttnn.embedding", "ttnn.rows_gather", "ttnn.transpose"):
        kind = "data"
    return Work(kind, _tiles(rows), _tiles(shape[-1]), 1, 1, in_b, out_b, max(1, len(tensors)), fidelity, total)


def _grids(spec: DeviceSpec) -> Iterable[tuple[int, int]]:
    rows, cols = spec.worker_grid
    for r in range(1, rows + 1):
        for c in range(1, cols + 1):
            yield (r, c)


def _cost(work: Work, spec: DeviceSpec, block: tuple[int, int], buffer_factor: int) -> int:
    tiles_per_core = block[0] * block[1] * work.batch
    if work.kind == "matmul":
        per_tile = MATMUL_TILE_CYCLES * FIDELITY_PHASES.get(work.fidelity, 4) * (2 if work.in_bytes_per_tile >= 4096 else 1)
        compute = tiles_per_core * work.k_tiles * per_tile
        noc_bytes = (block[0] + block[1]) * work.k_tiles * work.in_bytes_per_tile * work.batch
    else:
        per_tile = {"sfpu": SFPU_TILE_CYCLES, "eltwise": FPU_TILE_CYCLES}.get(work.kind, 0)
        compute = tiles_per_core * per_tile * work.inputs
        noc_bytes = tiles_per_core * (work.inputs * work.in_bytes_per_tile + work.out_bytes_per_tile)
    noc = noc_bytes / spec.noc_bytes_per_cycle  # this core's reads and writes
    dram = work.total_bytes / spec.dram_bytes_per_cycle  # the whole op's traffic, shared by all cores
    data = max(noc, dram)
    body = max(compute, data) if buffer_factor >= 2 else compute + data
    return int(OP_OVERHEAD_CYCLES + body)


def _check(work: Work, spec: DeviceSpec, grid: tuple[int, int], block: tuple[int, int], k_block: int,
           buffer_factor: int) -> tuple[int, Reason | None]:
    if work.kind == "matmul":  # whole output blocks stay in L1 while K streams through
        in_block = (block[0] * k_block + k_block * block[1]) * work.in_bytes_per_tile
        out_block = block[0] * block[1] * work.out_bytes_per_tile
    else:  # element-wise and data movement stream their tiles through small circular buffers
        chunk = min(block[0] * block[1], STREAM_TILES)
        in_block = chunk * work.inputs * work.in_bytes_per_tile
        out_block = chunk * work.out_bytes_per_tile
    l1 = int(buffer_factor * in_block + out_block)
    if grid[0] > spec.worker_grid[0] or grid[1] > spec.worker_grid[1]:
        return l1, Reason.ILLEGAL_STACK_FOR_GRID
    if grid[0] > work.m_tiles or grid[1] > work.n_tiles:
        return l1, Reason.ILLEGAL_STACK_FOR_GRID
    if work.kind == "matmul" and (work.m_tiles % grid[0] or work.n_tiles % grid[1]):
        return l1, Reason.PADDING_CONSTRAINTS_NOT_SATISFIED
    if buffer_factor * in_block > spec.l1_per_core:
        return l1, Reason.INPUT_BUFFER_ALLOCATION_FAILURE
    if l1 > spec.l1_per_core:
        return l1, Reason.L1_USAGE_OVER_MAX_LIMIT
    if work.total_bytes / spec.num_dram_channels > spec.dram_per_channel:
        return l1, Reason.EXCEEDED_DRAM_CHANNEL_CAPACITY
    return l1, None


def candidates(work: Work, spec: DeviceSpec, fixed: tuple[tuple[int, int], tuple[int, int], int] | None = None) -> list[Candidate]:
    """Every candidate op model; `fixed` = (grid, block, k_block) when the compiler chose them."""
    options = []
    if fixed is not None:
        options = [(fixed[0], fixed[1], fixed[2])]
    else:
        k_blocks = [k for k in (1, 2, 4, 8) if work.k_tiles % k == 0] if work.kind == "matmul" else [1]
        for grid in _grids(spec):
            block = (math.ceil(work.m_tiles / grid[0]), math.ceil(work.n_tiles / grid[1]))
            options.extend((grid, block, k) for k in k_blocks)
    out = []
    for grid, block, k_block in options:
        for buffer_factor in (1, 2):
            l1, reason = _check(work, spec, grid, block, k_block, buffer_factor)
            out.append(Candidate(grid, block, k_block, buffer_factor, l1,
                                 _cost(work, spec, block, buffer_factor), reason))
    return out


def choose(models: list[Candidate], policy: Policy, target_cycles: int | None = None) -> Candidate | None:
    legal = [m for m in models if m.reason is None]
    if not legal:
        return None
    if policy is Policy.FEWEST_CORES:
        return min(legal, key=lambda m: (m.cores, m.cycles))
    if policy is Policy.BALANCED:
        target = target_cycles if target_cycles is not None else int(min(m.cycles for m in legal) * 1.1)
        meeting = [m for m in legal if m.cycles <= target]
        return min(meeting, key=lambda m: (m.cores, m.cycles)) if meeting else min(legal, key=lambda m: m.cycles)
    return min(legal, key=lambda m: (m.cycles, m.cores, -m.buffer_factor))


def _compiler_choice(op: Op, work: Work) -> tuple[tuple[int, int], tuple[int, int], int] | None:
    """The grid and blocks a matmul's program config fixed, if the compiler fixed them."""
    config = op.attrs.get("matmul_program_config")
    if not isinstance(config, dict) or "compute_with_storage_grid_size" not in config:
        return None
    x, y = (int(v) for v in config["compute_with_storage_grid_size"])
    per_m, per_n = int(config.get("per_core_m", 1)), int(config.get("per_core_n", 1))
    rows = min(y, math.ceil(work.m_tiles / per_m))
    cols = min(x, math.ceil(work.n_tiles / per_n))
    return ((max(1, rows), max(1, cols)), (per_m, per_n), max(1, int(config.get("in0_block_w", 1))))


class PlacementError(Exception):
    pass


def place(op: Op, spec: DeviceSpec, policy: Policy = Policy.FEWEST_CYCLES,
          target_cycles: int | None = None) -> OpPlacement | None:
    """The op model for `op` on `spec`; None if the op occupies no cores; raises if none is legal."""
    work = work_of(op)
    if work is None:
        return None
    fixed = _compiler_choice(op, work)
    models = candidates(work, spec, fixed)
    chosen = choose(models, policy, target_cycles)
    rejected = Counter(m.reason.value for m in models if m.reason is not None)
    if chosen is None and fixed is not None:
        # The compiler's own choice is honoured even where this model calls it illegal; the
        # record says so (legal = 0, with the reasons).
        chosen = max(models, key=lambda m: m.buffer_factor)
    if chosen is None:
        reasons = ", ".join(f"{r} x{n}" for r, n in rejected.most_common())
        raise PlacementError(f"no legal op model for {op.name} on the {spec.worker_grid[0]}x{spec.worker_grid[1]} "
                             f"grid ({len(models)} tried: {reasons})")
    return OpPlacement(ttnn_op=op.name, grid=chosen.grid, block_tiles=chosen.block, buffer_factor=chosen.buffer_factor,
                       l1_bytes_per_core=chosen.l1_bytes, cycles=chosen.cycles, candidates=len(models),
                       legal=sum(1 for m in models if m.reason is None), rejected=dict(rejected),
                       fixed_by_compiler=fixed is not None)
