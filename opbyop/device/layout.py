"""TTNN tensor layouts: tiled or row-major, element format, buffer type, memory layout, grid.

Read from `#ttnn.ttnn_layout<affine map, <grid>, memref<shard shape x element, #buffer>, <memory layout>>`.
A tiled tensor's last two dimensions are padded to whole tiles: what it occupies, not what it holds.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, ConfigDict

from opbyop.device.formats import BYTES_PER_ELEMENT

_MEMREF = re.compile(r"memref<((?:\d+x)*)(!ttcore\.tile<(\d+)x(\d+), (\w+)>|([a-z]\w*)), #(\w+)>")
_GRID = re.compile(r"\), <(\d+)x(\d+)(?:, \(.*?\))?>, memref")
_MEMORY_LAYOUT = re.compile(r"<(interleaved|height_sharded|width_sharded|block_sharded)>")
_FORMAT = {"ui32": "u32", "ui16": "u16", "ui8": "u8", "i32": "si32"}


class Layout(BaseModel):
    model_config = ConfigDict(frozen=True)

    tiled: bool = False
    tile: tuple[int, int] = (32, 32)
    dtype: str = "f32"
    buffer: str = "dram"  # dram | l1 | system_memory
    memory_layout: str | None = "interleaved"  # None for system memory
    grid: tuple[int, int] = (1, 1)
    shard_shape: tuple[int, ...] = ()  # memref shape (tiles when tiled)

    @property
    def on_device(self) -> bool:
        return self.buffer in ("dram", "l1")

    @property
    def sharded(self) -> bool:
        return bool(self.memory_layout and self.memory_layout.endswith("sharded"))

    def padded_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if not self.tiled or not shape:
            return shape
        if len(shape) == 1:
            return (self.tile[0], _round_up(shape[0], self.tile[1]))
        *outer, h, w = shape
        return (*outer, _round_up(h, self.tile[0]), _round_up(w, self.tile[1]))

    def page_bytes(self, shape: tuple[int, ...]) -> int:
        """One page: a tile when tiled, one row (last dimension) when row-major."""
        per = BYTES_PER_ELEMENT.get(self.dtype, 4.0)
        if self.tiled:
            return math.ceil(self.tile[0] * self.tile[1] * per)
        return max(1, math.ceil((shape[-1] if shape else 1) * per))

    def pages(self, shape: tuple[int, ...]) -> int:
        padded = self.padded_shape(shape)
        elements = math.prod(padded) if padded else 1
        if self.tiled:
            return max(1, elements // (self.tile[0] * self.tile[1]))
        return max(1, elements // max(1, padded[-1] if padded else 1))

    def nbytes(self, shape: tuple[int, ...]) -> int:
        return self.pages(shape) * self.page_bytes(shape)

    def with_(self, **changes: object) -> Layout:
        return self.model_copy(update=changes)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def parse_layout(text: str) -> Layout | None:
    """Layout of a `#ttnn.ttnn_layout<...>` encoding; None for other encodings."""
    if "ttnn_layout" not in text:
        return None
    m = _MEMREF.search(text)
    if m is None:
        return None
    dims = tuple(int(d) for d in m.group(1).split("x") if d)
    tiled = m.group(2).startswith("!ttcore.tile")
    dtype = m.group(5) if tiled else m.group(6)
    grid = _GRID.search(text)
    memory = _MEMORY_LAYOUT.search(text)
    buffer = m.group(7)
    return Layout(tiled=tiled, tile=(int(m.group(3)), int(m.group(4))) if tiled else (32, 32),
                  dtype=_FORMAT.get(dtype, dtype), buffer=buffer,
                  memory_layout=memory.group(1) if memory else (None if buffer == "system_memory" else "interleaved"),
                  grid=(int(grid.group(1)), int(grid.group(2))) if grid else (1, 1), shard_shape=dims)


DRAM_ROW_MAJOR = Layout()
