"""The device image: build, load, info, run; and every hostile archive refused with a reason."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from opbyop.compiler.builds import installed
from opbyop.device.image import MANIFEST, PROGRAM, DeviceImage, build_image, inputs_of
from opbyop.device.program import load_program
from opbyop.errors import ImageError
from opbyop.graph import ArgumentKind
from opbyop.records import TensorDesc


@pytest.fixture(scope="module")
def image(worker, settings, mlp_graph, workspace, tmp_path_factory):
    whole = worker.analyze_whole(mlp_graph, settings)
    program = workspace.artifacts.read_text(whole.compile.artifacts["ttnn_runtime"])
    parameters = {i: v for i, (a, v) in enumerate(zip(mlp_graph.arguments, mlp_graph.argument_values))
                  if a.kind is ArgumentKind.PARAMETER}
    path = tmp_path_factory.mktemp("image") / "mlp.zip"
    return build_image(path, model="mlp", program_text=program,
                       flatbuffer=workspace.artifacts.read(whole.compile.artifacts["flatbuffer"]),
                       spec=load_program(program).spec, inputs=inputs_of(mlp_graph.arguments),
                       parameters=parameters, outputs=[TensorDesc(shape=(4, 10), dtype="f32")],
                       compiler=installed().identity)


def test_round_trip_runs_without_compiling(image, mlp_graph):
    loaded = DeviceImage.load(image)
    assert loaded.get_input_shapes() == [(4, 64)]
    (out,) = loaded.run([mlp_graph.argument_values[0]])
    np.testing.assert_allclose(out, mlp_graph.reference_outputs[0], atol=1e-3)


def test_info_prints_what_the_seed_printed(image):
    info = DeviceImage.load(image).info()
    for expected in ("jax-tt-plugin 0.1.3", "arch blackhole", "chip_ids [0]", "device type p150", "grid size",
                     "harvested rows 0", "training False", "ordered input shapes: input0 4x64xf32",
                     "ordered output (target) shapes: 4x10xf32"):
        assert expected in info


def rewrite(src, dst, edit=None, extra=None):
    """Copy a zip member by member, editing the manifest and adding members."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename == MANIFEST and edit:
                manifest = json.loads(data)
                edit(manifest)
                data = json.dumps(manifest).encode()
            zout.writestr(info.filename, data)
        for name, data in (extra or {}).items():
            zout.writestr(name, data)
    return dst


def test_truncated_archive_is_refused(image, tmp_path):
    cut = tmp_path / "cut.zip"
    cut.write_bytes(image.read_bytes()[: image.stat().st_size // 2])
    with pytest.raises(ImageError, match="corrupt or truncated"):
        DeviceImage.load(cut)


def test_corrupt_member_is_refused(image, tmp_path):
    data = bytearray(image.read_bytes())
    with zipfile.ZipFile(image) as zf:
        info = zf.getinfo(PROGRAM)
    at = info.header_offset + 30 + len(info.filename) + 10  # inside the member's compressed bytes
    data[at] ^= 0xFF
    bad = tmp_path / "flipped.zip"
    bad.write_bytes(bytes(data))
    with pytest.raises(ImageError, match="CRC|corrupt"):
        DeviceImage.load(bad)


def test_member_path_escaping_the_archive_is_refused(image, tmp_path):
    evil = rewrite(image, tmp_path / "evil.zip", extra={"../../etc/cron.d/evil": b"* * * * * root rm -rf /"})
    with pytest.raises(ImageError, match="escapes the archive"):
        DeviceImage.load(evil)


def test_oversized_and_bomb_members_are_refused(image, tmp_path, monkeypatch):
    bomb = rewrite(image, tmp_path / "bomb.zip", extra={"padding.bin": b"\0" * (64 << 20)})
    with pytest.raises(ImageError, match="zip bomb"):
        DeviceImage.load(bomb)
    monkeypatch.setattr("opbyop.device.image.MAX_MEMBER_BYTES", 1000)
    with pytest.raises(ImageError, match="over the 1,000 limit"):
        DeviceImage.load(image)


def test_version_and_checksum_mismatches_are_refused(image, tmp_path):
    def other_plugin(m):
        m["plugin_version"] = "9.9.9"
        m.pop("compiler")  # an image written before images named their compiler build

    with pytest.raises(ImageError, match="compiled by jax-tt-plugin 9.9.9"):
        DeviceImage.load(rewrite(image, tmp_path / "old.zip", other_plugin))

    def same_version_other_build(m):  # a local build that says the installed release's version
        m["compiler"] = {**m["compiler"], "library_sha256": "0" * 64, "spec": "/builds/libtt.so"}

    with pytest.raises(ImageError, match="--compiler /builds/libtt.so"):
        DeviceImage.load(rewrite(image, tmp_path / "local.zip", same_version_other_build))

    def newer_format(m):
        m["format_version"] = 2

    with pytest.raises(ImageError, match="v2"):
        DeviceImage.load(rewrite(image, tmp_path / "new.zip", newer_format))

    def tampered(m):
        m["members"][PROGRAM] = "0" * 64

    with pytest.raises(ImageError, match="does not match its checksum"):
        DeviceImage.load(rewrite(image, tmp_path / "tampered.zip", tampered))


def test_not_an_image_is_refused(tmp_path):
    text = tmp_path / "model.zip"
    text.write_text("hello")
    with pytest.raises(ImageError, match="not a readable zip"):
        DeviceImage.load(text)
    with pytest.raises(ImageError, match="no device image"):
        DeviceImage.load(tmp_path / "missing.zip")


def test_a_parameter_claiming_more_memory_than_it_holds_is_refused(image, tmp_path):
    import io

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)})
    fake = io.BytesIO()
    with zipfile.ZipFile(fake, "w") as npz:
        npz.writestr("arg1.npy", b"\x93NUMPY\x01\x00" + header.getvalue()[8:] + b"\0" * 16)

    def swap_constants(m):
        import hashlib
        m["members"]["constants.npz"] = hashlib.sha256(fake.getvalue()).hexdigest()

    bomb = tmp_path / "claims.zip"
    with zipfile.ZipFile(image) as zin, zipfile.ZipFile(bomb, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename == "constants.npz":
                data = fake.getvalue()
            if info.filename == MANIFEST:
                manifest = json.loads(data)
                swap_constants(manifest)
                data = json.dumps(manifest).encode()
            zout.writestr(info.filename, data)
    with pytest.raises(ImageError, match="claims 4,398,046,511,104 bytes"):
        DeviceImage.load(bomb)
