"""System descriptors (.ttsys): what chip the compiler targets when there is no chip.

- Blackhole p150 / p100: written by the plugin itself, running in tt-metal's mock mode with UMD's
  cluster descriptor for that board (a subprocess; the plugin deletes its descriptor file when the
  process exits, so the subprocess copies it while alive). Made once per plugin version, cached.
- Wormhole n150: the plugin's mock mode cannot make it (it ships no Wormhole firmware toolchain);
  opbyop carries one made by re-encoding the Blackhole descriptor with n150 values
  (configs/system_descs/README.md), validated like any other.
- A path: a descriptor a user collected on real hardware.
Every descriptor is checked up front: FlatBuffers identifier TTSY and the plugin's schema hash.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel

from opbyop.compiler.assets import ensure_assets, private_tmpdir, startup_lock
from opbyop.compiler.flatbuf import FlatbufferError, read_root
from opbyop.config import config_dir
from opbyop.errors import SystemDescError

# Boards the plugin's mock mode can describe: name -> UMD cluster descriptor file.
MOCK_BOARDS = {"p150": "blackhole_P150.yaml", "p100": "blackhole_P100.yaml"}
VENDORED = {"n150": "n150.ttsys"}
_CLUSTER_DIR = "tt_metal/third_party/umd/tests/cluster_descriptor_examples"
_FIX_SCHEMA = ("use a descriptor made by this plugin version: `opbyop system-desc p150` makes one, or "
               "collect one on hardware with the same tt-mlir runtime (ttrt query --save-artifacts)")


class SystemDesc(BaseModel):
    chip: str  # p150, n150, or the file's stem for a user's descriptor
    path: Path
    schema_hash: str
    sha256: str
    source: str  # mock | vendored | user


def plugin_version() -> str:
    return metadata.version("jax-tt-plugin")


def cache_dir() -> Path:
    base = Path(os.environ.get("OPBYOP_CACHE_DIR", Path.home() / ".cache" / "opbyop"))
    return base / "system_descs" / f"jax-tt-plugin-{plugin_version()}"


def _describe(path: Path, chip: str, source: str) -> SystemDesc:
    data = path.read_bytes()
    try:
        root = read_root(data)
    except FlatbufferError as e:
        raise SystemDescError(f"{path} is not a system descriptor: {e}", _FIX_SCHEMA) from None
    if root.identifier != "TTSY" or root.schema_hash is None:
        raise SystemDescError(f"{path} is not a system descriptor (identifier {root.identifier!r})", _FIX_SCHEMA)
    return SystemDesc(chip=chip, path=path, schema_hash=root.schema_hash,
                      sha256=hashlib.sha256(data).hexdigest(), source=source)


def _mock_script(cluster_yaml: Path, out: Path) -> str:
    return textwrap.dedent(f"""
        import os, shutil
        os.environ["TT_METAL_MOCK_CLUSTER_DESC_PATH"] = {str(cluster_yaml)!r}
        import jax.extend
        jax.extend.backend.get_backend("tt")
        # the plugin deletes its descriptor when this process exits: copy it while alive
        shutil.copy(os.path.join(os.environ["TMPDIR"], "tt_pjrt_system_descriptor"), {str(out)!r})
    """)


def generate_mock(board: str, out: Path) -> Path:
    """Have the plugin describe `board` in tt-metal's mock mode; write the descriptor to `out`."""
    if board not in MOCK_BOARDS:
        raise SystemDescError(f"no mock cluster descriptor for {board!r}",
                              f"use one of {', '.join(MOCK_BOARDS)} or pass a .ttsys path")
    out.parent.mkdir(parents=True, exist_ok=True)
    with startup_lock():
        assets = ensure_assets()
        tmp = private_tmpdir(out.parent / f".tmp-{board}-{os.getpid()}", assets)
        cluster_yaml = assets / _CLUSTER_DIR / MOCK_BOARDS[board]
        env = {**os.environ, "JAX_PLATFORMS": "tt", "TMPDIR": str(tmp)}
        env.pop("TT_COMPILE_ONLY_SYSTEM_DESC", None)
        partial = out.with_suffix(".partial")
        try:
            proc = subprocess.run([sys.executable, "-c", _mock_script(cluster_yaml, partial)],
                                  env=env, capture_output=True, text=True, timeout=600, cwd=tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if proc.returncode != 0 or not partial.exists():
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise SystemDescError(f"the plugin could not describe {board} in mock mode:\n{tail}",
                              "bring a descriptor collected on hardware (opbyop system-desc PATH)")
    partial.replace(out)
    return out


def plugin_schema_hash() -> str:
    """The schema hash of descriptors this plugin writes (read from its own p150 descriptor)."""
    return resolve("p150", check=False).schema_hash


def resolve(chip: str, check: bool = True) -> SystemDesc:
    """A validated descriptor for `chip` (p150, p100, n150) or for a .ttsys path."""
    if chip in MOCK_BOARDS:
        path = cache_dir() / f"{chip}.ttsys"
        if not path.exists():
            generate_mock(chip, path)
        desc = _describe(path, chip, "mock")
    elif chip in VENDORED:
        desc = _describe(config_dir() / "system_descs" / VENDORED[chip], chip, "vendored")
    else:
        path = Path(chip)
        if not path.is_file():
            raise SystemDescError(
                f"unknown chip {chip!r}", f"use one of {', '.join([*MOCK_BOARDS, *VENDORED])} or a .ttsys path")
        desc = _describe(path, path.stem, "user")
    if check and desc.source != "mock":
        expected = plugin_schema_hash()
        if desc.schema_hash != expected:
            raise SystemDescError(
                f"{desc.path} has system-desc schema {desc.schema_hash[:12]}..., but jax-tt-plugin "
                f"{plugin_version()} expects {expected[:12]}...; the compiler would stop at TTNN with "
                "'system desc schema mismatch'", _FIX_SCHEMA)
    return desc
