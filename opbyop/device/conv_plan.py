"""How tt-metal's conv2d shards a convolution over a Blackhole p150 and blocks its reduction: the
choice that decides which partial sums the chip rounds, so the model's numerics follow it.

tt-metal picks a sharding for a convolution whose input is not sharded yet (tt-mlir's programs
hand it an interleaved DRAM tensor) by estimating the L1 each kind of sharding needs per core and
taking the smallest (ttnn/cpp/ttnn/operations/conv/conv2d/conv2d_utils.cpp,
determine_conv_config_for_auto_shard and calculate_L1_usage_for_conv_op): height sharding unless
block sharding needs less and spreads over at least a row of the grid, then width sharding if it
needs less still. Each estimate is the op's circular buffers (conv2d_op_program_factory_common.cpp,
get_cb_info), its output shard, and the halo's output: the input rows a core reads, counted as
sliding_window's calculate_precise_halo_output_elems counts them. This module estimates the same
terms (the ones that differ between the shardings: weights, activation and tilized activation
blocks, reader indices, output shard, halo rows) and picks as tt-metal does.

The reduction (K) is cut into blocks (determine_per_core_conv_block_config): height sharded, one
block per kernel row holding its kw taps of every input channel (padded to 8, L1's alignment
over bf16 sticks); block sharded, one per kernel row and per core column's chunk of channels
(Cin padded to the columns times 8); width sharded, one per core's chunk of channels holding all
kh x kw taps (channels padded to 32). A block's K is padded with zeros to whole tiles.

Measured against tt-metal itself (ttnn 0.81.1, graph capture in NO_DISPATCH mode on ttsim's
p150, random convolutions: 1 to 1024 channels, images 4 to 224, kernels 1 to 7, strides 1-2,
dilation, groups, batch, f32 and bf16): the same sharding on 599 of 600, and on every one of those
the same channel chunks and block widths (tests/data/conv_sharding_tt_metal.json holds a sample).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

TILE = 32
# A p150's compute grid as ttsim opens it (columns x rows): the kernels do not see the device.
GRID_COLUMNS, GRID_ROWS = 13, 10
STICK_ALIGNMENT = 8  # input channels per L1-aligned bf16 stick (16 B): get_input_channels_alignment
SCRATCHPAD_BYTES = 64  # the L1 scratchpad circular buffer (l1_scratchpad_CB_size)


class Sharding(str, Enum):
    HEIGHT = "height"
    BLOCK = "block"
    WIDTH = "width"


@dataclass(frozen=True)
class Conv:
    """A convolution as tt-metal's conv2d is called: NHWC input, (Cout, Cin/groups, kh, kw) weights."""

    batch: int
    height: int
    width: int
    cin: int
    cout: int
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, bottom, left, right
    dilation: tuple[int, int] = (1, 1)
    input_bytes: int = 4  # f32 4, bf16 2 (the halo's row-major sticks)
    output_bytes: int = 4

    @property
    def out_size(self) -> tuple[int, int]:
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        top, bottom, left, right = self.padding
        return ((self.height + top + bottom - dh * (kh - 1) - 1) // sh + 1,
                (self.width + left + right - dw * (kw - 1) - 1) // sw + 1)

    @property
    def pixels(self) -> int:
        oh, ow = self.out_size
        return self.batch * oh * ow

    @property
    def is_matmul(self) -> bool:
        """A 1x1, stride-1, unpadded convolution: tt-metal runs it as a matmul (use_matmul_for_1x1_conv)."""
        return self.kernel == (1, 1) and self.stride == (1, 1) and not any(self.padding) and self.dilation == (1, 1)


@dataclass(frozen=True)
class ConvPlan:
    """tt-metal's sharding of a convolution and the blocks its reduction is cut into."""

    sharding: Sharding
    chunk: int  # input channels per block (padded: the padding channels are zeros)
    chunks: int  # channel chunks (core columns block sharded, cores width sharded; 1 height sharded)
    cores: int  # cores the op spreads over (the larger of its input and output grids)
    l1_bytes: int  # the per-core L1 estimate it was chosen by

    def blocks(self, kernel_rows: int) -> list[tuple[int | None, int]]:
        """(kernel row, channel chunk) of each block in the order the compute kernel
        (conv_bmm_tilize.cpp) accumulates them; the row is None where a block holds every row."""
        if self.sharding is Sharding.WIDTH:
            return [(None, chunk) for chunk in range(self.chunks)]
        return [(row, chunk) for row in range(kernel_rows) for chunk in range(self.chunks)]


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _div_up(a, b) * b


def divisor_with_padding(num: int, start: int) -> int:
    """The largest divisor count from `start` down whose padding of `num` stays under one share
    (tt-metal's find_closest_largest_divisor_with_num_padding)."""
    divisor = start
    while divisor > 1 and _round_up(num, divisor) - num >= _round_up(num, divisor) // divisor:
        divisor -= 1
    return divisor


def _halo_sticks(conv: Conv, per_core: int) -> int:
    """The most padded-input sticks (pixels of all channels) one core reads for `per_core` output
    pixels: from its first output's window start to its last output's window end, in the padded
    image flattened row by row (calculate_precise_halo_output_elems)."""
    (kh, kw), (sh, sw), (dh, dw) = conv.kernel, conv.stride, conv.dilation
    top, bottom, left, right = conv.padding
    hp, wp = conv.height + top + bottom, conv.width + left + right
    oh, ow = conv.out_size

    def start(pixel: int) -> int:
        n, rest = divmod(pixel, oh * ow)
        y, x = divmod(rest, ow)
        return n * hp * wp + y * sh * wp + x * sw

    reach = (kh - 1) * dh * wp + (kw - 1) * dw
    return max(start(min(first + per_core, conv.pixels) - 1) + reach - start(first) + 1
               for first in range(0, conv.pixels, per_core))


def _estimate(conv: Conv, sharding: Sharding) -> ConvPlan:
    """The sharding's grid, channel chunks and L1 per core (calculate_L1_usage_for_conv_op)."""
    kh, kw = conv.kernel
    pixel_tiles = _div_up(conv.pixels, TILE)
    out_tiles = _div_up(conv.cout, TILE)
    alignment = TILE if sharding is Sharding.WIDTH else STICK_ALIGNMENT
    if sharding is Sharding.HEIGHT:
        rows, chunks, out_columns = divisor_with_padding(pixel_tiles, GRID_COLUMNS * GRID_ROWS), 1, 1
        cores = rows
    elif sharding is Sharding.BLOCK:
        rows = divisor_with_padding(pixel_tiles, GRID_ROWS)
        chunks = divisor_with_padding(_div_up(conv.cin, alignment), GRID_COLUMNS)
        out_columns = divisor_with_padding(out_tiles, GRID_COLUMNS)
        cores = rows * max(chunks, out_columns)
    else:
        rows = 1
        chunks = divisor_with_padding(_div_up(conv.cin, TILE), GRID_COLUMNS * GRID_ROWS)
        out_columns = divisor_with_padding(out_tiles, GRID_COLUMNS * GRID_ROWS)
        cores = max(chunks, out_columns)
    chunk = _round_up(conv.cin, chunks * alignment) // chunks
    shard_rows = _round_up(conv.pixels, rows * TILE) // rows  # output pixels per core
    height_tiles = shard_rows // TILE
    width_tiles = _round_up(conv.cout, out_columns * TILE) // out_columns // TILE
    block_width = _div_up(chunk * kh * kw, TILE) if sharding is Sharding.WIDTH else _div_up(chunk * kw, TILE)
    tile_in, tile_out = TILE * TILE * conv.input_bytes, TILE * TILE * conv.output_bytes
    buffers = (width_tiles * block_width * tile_in  # a block of weights (in the input's format)
               + height_tiles * block_width * (tile_in if sharding is Sharding.HEIGHT else tile_out)  # activations
               + height_tiles * block_width * tile_out  # tilized activations
               + (2 * block_width * tile_in if sharding is Sharding.WIDTH else 0)  # width sharding's row-major blocks
               + shard_rows * 2 + SCRATCHPAD_BYTES)  # reader indices, scratchpad
    output = height_tiles * width_tiles * tile_out
    halo = _halo_sticks(conv, conv.pixels if sharding is Sharding.WIDTH else shard_rows) * chunk * conv.input_bytes
    return ConvPlan(sharding, chunk, chunks, cores, buffers + output + halo)


def plan(conv: Conv) -> ConvPlan:
    """tt-metal's sharding of `conv` (determine_conv_config_for_auto_shard): height unless block
    sharding needs less L1 and uses at least a grid row's cores, then width if it needs less still."""
    best = _estimate(conv, Sharding.HEIGHT)
    block = _estimate(conv, Sharding.BLOCK)
    if block.l1_bytes < best.l1_bytes and block.cores >= GRID_COLUMNS:
        best = block
    width = _estimate(conv, Sharding.WIDTH)
    if width.l1_bytes < best.l1_bytes and not conv.is_matmul:
        best = width
    return best
