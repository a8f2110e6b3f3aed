"""System descriptors (.ttsys): what chip the compiler targets when there is no chip.

Where a board's descriptor comes from is its record's `source` (opbyop.boards):
- mock (Blackhole boards): written by the compiler itself, running in tt-metal's mock mode with UMD's
  cluster descriptor for that board (a subprocess; the plugin deletes its descriptor file when the
  process exits, so the subprocess copies it while alive). Made once per compiler build, cached in
  its folder (opbyop.compiler.builds): a descriptor's schema is its build's.
  That start builds the plugin's firmware (and fabric, per chip): 10 s for a p150, about 30 s for a
  p300, minutes for eight chips. So opbyop ships what the plugin version it pins writes
  (configs/system_descs/jax-tt-plugin-<version>/); a first use checks the shipped file by compiling
  (a few seconds) and caches it, and falls back to the mock start when the check fails or nothing
  is shipped for the build (a test makes the p150's again and compares).
- vendored (Wormhole n150): the plugin's mock mode cannot make it (it ships no Wormhole firmware
  toolchain); opbyop carries one made by re-encoding the Blackhole descriptor with n150 values
  (configs/system_descs/README.md), validated like any other. A build of another schema gets the
  same chip under its own p150's header (re-encoded like the Wormhole meshes).
- derived (Wormhole meshes): re-encoded by opbyop from a mock board's descriptor (the p150's: the
  plugin's header and layout), each chip a single-chip board's and the board's links from UMD's
  cluster descriptor (opbyop.compiler.wormhole_descs); cached like the mock ones and checked by
  compiling. A first t3k costs the p150's mock start and one check: seconds, not minutes.
- A path: a descriptor a user collected on real hardware.
Every descriptor is checked up front: FlatBuffers identifier TTSY and the plugin's schema hash. A
user's descriptor must also compile a tiny module (in a child process, whose death is reported):
a descriptor whose header is right but whose body is corrupt would otherwise make every op of a
run a compiler crash. The verdict is cached by the file's sha256.
What is made the first time (a mock start, a derivation, a check) is said through the caller's
Notices (opbyop.compiler.assets), with why: each costs seconds, and a command that says nothing for
that long looks hung.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
from pathlib import Path
from typing import Callable

from pydantic import BaseModel

from opbyop.atomic import atomic_path, write_bytes
from opbyop.compiler.assets import Notices
from opbyop.compiler.builds import CLUSTER_DIR, PROBE_BOARD, Compiler, installed, run_verb, shipped_descriptor, unpack_assets
from opbyop.compiler.flatbuf import FlatbufferError, read_root
from opbyop.boards import BOARDS, DescriptorSource, boards_from
from opbyop.compiler.ttsys import decode
from opbyop.compiler.wormhole_descs import wormhole_mesh
from opbyop.config import config_dir
from opbyop.errors import SystemDescError

_FIX_SCHEMA = ("use a descriptor made by this plugin version: `opbyop system-desc p150` makes one, or "
               "collect one on hardware with the same tt-mlir runtime (ttrt query --save-artifacts)")


class SystemDesc(BaseModel):
    chip: str  # p150, n150, or the file's stem for a user's descriptor
    path: Path
    schema_hash: str
    sha256: str
    source: str  # mock | vendored | derived (opbyop.boards.DescriptorSource) | user


def dram_bytes(desc: SystemDesc) -> int:
    """The DRAM a target's programs may use, over all its chips, as its descriptor says (each chip's
    channels, less what the runtime reserves at the bottom of each)."""
    chips = decode(desc.path.read_bytes()).system_desc
    return sum(chips.chip_descs[i].num_dram_channels
               * (chips.chip_descs[i].dram_channel_size - chips.chip_descs[i].dram_unreserved_base)
               for i in chips.chip_desc_indices)


def cache_dir(compiler: Compiler) -> Path:
    """Where the descriptors made for `compiler` are kept."""
    return compiler.descriptors


def _describe(path: Path, chip: str, source: str) -> SystemDesc:
    if path.is_dir():
        raise SystemDescError(f"{path} is a directory, not a system descriptor", _FIX_SCHEMA)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SystemDescError(f"cannot read {path}: {e.strerror or e}", "check the path and its permissions") from None
    try:
        root = read_root(data)
    except (FlatbufferError, struct.error, ValueError) as e:
        raise SystemDescError(f"{path} is not a system descriptor: {e}", _FIX_SCHEMA) from None
    if root.identifier != "TTSY" or root.schema_hash is None:
        raise SystemDescError(f"{path} is not a system descriptor (identifier {root.identifier!r})", _FIX_SCHEMA)
    return SystemDesc(chip=chip, path=path, schema_hash=root.schema_hash,
                      sha256=hashlib.sha256(data).hexdigest(), source=source)


def adopt_shipped(board: str, out: Path, compiler: Compiler, notices: Notices | None = None) -> Path | None:
    """The shipped descriptor of `board`, checked by compiling and cached at `out`; None when none is
    shipped for this release or the compiler refuses it (said: the caller has the plugin make one)."""
    shipped, notices = shipped_descriptor(compiler.identity, board), notices or Notices()
    if shipped is None or not shipped.is_file():
        return None
    notices.say(f"{board} system descriptor: first use with {compiler.label}: opbyop ships the one "
                f"this release writes in mock mode ({shipped}); it is checked by compiling instead of "
                "starting the plugin in mock mode (which builds its firmware)")
    try:
        check_by_compiling(_describe(shipped, board, DescriptorSource.MOCK.value), compiler, notices=notices)
    except SystemDescError as e:
        notices.say(f"the shipped {board} descriptor was refused ({e}); the plugin makes one instead")
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(out, shipped.read_bytes())
    return out


def vendored_path(board: str) -> Path:
    """Where a vendored board's descriptor is carried."""
    return config_dir() / "system_descs" / f"{board}.ttsys"


