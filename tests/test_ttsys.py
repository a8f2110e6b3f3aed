"""System descriptors read and written by opbyop's own SystemDesc FlatBuffers codec."""

from __future__ import annotations

import pytest

from opbyop.compiler.flatbuf import FlatbufferError, read_root
from opbyop.compiler.system_desc import resolve
from opbyop.compiler.ttsys import Arch, decode, encode
from opbyop.device.arch import DeviceSpec
from opbyop.worker.process import OpWorker


def _system_desc_line(program: str) -> str:
    """The `#ttcore.system_desc<...>` the compiler printed into a program: what it read."""
    start = program.find("#ttcore.system_desc<")
    return program[start:program.find("\n", start)]


def test_p150_and_n150_descriptors_decode_and_re_encode_to_the_same_values(p150):
    for desc, arch, grid, l1, channels in [(p150, Arch.BLACKHOLE, (10, 11), 1_572_864, 8),
                                           (resolve("n150"), Arch.WORMHOLE_B0, (8, 8), 1_499_136, 12)]:
        data = desc.path.read_bytes()
        root = decode(data)
        (chip,) = root.system_desc.chip_descs
        assert (chip.arch, chip.grid_size, chip.l1_size, chip.num_dram_channels) == (arch, grid, l1, channels)
        assert len(chip.dram_bank_to_logical_worker_noc0) == channels
        assert root.schema_hash == desc.schema_hash and root.system_desc.cpu_descs[0].target_triple
        again = encode(root)
        assert decode(again) == root
        assert encode(decode(again)) == again  # the writer is deterministic
        assert read_root(again).identifier == "TTSY" and read_root(again).schema_hash == desc.schema_hash
        if desc.source == "mock":  # written by the plugin itself: built as its runtime builds it, byte for byte
            assert again == data


def test_a_mesh_descriptor_the_plugin_wrote_re_encodes_byte_for_byte():
    data = resolve("p300", check=False).path.read_bytes()
    root = decode(data)
    assert root.chips == 2 and {c.device_id0 for c in root.system_desc.chip_channels} == {0}
    assert encode(root) == data


def test_a_buffer_that_is_not_a_whole_descriptor_is_refused_with_the_reason(p150):
    data = p150.path.read_bytes()
    with pytest.raises(FlatbufferError, match="size prefix"):
        decode(data[:-8])
    with pytest.raises(FlatbufferError, match="identifier"):
        decode(data[:8] + b"TTNN" + data[12:])
    with pytest.raises(FlatbufferError, match="too short"):
        decode(b"\x00" * 8)
    root = decode(data)
    (chip,) = root.system_desc.chip_descs
    unknown_arch = chip.model_construct(**{**dict(chip), "arch": 7})  # no architecture of this schema
    other = encode(root.model_copy(update={"system_desc": root.system_desc.model_copy(
        update={"chip_descs": (unknown_arch,)})}))
    with pytest.raises(FlatbufferError, match="not a system descriptor of this schema"):
        decode(other)


@pytest.mark.slow
def test_p150_re_encoded_with_n150_values_is_read_by_the_compiler_as_the_shipped_n150(
        p150, tmp_path, compile_only, mlp_ops, workspace):
    n150 = resolve("n150")
    (wormhole,) = decode(n150.path.read_bytes()).system_desc.chip_descs
    blackhole = decode(p150.path.read_bytes())
    made = tmp_path / "n150-from-p150.ttsys"
    made.write_bytes(encode(blackhole.model_copy(update={
        "system_desc": blackhole.system_desc.model_copy(update={"chip_descs": (wormhole,)})})))
    matmul = next(op for op in mlp_ops if op.op_name == "stablehlo.dot_general")
    printed = {}
    for name, path in [("made", made), ("shipped", n150.path)]:
        with OpWorker(path, workspace.root, chip="n150", name=f"ttsys-{name}") as worker:
            result = worker.analyze(matmul, compile_only, timeout=120)
        assert result.compile is not None and result.compile.ok, result.message
        printed[name] = _system_desc_line(workspace.artifacts.read_text(result.compile.artifacts["ttnn_runtime"]))
    assert printed["made"] == printed["shipped"]
    spec = DeviceSpec.from_system_desc(printed["made"])
    assert (spec.arch, spec.grid_y, spec.grid_x) == ("wormhole_b0", 8, 8)
