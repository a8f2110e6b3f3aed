"""Just enough FlatBuffers reading to identify tt-mlir files without their generated code.

A .ttsys (SystemDescRoot, identifier TTSY) and a .ttnn (TTNNBinary, identifier TTNN) both carry
a schema hash (64 hex characters) in their root table: the compiler refuses a descriptor whose hash
differs from its own ('system desc schema mismatch'), so comparing hashes catches it up front.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

_HEX64 = re.compile(rb"^[0-9a-f]{64}$")


class FlatbufferError(ValueError):
    pass


@dataclass(frozen=True)
class RootInfo:
    identifier: str
    strings: list[str]  # every string field of the root table, in field order

    @property
    def schema_hash(self) -> str | None:
        return next((s for s in self.strings if _HEX64.match(s.encode())), None)


def _u32(buf: bytes, at: int) -> int:
    if at < 0 or at + 4 > len(buf):
        raise FlatbufferError(f"offset {at} outside the {len(buf)}-byte buffer")
    return struct.unpack_from("<I", buf, at)[0]


def check_size_prefixed(buf: bytes, what: str = "a flatbuffer") -> None:
    """`buf` is one whole size-prefixed flatbuffer: its size prefix, root offset and identifier
    are there, and the prefix counts every byte after it (a truncated file fails here)."""
    if len(buf) < 12:
        raise FlatbufferError(f"{len(buf)} bytes is too short for {what}")
    size = _u32(buf, 0)
    if size + 4 != len(buf):
        raise FlatbufferError(f"size prefix says {size + 4} bytes, the file has {len(buf)} (truncated or not size-prefixed)")


def read_root(buf: bytes) -> RootInfo:
    """Read the identifier and the string fields of a size-prefixed flatbuffer's root table."""
    check_size_prefixed(buf)
    base = 4
    root = base + _u32(buf, base)
    identifier = buf[base + 4 : base + 8].decode("ascii", errors="replace")
    vtable = root - struct.unpack_from("<i", buf, root)[0]
    vt_size = struct.unpack_from("<H", buf, vtable)[0]
    strings = []
    for slot in range((vt_size - 4) // 2):
        field_off = struct.unpack_from("<H", buf, vtable + 4 + 2 * slot)[0]
        if not field_off:
            continue
        at = root + field_off
        target = at + _u32(buf, at)
        if target + 4 > len(buf):
            continue
        length = _u32(buf, target)
        raw = buf[target + 4 : target + 4 + length]
        if len(raw) == length and target + 4 + length < len(buf) and buf[target + 4 + length] == 0:
            try:
                strings.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                pass
    return RootInfo(identifier=identifier, strings=strings)