def _vendored(board: str, compiler: Compiler, notices: Notices) -> Path:
    """The vendored descriptor, or for a build of another schema the same chip under that build's own
    p150 header (re-encoded, as the Wormhole meshes are; checked by compiling like them)."""
    carried = vendored_path(board)
    own = resolve(PROBE_BOARD, check=False, notices=notices, compiler=compiler)
    if _describe(carried, board, DescriptorSource.VENDORED.value).schema_hash == own.schema_hash:
        return carried
    out = cache_dir(compiler) / f"{board}.ttsys"
    data = _reencoded(compiler, lambda: wormhole_mesh(own.path.read_bytes(), carried.read_bytes(),
                                                      unpack_assets(compiler, notices) / CLUSTER_DIR / BOARDS[board].cluster_yaml))
    if not out.exists() or out.read_bytes() != data:
        notices.say(f"{board} system descriptor for {compiler.label}: the one opbyop carries has another schema; "
                    f"its chip is re-encoded under this build's p150 header into {out}")
        write_bytes(out, data)
    return out


def _reencoded(compiler: Compiler, encode: Callable[[], bytes]) -> bytes:
    """A descriptor opbyop re-encodes from `compiler`'s own, or the error that says it cannot read them."""
    try:
        return encode()
    except (FlatbufferError, struct.error, ValueError) as e:
        raise SystemDescError(f"opbyop cannot read the system descriptors {compiler.label} writes ({e}): their "
                              "SystemDesc schema is not one opbyop.compiler.ttsys knows, so it cannot derive a "
                              "Wormhole descriptor for it", "use a Blackhole board (the compiler writes those itself), "
                              "or bring a descriptor collected for this build: --chip PATH") from None


def generate_wormhole(board: str, out: Path, compiler: Compiler, notices: Notices | None = None) -> Path:
    """Derive the mesh `board` (a derived board: n300, t3k) into `out`. Derivation takes milliseconds:
    it is redone every time, and the file rewritten only when its bytes change (never a stale cache)."""
    record, notices = BOARDS[board], notices or Notices()
    if record.layout_from is None or record.chip_from is None:
        raise SystemDescError(f"{board}'s descriptor is not derived from other boards",
                              f"use one of {', '.join(boards_from(DescriptorSource.DERIVED))}")
    base = resolve(record.layout_from, check=False, notices=notices, compiler=compiler).path.read_bytes()
    chip = resolve(record.chip_from, check=False, notices=notices, compiler=compiler).path.read_bytes()
    data = _reencoded(compiler, lambda: wormhole_mesh(base, chip, unpack_assets(compiler, notices) / CLUSTER_DIR
                                                      / record.cluster_yaml))
    if not out.exists() or out.read_bytes() != data:
        notices.say(f"{board} system descriptor: derived by opbyop ({record.chips} Wormhole chips of the {record.chip_from} "
                    f"on the {record.layout_from}'s layout, links from UMD's {record.cluster_yaml}): the plugin's mock "
                    f"mode cannot write Wormhole descriptors; written to {out}")
        out.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(out, data)
    return out


def generate_mock(board: str, out: Path, compiler: Compiler, notices: Notices | None = None) -> Path:
    """Have the compiler describe `board` in tt-metal's mock mode; write the descriptor to `out`."""
    mock = boards_from(DescriptorSource.MOCK)
    if board not in mock:
        raise SystemDescError(f"no mock cluster descriptor for {board!r}",
                              f"use one of {', '.join(mock)} or pass a .ttsys path")
    chips, notices = BOARDS[board].chips, notices or Notices()
    cost = "its firmware: about 10 s" if chips == 1 else f"its firmware and fabric for {chips} chips: about 15 s a chip"
    notices.say(f"{board} system descriptor: first use with {compiler.label}, so the plugin writes it in "
                f"tt-metal's mock mode (it builds {cost}); cached in {out.parent}")
    if out.exists():  # another process made it meanwhile
        return out
    cluster_yaml = unpack_assets(compiler, notices) / CLUSTER_DIR / BOARDS[board].cluster_yaml
    with atomic_path(out) as partial:  # the plugin's mock process writes the sibling; a failure leaves none
        ran = run_verb(compiler, "describe", str(partial), TT_METAL_MOCK_CLUSTER_DESC_PATH=str(cluster_yaml))
        if not ran.ok or not partial.exists():
            tail = ran.died or "\n".join(ran.output.strip().splitlines()[-5:])
            raise SystemDescError(f"{compiler.label} could not describe {board} in mock mode:\n{tail}",
                                  "bring a descriptor collected on hardware (opbyop system-desc PATH)")
    return out


