"""The chip: read from the system descriptor the compiler prints into every TTNN program.

`#ttcore.system_desc<... arch = <blackhole>, grid = 10x13, l1_size = ..., num_dram_channels = ...>`
carries what the simulator needs: worker grid, L1 per core and its reserved base, DRAM channels,
alignments, data formats. Harvesting disables whole rows: the harvesting mask has one bit per row.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from opbyop.errors import OpbyopError

_FIELDS = {
    "arch": r"arch = <(\w+)>", "grid": r"grid = (\d+)x(\d+)", "l1_size": r"l1_size = (\d+)",
    "num_dram_channels": r"num_dram_channels = (\d+)", "dram_channel_size": r"dram_channel_size = (\d+)",
    "noc_l1_address_align_bytes": r"noc_l1_address_align_bytes = (\d+)",
    "noc_dram_address_align_bytes": r"noc_dram_address_align_bytes = (\d+)",
    "l1_unreserved_base": r"l1_unreserved_base = (\d+)", "dram_unreserved_base": r"dram_unreserved_base = (\d+)",
    "dst_physical_size_tiles": r"dst_physical_size_tiles = (\d+)", "num_cbs": r"num_cbs = (\d+)",
}


class DeviceSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    arch: str  # wormhole_b0 | blackhole
    grid_y: int
    grid_x: int
    l1_size: int
    l1_unreserved_base: int
    num_dram_channels: int
    dram_channel_size: int
    dram_unreserved_base: int = 0
    noc_l1_address_align_bytes: int = 16
    noc_dram_address_align_bytes: int = 32
    dst_physical_size_tiles: int = 16
    num_cbs: int = 64
    harvesting_mask: int = Field(0, description="one bit per row of the full grid; set = row disabled")
    clock_mhz: int = 1000
    dram_bytes_per_cycle: float = 256.0  # whole chip
    noc_bytes_per_cycle: float = 32.0  # per core

    @property
    def harvested_rows(self) -> int:
        return bin(self.harvesting_mask).count("1")

    @property
    def worker_grid(self) -> tuple[int, int]:
        """(rows, columns) of usable Tensix cores after harvesting."""
        return (self.grid_y - self.harvested_rows, self.grid_x)

    @property
    def cores(self) -> int:
        rows, cols = self.worker_grid
        return rows * cols

    @property
    def l1_per_core(self) -> int:
        """L1 bytes a program may use on one core."""
        return self.l1_size - self.l1_unreserved_base

    @property
    def dram_per_channel(self) -> int:
        return self.dram_channel_size - self.dram_unreserved_base

    def harvested(self, mask: int) -> DeviceSpec:
        if bin(mask).count("1") >= self.grid_y:
            raise OpbyopError(f"harvesting mask {mask:#b} disables every row of a {self.grid_y}-row grid",
                              "harvest fewer rows")
        return self.model_copy(update={"harvesting_mask": mask})

    @classmethod
    def from_system_desc(cls, text: str) -> DeviceSpec:
        """Parse the `#ttcore.system_desc<...>` a TTNN program carries (its first chip)."""
        start = text.find("#ttcore.system_desc<")
        if start < 0:
            raise OpbyopError("the program carries no #ttcore.system_desc", "pass a ttnn_runtime dump of tt-mlir")
        desc = text[start:text.find("\n", start)]
        values: dict[str, object] = {}
        for name, pattern in _FIELDS.items():
            m = re.search(pattern, desc)
            if m is None:
                continue
            if name == "grid":
                values["grid_y"], values["grid_x"] = int(m.group(1)), int(m.group(2))
            elif name == "arch":
                values["arch"] = m.group(1)
            else:
                values[name] = int(m.group(1))
        values.update(_PERFORMANCE.get(str(values.get("arch")), {}))
        return cls(**values)


# Not in the descriptor: clock and bandwidths, used by the cost model only. Sources:
# - clock: Tenstorrent's board specifications, docs.tenstorrent.com/aibs/wormhole/specifications.html
#   (n150: AI clock 1 GHz) and docs.tenstorrent.com/aibs/blackhole/specifications (p150: 1.35 GHz);
# - DRAM bandwidth: what tt-metal's DRAM read microbenchmark measures with one well-placed reader
#   per bank, the most an op can draw (tenstorrent/tt-metal tech_reports/Saturating_DRAM_bandwidth:
#   Wormhole 267 GB/s of the 288 its spec gives at 12 GBps; its _Blackhole.md: 500 of 512 GB/s);
#   bytes per cycle = bandwidth / clock;
# - NoC: what one worker core injects or absorbs per cycle in Tenstorrent's NoC performance
#   estimator, tenstorrent/tt-npe tt_npe/cpp/include/device_models/wormhole_b0.hpp (28.1 B/cycle)
#   and blackhole.hpp (60.9 B/cycle).
_PERFORMANCE: dict[str, dict[str, float]] = {
    "wormhole_b0": {"clock_mhz": 1000, "dram_bytes_per_cycle": 267e9 / 1.0e9, "noc_bytes_per_cycle": 28.1},
    "blackhole": {"clock_mhz": 1350, "dram_bytes_per_cycle": 500e9 / 1.35e9, "noc_bytes_per_cycle": 60.9},
}

# Presets from the chips' SoC descriptors (tt-metal's wormhole_b0_80_arch.yaml, blackhole_140_arch.yaml), for use without a compiled program.
WORMHOLE_N150 = DeviceSpec(arch="wormhole_b0", grid_y=8, grid_x=8, l1_size=1_499_136, l1_unreserved_base=103_712,
                           num_dram_channels=12, dram_channel_size=1_073_741_824,
                           noc_dram_address_align_bytes=32, **_PERFORMANCE["wormhole_b0"])
BLACKHOLE_P150 = DeviceSpec(arch="blackhole", grid_y=10, grid_x=13, l1_size=1_572_864, l1_unreserved_base=177_280,
                            num_dram_channels=8, dram_channel_size=4_278_190_080,
                            noc_dram_address_align_bytes=64, **_PERFORMANCE["blackhole"])
PRESETS: dict[str, DeviceSpec] = {"n150": WORMHOLE_N150, "p150": BLACKHOLE_P150}


def dram_bytes(spec: DeviceSpec) -> int:
    """DRAM a program may use on one chip: every channel's unreserved bytes."""
    return spec.num_dram_channels * spec.dram_per_channel
