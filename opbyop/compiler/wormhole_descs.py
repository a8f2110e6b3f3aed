"""Wormhole mesh descriptors (n300, T3K), made by opbyop since the plugin's mock mode cannot.

The plugin describes Blackhole meshes in tt-metal's mock mode, but not Wormhole ones (it ships no
Wormhole firmware toolchain). A Blackhole descriptor the plugin wrote gives what does not depend on
the chips (its schema hash, version, CPU and chip coordinates: one entry, the same for a p150 as for
eight of them); each chip is then described with the Wormhole chip of the vendored n150 descriptor
(the chip of an n300 or a T3K is the same Wormhole: 8x8 compute grid, 1,499,136 B of L1, 12 GiB of
DRAM in 12 channels), and the board's MMIO chips and ethernet links are read from UMD's cluster
descriptor of that board. Derived from the p150's descriptor, a T3K is byte for byte the one derived
from the plugin's own 8-chip Blackhole mesh, which costs the plugin minutes of firmware and fabric
builds to write. Which boards are derived so, and from which, their records say
(opbyop.boards).
"""

from __future__ import annotations

from pathlib import Path

from opbyop.compiler.targets import ethernet_connections, read_cluster_yaml
from opbyop.compiler.ttsys import HOST_MMIO, ChipChannel, ChipDesc, SystemDescRoot, decode, encode


def mmio_chips(cluster: dict) -> set[int]:
    """The chips the host reaches over PCIe (`chips_with_mmio`: a list of {index: chip id})."""
    chips: set[int] = set()
    for entry in cluster.get("chips_with_mmio") or []:
        chips.update(int(v) for v in (entry.values() if isinstance(entry, dict) else [entry]))
    return chips


def channels(cluster: dict) -> tuple[ChipChannel, ...]:
    """The cluster's ethernet links as the runtime records them: lower chip first, each end's
    logical ethernet core (y = its channel, x = 0), sorted."""
    out = set()
    for (a, chan_a), (b, chan_b) in ethernet_connections(cluster):
        if a > b:
            (a, chan_a), (b, chan_b) = (b, chan_b), (a, chan_a)
        out.add((a, chan_a, b, chan_b))
    return tuple(ChipChannel(device_id0=a, ethernet_core_coord0=(ca, 0), device_id1=b, ethernet_core_coord1=(cb, 0))
                 for a, ca, b, cb in sorted(out))


def with_chips(base: SystemDescRoot, chip: ChipDesc, chips: int, mmio: set[int],
               links: tuple[ChipChannel, ...]) -> SystemDescRoot:
    """`base` describing `chips` chips, each one `chip`, with these MMIO chips and links."""
    system = base.system_desc.model_copy(update={
        "chip_descs": tuple(chip for _ in range(chips)),
        "chip_desc_indices": tuple(range(chips)),
        "chip_capabilities": tuple(HOST_MMIO if c in mmio else 0 for c in range(chips)),
        "chip_channels": links,
    })
    return base.model_copy(update={"system_desc": system})


def wormhole_mesh(base_ttsys: bytes, n150_ttsys: bytes, cluster_yaml: Path) -> bytes:
    """The descriptor of the Wormhole board `cluster_yaml` describes, from a Blackhole descriptor the
    plugin wrote (any number of chips: its header and layout) and the n150 descriptor's chip."""
    cluster = read_cluster_yaml(cluster_yaml)
    chips = len(cluster.get("arch") or {})
    base = decode(base_ttsys)
    (chip,) = decode(n150_ttsys).system_desc.chip_descs
    return encode(with_chips(base, chip, chips, mmio_chips(cluster), channels(cluster)))