def check_by_compiling(desc: SystemDesc, compiler: Compiler, timeout: float = 600.0,
                       notices: Notices | None = None) -> None:
    """Compile a tiny module for `desc` with `compiler` in a child process; a descriptor the compiler
    cannot use (it fails, or dies) raises SystemDescError with the compiler's last words. Cached by
    the descriptor's sha256, per compiler."""
    verdict, notices = cache_dir(compiler) / "checked" / f"{desc.sha256}.ok", notices or Notices()
    if verdict.exists():
        return
    notices.say(f"{desc.chip} system descriptor: checked by compiling a one-op module with it (first use of these "
                f"bytes, {desc.sha256[:12]}..., with {compiler.label}; a few seconds): a corrupt body would make "
                "every op a compiler crash")
    verdict.parent.mkdir(parents=True, exist_ok=True)
    export = verdict.parent / f".trial-{os.getpid()}"
    try:
        ran = run_verb(compiler, "check", str(export), timeout=timeout,
                       TT_COMPILE_ONLY_SYSTEM_DESC=str(Path(desc.path).resolve()))
        compiled = any(export.glob("fb_*.ttnn"))
    finally:
        shutil.rmtree(export, ignore_errors=True)
    if ran.ok and compiled:
        verdict.write_text(f"{desc.path}\n")
        return
    what = f"died ({ran.died})" if ran.died else ("failed" if not ran.ok else "wrote no flatbuffer")
    if ran.died and ran.died.startswith("no answer"):
        what = f"did not finish within {timeout:.0f} s"
    last = ran.last_words()
    raise SystemDescError(
        f"{desc.path} passes the header checks, but the compiler {what} compiling a one-op module for it"
        + (f": {last}" if last else "") + "; its body is corrupt or not what this plugin reads",
        _FIX_SCHEMA)


def _board_descriptor(board: str, source: DescriptorSource, compiler: Compiler, notices: Notices) -> Path:
    if source is DescriptorSource.VENDORED:
        return _vendored(board, compiler, notices)
    path = cache_dir(compiler) / f"{board}.ttsys"
    if source is DescriptorSource.DERIVED:
        return generate_wormhole(board, path, compiler, notices)
    if path.exists():
        return path
    return adopt_shipped(board, path, compiler, notices) or generate_mock(board, path, compiler, notices)


def plugin_schema_hash(compiler: Compiler, notices: Notices | None = None) -> str:
    """The schema hash of descriptors `compiler` writes (read from its own p150 descriptor)."""
    return resolve(PROBE_BOARD, check=False, notices=notices, compiler=compiler).schema_hash


def resolve(chip: str, check: bool = True, notices: Notices | None = None,
            compiler: Compiler | None = None) -> SystemDesc:
    """A validated descriptor for `chip` (a board of opbyop.boards) or for a .ttsys path, for
    `compiler` (default: the plugin installed beside opbyop); `notices` is told what is made the first
    time (a mock start, a derivation, a check) and why."""
    notices = notices or Notices()
    compiler = compiler or installed(notices)
    board = BOARDS.get(chip)
    if board is None:
        path = Path(chip)
        if path.is_dir():
            raise SystemDescError(f"{path} is a directory, not a system descriptor", _FIX_SCHEMA)
        if not path.is_file():
            raise SystemDescError(f"unknown chip {chip!r}", f"use one of {', '.join(BOARDS)} or a .ttsys path")
        desc = _describe(path, path.stem, "user")
    else:
        desc = _describe(_board_descriptor(chip, board.source, compiler, notices), chip, board.source.value)
    if check and desc.source != "mock":
        expected = plugin_schema_hash(compiler, notices)
        if desc.schema_hash != expected:
            raise SystemDescError(
                f"{desc.path} has system-desc schema {desc.schema_hash[:12]}..., but {compiler.label} "
                f"expects {expected[:12]}...; the compiler would stop at TTNN with "
                "'system desc schema mismatch'", _FIX_SCHEMA)
    made_here = desc.source in ("user", "derived") or desc.path.parent == cache_dir(compiler)
    if check and desc.source != "mock" and made_here:  # a file opbyop did not carry or the plugin write
        check_by_compiling(desc, compiler, notices=notices)
    return desc
