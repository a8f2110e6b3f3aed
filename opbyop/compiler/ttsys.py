"""Read and write system descriptors (.ttsys): tt-mlir's SystemDesc FlatBuffers schema, by hand.

The tables below are the schema of the descriptors jax-tt-plugin 0.1.3 writes and reads (tt-mlir's
Target/Common system_desc.fbs, types.fbs and version.fbs as built into that plugin), written out
field by field in slot order; the plugin prints the same fields, by name, as the `#ttcore.system_desc`
attribute of its TTIR/TTNN dumps. A field absent from a buffer reads as its default (0, empty), as
FlatBuffers builders omit defaults. Encoding goes through the `flatbuffers` package's Builder, in the
order the plugin's runtime builds a descriptor: every descriptor the plugin wrote (p150, p300, 4x and
8x p150, Blackhole Galaxy) decodes and encodes again to the same bytes.

The plugin compares the root's `schema_hash` with its own and refuses another one: a descriptor
re-encoded here keeps the hash of the one it was decoded from.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Any, ClassVar

import flatbuffers
from pydantic import BaseModel, ConfigDict, ValidationError

from opbyop.compiler.flatbuf import FlatbufferError, check_size_prefixed

FILE_IDENTIFIER = b"TTSY"

Dim2d = tuple[int, int]  # (y, x), as the schema's struct Dim2d


class Arch(IntEnum):
    # The plugin's schema no longer has Grayskull: Wormhole is 0 (the default, so absent from a buffer).
    WORMHOLE_B0 = 0
    BLACKHOLE = 1


class CPURole(IntEnum):
    HOST = 0
    DEVICE = 1


HOST_MMIO = 1  # ChipCapability bit flag: the host reaches this chip over PCIe


class _Struct(BaseModel):
    """A FlatBuffers struct: fixed layout, `FORMAT` in field order (little-endian, no padding needed)."""

    model_config = ConfigDict(frozen=True)
    FORMAT: ClassVar[str]
    ALIGN: ClassVar[int] = 4

    def values(self) -> tuple[int, ...]:
        out: list[int] = []
        for value in self.__dict__.values():
            out.extend(value if isinstance(value, tuple) else (value,))
        return tuple(out)

    @classmethod
    def from_values(cls, values: tuple[int, ...]) -> "_Struct":
        names, out, i = list(cls.model_fields), {}, 0
        for name in names:
            if cls.model_fields[name].annotation in (Dim2d, "Dim2d"):
                out[name] = (values[i], values[i + 1])
                i += 2
            else:
                out[name] = values[i]
                i += 1
        return cls(**out)


class Version(_Struct):
    FORMAT: ClassVar[str] = "<HHI"
    major: int = 0
    minor: int = 0
    release: int = 0


class ChipCoord(_Struct):
    FORMAT: ClassVar[str] = "<IIII"
    rack: int = 0
    shelf: int = 0
    y: int = 0
    x: int = 0


class ChipChannel(_Struct):
    """An ethernet link: a core of one chip joined to a core of another (logical ethernet core
    coordinates, (y, x))."""

    FORMAT: ClassVar[str] = "<IiiIii"
    device_id0: int
    ethernet_core_coord0: Dim2d
    device_id1: int
    ethernet_core_coord1: Dim2d


# Field kinds: a struct.pack code for scalars, "dim2d" (an inline struct), "string", "table",
# "[<code>]" a vector of scalars, "[dim2d]", "[struct]" a vector of the model's struct, "[table]".
class _Table(BaseModel):
    model_config = ConfigDict(frozen=True)
    SLOTS: ClassVar[tuple[tuple[str, str], ...]]  # (field, kind) in slot order
    # Strings and vectors are built in field order, except these (field -> rank; 0 for the others)
    BUILD_ORDER: ClassVar[dict[str, int]] = {}


class CPUDesc(_Table):
    SLOTS: ClassVar = (("role", "B"), ("target_triple", "string"))
    role: CPURole = CPURole.HOST
    target_triple: str = ""


class ChipDesc(_Table):
    SLOTS: ClassVar = (
        ("arch", "I"), ("grid_size", "dim2d"), ("coord_translation_offsets", "dim2d"), ("l1_size", "Q"),
        ("num_dram_channels", "I"), ("dram_channel_size", "Q"), ("noc_l1_address_align_bytes", "I"),
        ("pcie_address_align_bytes", "I"), ("noc_dram_address_align_bytes", "I"), ("l1_unreserved_base", "I"),
        ("erisc_l1_unreserved_base", "I"), ("dram_unreserved_base", "I"), ("dram_unreserved_end", "I"),
        ("supported_data_types", "[H]"), ("supported_tile_sizes", "[dim2d]"), ("dst_physical_size_tiles", "I"),
        ("num_cbs", "I"), ("num_compute_threads", "I"), ("num_datamovement_threads", "I"),
        ("dram_grid", "dim2d"), ("dram_bank_to_logical_worker_noc0", "[dim2d]"),
        ("dram_bank_to_logical_worker_noc1", "[dim2d]"))
    # tt-mlir's runtime builds the noc1 bank map before the noc0 one
    BUILD_ORDER: ClassVar[dict[str, int]] = {"dram_bank_to_logical_worker_noc1": 1, "dram_bank_to_logical_worker_noc0": 2}
    arch: Arch = Arch.WORMHOLE_B0
    grid_size: Dim2d | None = None
    coord_translation_offsets: Dim2d | None = None
    l1_size: int = 0
    num_dram_channels: int = 0
    dram_channel_size: int = 0
    noc_l1_address_align_bytes: int = 0
    pcie_address_align_bytes: int = 0
    noc_dram_address_align_bytes: int = 0
    l1_unreserved_base: int = 0
    erisc_l1_unreserved_base: int = 0
    dram_unreserved_base: int = 0
    dram_unreserved_end: int = 0
    supported_data_types: tuple[int, ...] = ()
    supported_tile_sizes: tuple[Dim2d, ...] = ()
    dst_physical_size_tiles: int = 0
    num_cbs: int = 0
    num_compute_threads: int = 0
    num_datamovement_threads: int = 0
    dram_grid: Dim2d | None = None
    dram_bank_to_logical_worker_noc0: tuple[Dim2d, ...] = ()
    dram_bank_to_logical_worker_noc1: tuple[Dim2d, ...] = ()


class SystemDesc(_Table):
    SLOTS: ClassVar = (("cpu_descs", "[table]"), ("chip_descs", "[table]"), ("chip_desc_indices", "[I]"),
                       ("chip_capabilities", "[I]"), ("chip_coords", "[struct]"), ("chip_channels", "[struct]"))
    cpu_descs: tuple[CPUDesc, ...] = ()
    chip_descs: tuple[ChipDesc, ...] = ()
    chip_desc_indices: tuple[int, ...] = ()  # per chip: which of chip_descs describes it
    chip_capabilities: tuple[int, ...] = ()  # per chip: HOST_MMIO or 0
    chip_coords: tuple[ChipCoord, ...] = ()
    chip_channels: tuple[ChipChannel, ...] = ()


class SystemDescRoot(_Table):
    SLOTS: ClassVar = (("version", "version"), ("schema_hash", "string"), ("ttmlir_git_hash", "string"),
                       ("product_identifier", "string"), ("system_desc", "table"))
    version: Version = Version()
    schema_hash: str = ""
    ttmlir_git_hash: str = ""
    product_identifier: str = ""
    system_desc: SystemDesc = SystemDesc()

    @property
    def chips(self) -> int:
        return len(self.system_desc.chip_desc_indices)


def _element(model: type[_Table], name: str) -> type:
    """The table or struct class a vector or table field holds."""
    annotation = model.model_fields[name].annotation
    args = getattr(annotation, "__args__", (annotation,))
    return args[0]


# ------------------------------------------------------------------------------------------ reading


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def unpack(self, fmt: str, at: int) -> tuple:
        size = struct.calcsize(fmt)
        if at < 0 or at + size > len(self.buf):
            raise FlatbufferError(f"a field at byte {at} runs past the {len(self.buf)}-byte buffer")
        return struct.unpack_from(fmt, self.buf, at)

    def deref(self, at: int) -> int:
        return at + self.unpack("<I", at)[0]

    def vector(self, at: int) -> tuple[int, int]:
        start = self.deref(at)
        return start + 4, self.unpack("<I", start)[0]

    def table(self, model: type[_Table], at: int) -> Any:
        vtable = at - self.unpack("<i", at)[0]
        vt_size = self.unpack("<H", vtable)[0]
        values: dict[str, Any] = {}
        for slot, (name, kind) in enumerate(model.SLOTS):
            if 4 + 2 * slot >= vt_size:
                break  # written by an older schema: the rest keep their defaults
            offset = self.unpack("<H", vtable + 4 + 2 * slot)[0]
            if offset:
                values[name] = self.field(model, name, kind, at + offset)
        return model(**values)

    def field(self, model: type[_Table], name: str, kind: str, at: int) -> Any:
        if kind == "dim2d":
            return self.unpack("<ii", at)
        if kind == "version":
            return Version.from_values(self.unpack(Version.FORMAT, at))
        if kind == "string":
            start, length = self.vector(at)
            return self.buf[start:start + length].decode("utf-8")
        if kind == "table":
            return self.table(_element(model, name), self.deref(at))
        if kind.startswith("["):
            start, length = self.vector(at)
            inner = kind[1:-1]
            if inner == "dim2d":
                return tuple(self.unpack("<ii", start + 8 * i) for i in range(length))
            if inner == "struct":
                cls = _element(model, name)
                size = struct.calcsize(cls.FORMAT)
                return tuple(cls.from_values(self.unpack(cls.FORMAT, start + size * i)) for i in range(length))
            if inner == "table":
                cls = _element(model, name)
                return tuple(self.table(cls, self.deref(start + 4 * i)) for i in range(length))
            size = struct.calcsize("<" + inner)
            return tuple(self.unpack("<" + inner, start + size * i)[0] for i in range(length))
        return self.unpack("<" + kind, at)[0]


def decode(buf: bytes) -> SystemDescRoot:
    """A size-prefixed TTSY buffer -> its SystemDescRoot."""
    check_size_prefixed(buf, "a system descriptor")
    if buf[8:12] != FILE_IDENTIFIER:
        raise FlatbufferError(f"file identifier {buf[8:12]!r}, not {FILE_IDENTIFIER!r}")
    body = _Reader(buf[4:])
    try:
        return body.table(SystemDescRoot, body.deref(0))
    except ValidationError as e:  # e.g. an architecture this schema does not know
        raise FlatbufferError(f"not a system descriptor of this schema: {e.errors()[0]['msg']}") from None


# ------------------------------------------------------------------------------------------ writing


class _Writer:
    def __init__(self) -> None:
        self.b = flatbuffers.Builder(4096)

    def dim2d(self, value: Dim2d) -> int:
        self.b.Prep(4, 8)
        self.b.PrependInt32(value[1])
        self.b.PrependInt32(value[0])
        return self.b.Offset()

    def struct(self, value: _Struct) -> int:
        fmt = value.FORMAT[1:]
        self.b.Prep(value.ALIGN, struct.calcsize(value.FORMAT))
        for code, item in reversed(list(zip(fmt, value.values()))):
            {"H": self.b.PrependUint16, "I": self.b.PrependUint32, "i": self.b.PrependInt32}[code](item)
        return self.b.Offset()

    def vector(self, kind: str, items: tuple, model: type[_Table], name: str, tables: list[int] | None) -> int:
        inner = kind[1:-1]
        if inner == "table":
            self.b.StartVector(4, len(tables), 4)
            for off in reversed(tables):
                self.b.PrependUOffsetTRelative(off)
            return self.b.EndVector()
        if inner == "dim2d":
            self.b.StartVector(8, len(items), 4)
            for item in reversed(items):
                self.dim2d(item)
            return self.b.EndVector()
        if inner == "struct":
            size = struct.calcsize(_element(model, name).FORMAT)
            self.b.StartVector(size, len(items), 4)
            for item in reversed(items):
                self.struct(item)
            return self.b.EndVector()
        size = struct.calcsize("<" + inner)
        prepend = {"H": self.b.PrependUint16, "I": self.b.PrependUint32}[inner]
        self.b.StartVector(size, len(items), size)
        for item in reversed(items):
            prepend(int(item))
        return self.b.EndVector()

    def table(self, value: _Table) -> int:
        """Written in the order tt-mlir's runtime builds a descriptor, so that a decoded descriptor
        encodes to the same bytes: sub-tables first (the last field's first), then strings and
        vectors in field order, then the table's own fields largest first, the last field first
        among equals (the order of FlatBuffers' generated C++ Create functions)."""
        model = type(value)
        tables: dict[str, list[int]] = {}
        for name, kind in reversed(model.SLOTS):
            if kind == "table":
                tables[name] = [self.table(getattr(value, name))]
            elif kind == "[table]":
                tables[name] = [self.table(item) for item in getattr(value, name)]
        refs: dict[str, int] = {}
        for name, kind in sorted(model.SLOTS, key=lambda f: model.BUILD_ORDER.get(f[0], 0)):
            item = getattr(value, name)
            if kind == "string":
                refs[name] = self.b.CreateString(item)
            elif kind == "table":
                refs[name] = tables[name][0]
            elif kind.startswith("["):
                refs[name] = self.vector(kind, item, model, name, tables.get(name))
        self.b.StartObject(len(model.SLOTS))
        for slot, name, kind in sorted(((slot, name, kind) for slot, (name, kind) in enumerate(model.SLOTS)),
                                       key=lambda f: (-_SIZES.get(f[2], 4), -f[0])):
            item = getattr(value, name)
            if name in refs:
                self.b.PrependUOffsetTRelativeSlot(slot, refs[name], 0)
            elif kind == "dim2d":
                if item is not None:
                    self.b.PrependStructSlot(slot, self.dim2d(item), 0)
            elif kind == "version":
                self.b.PrependStructSlot(slot, self.struct(item), 0)
            else:
                prepend = {"B": self.b.PrependUint8Slot, "H": self.b.PrependUint16Slot,
                           "I": self.b.PrependUint32Slot, "Q": self.b.PrependUint64Slot}[kind]
                prepend(slot, int(item), 0)
        return self.b.EndObject()


# A field's size as FlatBuffers' C++ code generator orders them (structs and offsets count as 4).
_SIZES = {"Q": 8, "H": 2, "B": 1}


def encode(root: SystemDescRoot) -> bytes:
    """A SystemDescRoot -> a size-prefixed TTSY buffer the plugin reads."""
    writer = _Writer()
    writer.b.FinishSizePrefixed(writer.table(root), FILE_IDENTIFIER)
    return bytes(writer.b.Output())
