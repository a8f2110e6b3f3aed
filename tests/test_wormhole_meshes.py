"""Wormhole meshes (n300: 1x2, T3K: 2x4 or 1x8): descriptors opbyop derives itself, compiled for and
run end to end on small shapes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from opbyop.compiler.builds import installed
from opbyop.compiler.system_desc import plugin_schema_hash, resolve
from opbyop.compiler.targets import Topology, target_for
from opbyop.compiler.ttsys import HOST_MMIO, Arch, decode
from opbyop.errors import OpbyopError
from test_mesh import sharded_dot


def test_n300_and_t3k_are_meshes_with_the_topology_of_their_links():
    assert (target_for("n300").mesh, target_for("n300").topology) == ((1, 2), Topology.LINEAR)
    assert (target_for("t3k").mesh, target_for("t3k").topology) == ((2, 4), Topology.MESH_2D)
    assert target_for("t3k", "1x8").chips == 8
    with pytest.raises(OpbyopError, match="cannot be used as a 4x2 mesh"):
        target_for("t3k", "4x2")


def test_the_1x8_tensor_parallel_llama_fits_a_t3k_used_as_1x8_only(zoo):
    from opbyop.pipeline import prepare

    refused = prepare(["llama-tp-1x8"], zoo, target=target_for("t3k"))
    assert "1x8 mesh" in refused.errors["llama-tp-1x8"] and "--mesh 1x8" in refused.errors["llama-tp-1x8"]
    assert prepare(["llama-tp-1x8"], zoo, target=target_for("t3k", "1x8")).graphs


def test_a_run_on_a_wormhole_mesh_is_exported_at_the_wormhole_clock():
    from opbyop_storage.exports.perf_csv import chip_spec

    assert chip_spec("n300").arch == chip_spec("t3k").arch == "wormhole_b0"
    assert chip_spec("p150x8").arch == "blackhole"


def _cluster_yaml(board: str):
    from opbyop.compiler.builds import installed, unpack_assets
    from opbyop.compiler.system_desc import BOARDS, CLUSTER_DIR

    return unpack_assets(installed()) / CLUSTER_DIR / BOARDS[board].cluster_yaml


@pytest.mark.parametrize("board, chips, mmio, links", [("n300", 2, {0}, {(0, 1): 2}),
                                                       ("t3k", 8, {0, 1, 2, 3}, None)])
def test_a_derived_descriptor_has_wormhole_chips_the_boards_mmio_chips_and_its_links(board, chips, mmio, links):
    from opbyop.compiler.targets import links_of

    desc = resolve(board, check=False)
    assert desc.source == "derived" and desc.schema_hash == plugin_schema_hash(installed())
    system = decode(desc.path.read_bytes()).system_desc
    assert len(system.chip_descs) == chips and system.chip_desc_indices == tuple(range(chips))
    assert {(c.arch, c.grid_size, c.num_dram_channels) for c in system.chip_descs} == {(Arch.WORMHOLE_B0, (8, 8), 12)}
    assert {c for c, cap in enumerate(system.chip_capabilities) if cap & HOST_MMIO} == mmio
    pairs: dict[tuple[int, int], int] = {}
    for channel in system.chip_channels:
        assert channel.device_id0 < channel.device_id1 and channel.ethernet_core_coord0[1] == 0
        pairs[(channel.device_id0, channel.device_id1)] = pairs.get((channel.device_id0, channel.device_id1), 0) + 1
    assert pairs == (links or links_of(_cluster_yaml(board)))
    assert len(system.chip_channels) == (2 if board == "n300" else 20)


def test_a_wormhole_boards_chips_follow_its_cluster_description_whatever_the_layouts_size():
    from opbyop.compiler.ttsys import decode
    from opbyop.compiler.wormhole_descs import wormhole_mesh

    t3k = decode(wormhole_mesh(resolve("p300", check=False).path.read_bytes(), resolve("n150").path.read_bytes(),
                               _cluster_yaml("t3k")))
    assert len(t3k.system_desc.chip_descs) == 8  # the cluster's eight, from a two-chip Blackhole layout


@pytest.mark.parametrize("board, mesh", [("n300", "1x2"), ("t3k", "2x4"), ("t3k", "1x8")])
def test_a_sharded_dot_compiles_for_the_wormhole_mesh_with_its_all_reduce(board, mesh, workspace, compile_only):
    from opbyop.ir.dedupe import dedupe
    from opbyop.ir.split import split_module
    from opbyop.worker.process import OpWorker

    rows, cols = (int(n) for n in mesh.split("x"))
    dot = next(op for op in dedupe(split_module(sharded_dot(rows, cols), "m").ops)
               if op.op_name == "stablehlo.dot_general")
    settings = compile_only.model_copy(update={"mesh": mesh, "topology": target_for(board, mesh).topology.value})
    with OpWorker(resolve(board).path, workspace.root, chip=board, name=f"wh-{board}-{mesh}") as worker:
        result = worker.analyze(dot, settings, timeout=300)
    assert result.compile is not None and result.compile.ok, result.message
    program = workspace.artifacts.read_text(result.compile.artifacts["ttnn_runtime"])
    assert "arch = <wormhole_b0>, grid = 8x8" in program
    assert f'<"mesh" = {mesh}>' in program
    assert re.search(r'"ttnn.all_reduce".*cluster_axis = 1', program)
    assert result.mesh == mesh


@pytest.mark.slow
@pytest.mark.parametrize("board, mesh", [("n300", None), ("t3k", "2x4")])
def test_a_small_sharded_model_runs_end_to_end_on_the_wormhole_mesh(board, mesh, tmp_path):
    rows, cols = target_for(board, mesh).mesh
    path = tmp_path / "sharded.mlir"
    path.write_text(sharded_dot(rows, cols))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("JAX_")}, "OPBYOP_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "run", str(path), "--chip", board,
                           *(["--mesh", mesh] if mesh else [])],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = done.stdout.split("summary")[-1]
    assert "not_simulated" not in done.stdout and re.search(r"success: [1-9]", summary), done.stdout[-3000:]
    assert "failed" not in summary and "error" not in summary, summary
    whole = done.stdout.split("whole model")[-1]
    assert "GOLDEN" in whole and re.search(r"0\.99\d+|1\.0000", whole), whole
