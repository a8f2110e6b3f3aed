"""The self-describing device image (as TT-Buda's TTI was): everything to run without compiling.

One zip: manifest.json (versions, inputs, outputs, member checksums), device.json (arch, chip ids,
grid, harvested rows ...), the TTNN program and its flatbuffer, the parameters as .npz (never a
pickle: loading an untrusted pickle runs its code). Loading checks everything before use: a corrupt
or truncated archive, a member path that escapes the archive, an oversized member, a version
mismatch and a checksum mismatch are each refused with a message that says what to do.

Size limits hold for what a member really expands to, not what it declares: only the two methods
images are written with (stored, deflate) are read, and zipfile bounds each deflate step by the
bytes still declared; bzip2 and lzma members are refused (a bzip2 member expands in one step, to
gigabytes from kilobytes, whatever its header says). The archive inside (constants.npz) is held to
the same limits, against the same total.
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
from opbyop.atomic import atomic_path
from opbyop.compiler.flatbuf import read_root
from opbyop.compiler.builds import installed
from opbyop.boards import single_chip_board
from opbyop.device.arch import DeviceSpec
from opbyop.device.runtime import Binary, open_device
from opbyop.device.stitch import run_stitched
from opbyop.errors import ImageError, ModuleError
from opbyop.ir.parse import check_nesting
from opbyop.records import CompilerIdentity, TensorDesc

FORMAT = "opbyop-device-image"
FORMAT_VERSION = 1
MAX_MEMBER_BYTES = 4 << 30
MAX_TOTAL_BYTES = 8 << 30
MAX_COMPRESSION_RATIO = 200  # a zip bomb expands far beyond this
READ_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}
_METHOD_NAMES = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}
_UNTRUSTED = "do not load images from untrusted sources"
_REBUILD = "rebuild the image with `opbyop image build MODEL -o FILE` on this installation"


class NamedTensor(BaseModel):
    name: str
    tensor: TensorDesc


class Manifest(BaseModel):
    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    opbyop_version: str
    plugin_version: str  # the compiler's release ("" for a build no release names)
    compiler: CompilerIdentity | None = None  # the build that compiled it (images before it: only plugin_version)
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
                compiler: CompilerIdentity) -> Path:
    """Write a device image (atomically: a temporary file renamed into place)."""
    constants = io.BytesIO()
    np.savez(constants, **{f"arg{i}": v for i, v in parameters.items()})
    device = DeviceInfo(arch=spec.arch, chip_ids=[0], device_type=_device_type(spec), grid_size=spec.worker_grid,
                        harvested_rows=spec.harvested_rows, harvesting_mask=spec.harvesting_mask, spec=spec)
    members: dict[str, bytes] = {PROGRAM: program_text.encode(), CONSTANTS: constants.getvalue(),
                                 DEVICE: device.model_dump_json(indent=2).encode()}
    if flatbuffer is not None:
        members[FLATBUFFER] = flatbuffer
    manifest = Manifest(opbyop_version=__version__, plugin_version=compiler.version, compiler=compiler,
                        ttnn_schema_hash=read_root(flatbuffer).schema_hash if flatbuffer else None, model=model,
                        created_at=datetime.now(timezone.utc), inputs=list(inputs), parameters=sorted(parameters),
                        outputs=list(outputs), members={k: hashlib.sha256(v).hexdigest() for k, v in members.items()})
    path = Path(path)
    with atomic_path(path) as partial, zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(MANIFEST, manifest.model_dump_json(indent=2))
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _device_type(spec: DeviceSpec) -> str:
    """The board an image's one chip is named as: the single-chip board of its architecture."""
    return single_chip_board(spec.arch) or spec.arch


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
    def load(cls, path: Path, compiler: CompilerIdentity | None = None) -> DeviceImage:
        """Open and verify an image; it must have been compiled by `compiler` (default: the plugin
        installed beside opbyop): the same build where the image names one, else the same release."""
        path = Path(path)
        if not path.is_file():
            raise ImageError(f"no device image at {path}", "check the path")
        try:
            zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, NotImplementedError, EOFError, OSError, ValueError) as e:
            raise ImageError(f"{path} is not a readable zip archive ({e}): corrupt or truncated", _REBUILD) from None
        budget = _Budget(path)
        with zf:
            _check_members(zf, path, budget)
            try:
                manifest = Manifest.model_validate_json(_read_member(zf, MANIFEST))
            except KeyError:
                raise ImageError(f"{path} has no {MANIFEST}: not an opbyop device image", _REBUILD) from None
            except ValidationError as e:
                raise ImageError(f"{path} has an invalid manifest: {e.errors()[0]['msg']}", _REBUILD) from None
            _check_version(manifest, path, compiler)
            missing = {PROGRAM, CONSTANTS, DEVICE} - set(manifest.members)
            if missing:
                raise ImageError(f"{path}: the manifest lists no {', '.join(sorted(missing))}", _REBUILD)
            data = {}
            for name, digest in manifest.members.items():
                try:
                    data[name] = _read_member(zf, name)
                except (KeyError, zipfile.BadZipFile, EOFError, zlib.error, RuntimeError, NotImplementedError) as e:
                    raise ImageError(f"{path}: member {name} is missing or unreadable ({e})", _REBUILD) from None
                if hashlib.sha256(data[name]).hexdigest() != digest:
                    raise ImageError(f"{path}: member {name} does not match its checksum (corrupt)", _REBUILD)
        try:
            device = DeviceInfo.model_validate_json(data[DEVICE])
        except ValidationError as e:
            raise ImageError(f"{path}: invalid {DEVICE}: {e.errors()[0]['msg']}", _REBUILD) from None
        constants = _read_constants(data[CONSTANTS], path, budget)
        try:
            program = data[PROGRAM].decode()
        except UnicodeDecodeError:
            raise ImageError(f"{path}: {PROGRAM} is not text", _REBUILD) from None

        try:
            check_nesting(program, f"{path}: {PROGRAM}")  # the device's MLIR parser would die of it
        except ModuleError as e:
            raise ImageError(e.problem, _UNTRUSTED) from None
        return cls(manifest, device, program, data.get(FLATBUFFER), constants)

    def get_input_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of the inputs a caller provides (parameters are in the image)."""
        return [t.tensor.shape for i, t in enumerate(self.manifest.inputs) if i not in self.constants]

    def info(self) -> str:
        m, d = self.manifest, self.device
        lines = [
            f"image format {m.format} v{m.format_version}; opbyop {m.opbyop_version}; compiler "
            f"{m.compiler.label if m.compiler else f'jax-tt-plugin {m.plugin_version}'}; "
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
        expected = self.get_input_shapes()
        if len(inputs) != len(expected):
            raise ImageError(f"the image takes {len(expected)} inputs ({expected}), got {len(inputs)}",
                             "pass one array per input shape `opbyop image info` lists")
        for i, (array, shape) in enumerate(zip(inputs, expected)):
            if tuple(np.shape(array)) != tuple(shape):
                raise ImageError(f"input {i} has shape {tuple(np.shape(array))}, the image takes {tuple(shape)}",
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


def _read_member(zf: zipfile.ZipFile, name: str, chunk: int = 1 << 20) -> bytes:
    """A member read in bounded steps: zf.read() decompresses in one step of up to 2 GiB whatever
    the member declares (and only then cuts it to the declared size)."""
    out = io.BytesIO()
    with zf.open(name) as f:
        while block := f.read(chunk):
            out.write(block)
    return out.getvalue()


class _Budget:
    """Bytes an image may expand to, outer members and nested archive together."""

    def __init__(self, path: Path, limit: int = MAX_TOTAL_BYTES):
        self.path, self.limit, self.used = path, limit, 0

    def spend(self, nbytes: int, what: str) -> None:
        self.used += nbytes
        if self.used > self.limit:
            raise ImageError(f"{self.path}: {what} brings the image to {self.used:,} bytes, over the "
                             f"{self.limit:,} limit", _REBUILD)


def _read_constants(data: bytes, path: Path, budget: _Budget | None = None) -> dict[int, np.ndarray]:
    """The parameters, after holding the nested archive to the image's limits and checking each
    array's declared size against its bytes: numpy would allocate whatever a crafted header claims
    before reading a byte."""
    budget = budget or _Budget(path)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as npz:
            _check_members(npz, path, budget, inside=CONSTANTS)
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
                                     _UNTRUSTED)
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return {int(k[3:]): npz[k] for k in npz.files}
    except ImageError:
        raise
    except Exception as e:  # a malformed npz, whatever numpy says about it
        raise ImageError(f"{path}: the parameters cannot be read ({type(e).__name__}: {e})", _REBUILD) from None


def _check_members(zf: zipfile.ZipFile, path: Path, budget: _Budget | None = None, inside: str | None = None) -> None:
    """Every member of `zf` (the image, or the archive `inside` it): a safe path, no link, a method
    images are written with, within the size and ratio limits, and intact (CRC)."""
    budget = budget or _Budget(path)
    where = f"{path}: " + (f"{inside} member" if inside else "member")
    for info in zf.infolist():
        name = info.filename
        pure = PurePosixPath(name)
        if (not pure.parts or pure.is_absolute() or ".." in pure.parts or "\\" in name or name.startswith("/")
                or ":" in pure.parts[0] or name in (".", "")):
            raise ImageError(f"{where} path '{name}' escapes the archive", _UNTRUSTED)
        if (info.external_attr >> 16) & 0o170000 == 0o120000:
            raise ImageError(f"{where} '{name}' is a symbolic link", _UNTRUSTED)
        if info.compress_type not in READ_METHODS:
            method = _METHOD_NAMES.get(info.compress_type, f"method {info.compress_type}")
            raise ImageError(f"{where} '{name}' is compressed with {method}; images are written with "
                             f"{' or '.join(READ_METHODS.values())} only (other methods expand unchecked)", _UNTRUSTED)
        if info.file_size > MAX_MEMBER_BYTES:
            raise ImageError(f"{where} '{name}' is {info.file_size:,} bytes, over the {MAX_MEMBER_BYTES:,} limit",
                             "images hold one model; rebuild it")
        if info.file_size > 1 << 20 and info.file_size > MAX_COMPRESSION_RATIO * max(info.compress_size, 1):
            raise ImageError(f"{where} '{name}' expands {info.file_size // max(info.compress_size, 1):,}x "
                             f"(over {MAX_COMPRESSION_RATIO}x: a zip bomb?)", _UNTRUSTED)
        budget.spend(info.file_size, f"{'member' if not inside else inside + ' member'} '{name}'")
    try:  # reads every member in bounded steps: stored and deflate only, as checked above
        bad = zf.testzip()
    except (zlib.error, zipfile.BadZipFile, EOFError, OSError, RuntimeError, NotImplementedError) as e:
        raise ImageError(f"{where} cannot be decompressed ({e}): corrupt or truncated", _REBUILD) from None
    if bad is not None:
        raise ImageError(f"{where} {bad} fails its CRC check (corrupt or truncated)", _REBUILD)


def _check_version(manifest: Manifest, path: Path, compiler: CompilerIdentity | None) -> None:
    if manifest.format != FORMAT or manifest.format_version != FORMAT_VERSION:
        raise ImageError(f"{path} is format {manifest.format} v{manifest.format_version}; this opbyop reads "
                         f"{FORMAT} v{FORMAT_VERSION}", _REBUILD)
    compiler = compiler or installed().identity
    built = manifest.compiler
    same = (built.library_sha256 == compiler.library_sha256 if built is not None and built.library_sha256
            else manifest.plugin_version == compiler.version)
    if not same:
        by = built.label if built is not None else f"jax-tt-plugin {manifest.plugin_version}"
        again = f"run it with `--compiler {built.spec}`, or " if built is not None and built.spec else ""
        raise ImageError(f"{path} was compiled by {by}, the compiler here is {compiler.label}: its flatbuffer "
                         f"schema may differ", f"{again}{_REBUILD}")


def inputs_of(graph_arguments: Sequence[object]) -> list[NamedTensor]:
    return [NamedTensor(name=a.name, tensor=a.tensor) for a in graph_arguments]  # type: ignore[attr-defined]
