"""Hostile device images: limits hold for what members really expand to, nested
archives included; text in an image is printed literally. Images are made here, without compiling."""

from __future__ import annotations

import hashlib
import io
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from opbyop.cli.main import build_app
from opbyop.compiler.builds import installed
from opbyop.device.arch import DeviceSpec
from opbyop.device.image import (CONSTANTS, DEVICE, MANIFEST, PROGRAM, DeviceImage, DeviceInfo, Manifest,
                                 NamedTensor)
from opbyop.errors import ImageError
from opbyop.records import TensorDesc

SPEC = DeviceSpec(arch="blackhole", grid_y=10, grid_x=11, l1_size=1 << 20, l1_unreserved_base=0,
                  num_dram_channels=8, dram_channel_size=1 << 30)


def npz(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def write_image(path: Path, *, constants: bytes | None = None, program: bytes = b"module {}\n", model: str = "mlp",
                methods: dict[str, int] | None = None, extra: dict[str, tuple[bytes, int]] | None = None) -> Path:
    """A well-formed image (manifest checksums right) whose members the caller chooses."""
    device = DeviceInfo(arch="blackhole", chip_ids=[0], device_type="p150", grid_size=(10, 11), harvested_rows=0,
                        harvesting_mask=0, spec=SPEC).model_dump_json().encode()
    members = {PROGRAM: program, CONSTANTS: constants if constants is not None else npz({}), DEVICE: device}
    manifest = Manifest(opbyop_version="0.1.0", plugin_version=installed().identity.version, model=model,
                        created_at=datetime.now(timezone.utc),
                        inputs=[NamedTensor(name="x", tensor=TensorDesc(shape=(2, 3), dtype="f32"))], parameters=[],
                        outputs=[], members={k: hashlib.sha256(v).hexdigest() for k, v in members.items()})
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(MANIFEST, manifest.model_dump_json(), compress_type=zipfile.ZIP_DEFLATED)
        for name, data in members.items():
            zf.writestr(name, data, compress_type=(methods or {}).get(name, zipfile.ZIP_DEFLATED))
        for name, (data, method) in (extra or {}).items():
            zf.writestr(name, data, compress_type=method)
    return path


def deflated_zeros_npz(nbytes: int) -> bytes:
    """An npz whose one array is `nbytes` of zeros, deflated (about 1000x smaller)."""
    buf = io.BytesIO()
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (nbytes // 4,)})
    with zipfile.ZipFile(buf, "w") as zf:
        info = zipfile.ZipInfo("arg0.npy")
        info.compress_type = zipfile.ZIP_DEFLATED
        with zf.open(info, "w") as f:
            f.write(header.getvalue())
            f.write(bytes(nbytes))
    return buf.getvalue()


def test_a_well_formed_image_loads(tmp_path):
    image = DeviceImage.load(write_image(tmp_path / "ok.zip", constants=npz({"arg1": np.ones((2, 2), np.float32)})))
    assert image.manifest.model == "mlp" and image.constants[1].shape == (2, 2)


def test_a_nested_archive_is_held_to_the_ratio_limit(tmp_path):
    """An uncompressed constants.npz whose member is deflated zeros (the 4.3 MB -> 4.4 GB image)."""
    path = write_image(tmp_path / "nested.zip", constants=deflated_zeros_npz(64 << 20),
                       methods={CONSTANTS: zipfile.ZIP_STORED})
    assert path.stat().st_size < 200_000
    with pytest.raises(ImageError, match=r"constants.npz member 'arg0.npy' expands [0-9,]+x"):
        DeviceImage.load(path)


def test_a_bzip2_member_is_refused_whatever_it_declares(tmp_path):
    """bzip2 expands in one step (43 KB -> 2.65 GB) before any size check: images never use it."""
    path = write_image(tmp_path / "bz.zip", extra={"programs/extra.bin": (bytes(1000), zipfile.ZIP_BZIP2)})
    with pytest.raises(ImageError, match="compressed with bzip2"):
        DeviceImage.load(path)
    inner = write_image(tmp_path / "bz-inner.zip", methods={CONSTANTS: zipfile.ZIP_STORED},
                        constants=_npz_with_method(zipfile.ZIP_BZIP2))
    with pytest.raises(ImageError, match="constants.npz member 'arg0.npy' is compressed with bzip2"):
        DeviceImage.load(inner)


def _npz_with_method(method: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        array = io.BytesIO()
        np.save(array, np.zeros(16, np.float32))
        zf.writestr("arg0.npy", array.getvalue(), compress_type=method)
    return buf.getvalue()


def test_a_deflated_member_lying_about_its_size_is_refused(tmp_path):
    """It declares 1,000 bytes and holds 32 MB of zeros: read in bounded steps, its CRC fails."""
    path = write_image(tmp_path / "liar.zip", extra={"programs/extra.bin": (bytes(32 << 20), zipfile.ZIP_DEFLATED)})
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("programs/extra.bin")
    for at in (info.header_offset + 22, _central_entry(data, "programs/extra.bin") + 24):
        data[at:at + 4] = (1000).to_bytes(4, "little")  # uncompressed size, local and central headers
    path.write_bytes(bytes(data))
    with pytest.raises(ImageError, match="corrupt or truncated|CRC"):
        DeviceImage.load(path)


def _central_entry(data: bytearray, name: str) -> int:
    at = 0
    while True:
        at = data.index(b"PK\x01\x02", at)
        length = int.from_bytes(data[at + 28 : at + 30], "little")
        if data[at + 46 : at + 46 + length] == name.encode():
            return at
        at += 4


def test_a_program_nested_too_deep_is_refused(tmp_path):
    path = write_image(tmp_path / "deep.zip", program=b"module {\n" * 100_000 + b"}\n" * 100_000,
                       methods={PROGRAM: zipfile.ZIP_STORED})
    with pytest.raises(ImageError, match="100,000 levels deep"):
        DeviceImage.load(path)


def test_text_in_an_image_is_printed_literally(tmp_path):
    path = write_image(tmp_path / "[red]x.zip", model="[cnn] :factory: [/x]")
    result = CliRunner().invoke(build_app(), ["image", "info", str(path)])
    assert result.exit_code == 0, result.output
    assert "modules [[cnn] :factory: [/x]]" in result.output and "model [cnn] :factory: [/x]" in result.output


def test_inputs_that_do_not_fit_the_image_are_refused(tmp_path):
    path = write_image(tmp_path / "ok.zip")
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, np.zeros((3, 3), np.float32))
    not_npz = tmp_path / "not.npz"
    not_npz.write_bytes(b"not an npz")
    runner = CliRunner()
    for inputs, expected in ((wrong, "input 0 has shape (3, 3), the image takes (2, 3)"),
                             (not_npz, "cannot read inputs from")):
        result = runner.invoke(build_app(), ["image", "run", str(path), "--inputs", str(inputs)])
        assert result.exit_code == 2 and expected in result.output and "Traceback" not in result.output, result.output
