"""The self-describing device image (seed 003, TT-Buda's TTI): everything to run without compiling.

One zip: manifest.json (versions, inputs, outputs, member checksums), device.json (arch, chip ids,
grid, harvested rows ...), the TTNN program and its flatbuffer, the parameters as .npz (never a
pickle: loading an untrusted pickle runs its code). Loading checks everything before use: a corrupt
or truncated archive, a member path that escapes the archive, an oversized member, a version
mismatch and a checksum mismatch are each refused with a message that says what to do.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
import zlib
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Sequence

import numpy as np
from pydantic import BaseModel, ValidationError

from opbyop import __version__
from opbyop.device.arch import DeviceSpec
from opbyop.device.stitch import run_stitched
from opbyop.errors import ImageError
from opbyop.records import TensorDesc

FORMAT = "opbyop-device-image"
FORMAT_VERSION = 1
MAX_MEMBER_BYTES = 4 << 30
MAX_TOTAL_BYTES = 8 << 30
MAX_COMPRESSION_RATIO = 200  # a zip bomb expands far beyond this
_REBUILD = "rebuild the image with `opbyop image build MODEL -o FILE` on this installation"


class NamedTensor(BaseModel):
    name: str
    tensor: TensorDesc


class Manifest(BaseModel):
    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    opbyop_version: str
    plugin_version: str
    ttnn_schema_hash: str | None = None
    model: str
    created_at: datetime
    training: bool = False
    inputs: list[NamedTensor]  # every program argument, in order
    parameters: list[int]  # argument indices held in constants.npz (pushed to the device once)
    outputs: list[TensorDesc]
    members: dict[str, str]  # path -> sha256


class DeviceInfo(BaseModel):
    arch: str
    chip_ids: list[int]
    device_type: str
    grid_size: tuple[int, int]
    harvested_rows: int
    harvesting_mask: int
    spec: DeviceSpec


PROGRAM = "programs/main.ttnn_runtime.mlir"
FLATBUFFER = "programs/main.ttnn"
CONSTANTS = "constants.npz"
DEVICE = "device.json"
MANIFEST = "manifest.json"


def build_image(path: Path, *, model: str, program_text: str, flatbuffer: bytes | None, spec: DeviceSpec,
                inputs: Sequence[NamedTensor], parameters: dict[int, np.ndarray], outputs: Sequence[TensorDesc],
                plugin_version: str) -> Path:
    """Write a device image (atomically: a temporary file renamed into place)."""
    from opbyop.compiler.flatbuf import read_root

    constants = io.BytesIO()
    np.savez(constants, **{f"arg{i}": v for i, v in parameters.items()})
    device = DeviceInfo(arch=spec.arch, chip_ids=[0], device_type=_device_type(spec), grid_size=spec.worker_grid,
                        harvested_rows=spec.harvested_rows, harvesting_mask=spec.harvesting_mask, spec=spec)
    members: dict[str, bytes] = {PROGRAM: program_text.encode(), CONSTANTS: constants.getvalue(),
                                 DEVICE: device.model_dump_json(indent=2).encode()}
    if flatbuffer is not None:
        members[FLATBUFFER] = flatbuffer
    manifest = Manifest(opbyop_version=__version__, plugin_version=plugin_version,
                        ttnn_schema_hash=read_root(flatbuffer).schema_hash if flatbuffer else None, model=model,
                        created_at=datetime.now(timezone.utc), inputs=list(inputs), parameters=sorted(parameters),
                        outputs=list(outputs), members={k: hashlib.sha256(v).hexdigest() for k, v in members.items()})
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(MANIFEST, manifest.model_dump_json(indent=2))
        for name, data in members.items():
            zf.writestr(name, data)
    partial.replace(path)
    return path


def _device_type(spec: DeviceSpec) -> str:
    return {"wormhole_b0": "n150" if spec.grid_y * spec.grid_x <= 64 else "n300", "blackhole": "p150"}.get(spec.arch, spec.arch)


class DeviceImage:
    """A loaded, verified image."""

    def __init__(self, manifest: Manifest, device: DeviceInfo, program_text: str, flatbuffer: bytes | None,
                 constants: dict[int, np.ndarray]):
        self.manifest = manifest
        self.device = device
        self.program_text = program_text
        self.flatbuffer = flatbuffer
        self.constants = constants

    @classmethod
    def load(cls, path: Path, plugin_version: str | None = None) -> DeviceImage:
        """Open and verify an image; `plugin_version` (default: the installed one) must match."""
        path = Path(path)
        if not path.is_file():
            raise ImageError(f"no device image at {path}", "check the path")
        try:
            zf = zipfile.ZipFile(path)
        except zipfile.BadZipFile as e:
            raise ImageError(f"{path} is not a readable zip archive ({e}): corrupt or truncated", _REBUILD) from None
        with zf:
            _check_members(zf, path)
            try:
                manifest = Manifest.model_validate_json(zf.read(MANIFEST))
            except KeyError:
                raise ImageError(f"{path} has no {MANIFEST}: not an opbyop device image", _REBUILD) from None
            except ValidationError as e:
                raise ImageError(f"{path} has an invalid manifest: {e.errors()[0]['msg']}", _REBUILD) from None
            _check_version(manifest, path, plugin_version)
            missing = {PROGRAM, CONSTANTS, DEVICE} - set(manifest.members)
            if missing:
                raise ImageError(f"{path}: the manifest lists no {', '.join(sorted(missing))}", _REBUILD)
            data = {}
            for name, digest in manifest.members.items():
                try:
                    data[name] = zf.read(name)
                except (KeyError, zipfile.BadZipFile, EOFError, zlib.error, RuntimeError, NotImplementedError) as e:
                    raise ImageError(f"{path}: member {name} is missing or unreadable ({e})", _REBUILD) from None
                if hashlib.sha256(data[name]).hexdigest() != digest:
                    raise ImageError(f"{path}: member {name} does not match its checksum (corrupt)", _REBUILD)
        try:
            device = DeviceInfo.model_validate_json(data[DEVICE])
        except ValidationError as e:
            raise ImageError(f"{path}: invalid {DEVICE}: {e.errors()[0]['msg']}", _REBUILD) from None
        constants = _read_constants(data[CONSTANTS], path)
        return cls(manifest, device, data[PROGRAM].decode(), data.get(FLATBUFFER), constants)

    def get_input_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of the inputs a caller provides (parameters are in the image)."""
        return [t.tensor.shape for i, t in enumerate(self.manifest.inputs) if i not in self.constants]

    def info(self) -> str:
        m, d = self.manifest, self.device
        lines = [
            f"image format {m.format} v{m.format_version}; opbyop {m.opbyop_version}; jax-tt-plugin {m.plugin_version}; "
            f"TTNN schema {(m.ttnn_schema_hash or '-')[:16]}; created {m.created_at:%Y-%m-%d %H:%M} UTC",
            f"device: arch {d.arch}, chip_ids {d.chip_ids}, device type {d.device_type}, grid size "
            f"{d.grid_size[0]}x{d.grid_size[1]}, harvested rows {d.harvested_rows} (mask {d.harvesting_mask:#b})",
            f"compiled graph: model {m.model}, training {m.training}, modules [{m.model}]",
            "ordered input shapes: " + ", ".join(f"{t.name} {t.tensor}" for i, t in enumerate(m.inputs)
                                                   if i not in self.constants),
            f"parameters: {len(self.constants)} tensors, "
            f"{sum(v.nbytes for v in self.constants.values()):,} bytes",
            "ordered output (target) shapes: " + ", ".join(str(t) for t in m.outputs),
        ]
        return "\n".join(lines)

    def run(self, inputs: Sequence[np.ndarray], iterations: int = 1) -> list[np.ndarray]:
        """Run on the simulated device described by device.json; parameters pushed once."""
        from opbyop.device.runtime import Binary, open_device

        expected = self.get_input_shapes()
        if len(inputs) != len(expected):
            raise ImageError(f"the image takes {len(expected)} inputs ({expected}), got {len(inputs)}",
                             "pass one array per input shape `opbyop image info` lists")
        values: list[np.ndarray] = []
        given = iter(inputs)
        for i in range(len(self.manifest.inputs)):
            values.append(self.constants[i] if i in self.constants else np.asarray(next(given)))
        device = open_device(self.device.spec)
        try:
            return run_stitched(device, Binary.load(self.program_text, self.flatbuffer), values,
                                sorted(self.constants), iterations).outputs
        finally:
            device.close()


def _read_constants(data: bytes, path: Path) -> dict[int, np.ndarray]:
    """The parameters, after checking each array's declared size against its bytes: numpy would
    allocate whatever a crafted header claims before reading a byte."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as npz:
            for info in npz.infolist():
                with npz.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read_header(f)
                if dtype.hasobject:
                    raise ImageError(f"{path}: {info.filename} holds Python objects", "images carry plain arrays only")
                declared = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                if declared > info.file_size:
                    raise ImageError(f"{path}: {info.filename} claims {declared:,} bytes but holds {info.file_size:,}",
                                     "do not load images from untrusted sources")
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return {int(k[3:]): npz[k] for k in npz.files}
    except ImageError:
        raise
    except Exception as e:  # a malformed npz, whatever numpy says about it
        raise ImageError(f"{path}: the parameters cannot be read ({type(e).__name__}: {e})", _REBUILD) from None


def _check_members(zf: zipfile.ZipFile, path: Path) -> None:
    total = 0
    for info in zf.infolist():
        name = info.filename
        pure = PurePosixPath(name)
        if (not pure.parts or pure.is_absolute() or ".." in pure.parts or "\\" in name or name.startswith("/")
                or ":" in pure.parts[0] or name in (".", "")):
            raise ImageError(f"{path}: member path '{name}' escapes the archive", "do not load images from untrusted sources")
        if (info.external_attr >> 16) & 0o170000 == 0o120000:
            raise ImageError(f"{path}: member '{name}' is a symbolic link", "do not load images from untrusted sources")
        if info.file_size > MAX_MEMBER_BYTES:
            raise ImageError(f"{path}: member '{name}' is {info.file_size:,} bytes, over the {MAX_MEMBER_BYTES:,} limit",
                             "images hold one model; rebuild it")
        if info.compress_size and info.file_size / info.compress_size > MAX_COMPRESSION_RATIO and info.file_size > 1 << 20:
            raise ImageError(f"{path}: member '{name}' expands {info.file_size // info.compress_size}x (a zip bomb?)",
                             "do not load images from untrusted sources")
        total += info.file_size
    if total > MAX_TOTAL_BYTES:
        raise ImageError(f"{path}: members total {total:,} bytes, over the {MAX_TOTAL_BYTES:,} limit", _REBUILD)
    try:
        bad = zf.testzip()
    except (zlib.error, zipfile.BadZipFile, EOFError, OSError, RuntimeError, NotImplementedError) as e:
        raise ImageError(f"{path}: a member cannot be decompressed ({e}): corrupt or truncated", _REBUILD) from None
    if bad is not None:
        raise ImageError(f"{path}: member {bad} fails its CRC check (corrupt or truncated)", _REBUILD)


def _check_version(manifest: Manifest, path: Path, plugin_version: str | None) -> None:
    if manifest.format != FORMAT or manifest.format_version != FORMAT_VERSION:
        raise ImageError(f"{path} is format {manifest.format} v{manifest.format_version}; this opbyop reads "
                         f"{FORMAT} v{FORMAT_VERSION}", _REBUILD)
    if plugin_version is None:
        from opbyop.compiler.system_desc import plugin_version as installed

        plugin_version = installed()
    if manifest.plugin_version != plugin_version:
        raise ImageError(f"{path} was compiled by jax-tt-plugin {manifest.plugin_version}, this installation has "
                         f"{plugin_version}: its flatbuffer schema may differ", _REBUILD)


def inputs_of(graph_arguments: Sequence[object]) -> list[NamedTensor]:
    return [NamedTensor(name=a.name, tensor=a.tensor) for a in graph_arguments]  # type: ignore[attr-defined]
