"""A board is one record (opbyop.boards.BOARDS): its target, its system descriptor, the help
texts and errors that list boards, the board a device image names and the links the mesh simulator
routes over all derive from it. Boards added here at runtime reach each of them with nothing else
edited."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from opbyop.analysis.analyzer import OpAnalyzer
from opbyop.compiler import system_desc
from opbyop.compiler.assets import Notices
from opbyop.compiler.builds import Ran, installed, unpack_assets
from opbyop.boards import BOARDS, Board, DescriptorSource, Topology
from opbyop.compiler.system_desc import CLUSTER_DIR, generate_mock, resolve
from opbyop.compiler.targets import links_of, target_for, topology_of
from opbyop.config import AnalysisSettings
from opbyop.device.arch import BLACKHOLE_P150
from opbyop.device.image import DEVICE, build_image
from opbyop.device.mesh import Mesh, Transfer
from opbyop.device.simulator import DeviceSimulator
from opbyop.errors import OpbyopError
from opbyop.ir.mesh import ModuleMesh, check_fits
from opbyop.records import CompilerIdentity, DeviceRun

REPO = Path(__file__).resolve().parents[1]

# Boards no file of opbyop knows. A torus of eight Blackhole chips (the shape alone would say a 2D
# mesh without wrap), a single-chip twin of the p150 (mock mode), a Wormhole pair derived like the
# n300, and one chip of an architecture opbyop has never seen.
NEW_BOARDS = {
    "bhtorus8": Board(chips=8, meshes=((2, 4),), topology=Topology.TORUS_2D, cluster_yaml="blackhole_8xP150.yaml"),
    "p150twin": Board(chips=1, meshes=((1, 1),), cluster_yaml="blackhole_P150.yaml"),
    "whpair": Board(chips=2, meshes=((1, 2),), topology=Topology.LINEAR, arch="wormhole_b0",
                    cluster_yaml="wormhole_N300.yaml", source=DescriptorSource.DERIVED, layout_from="p300",
                    chip_from="n150"),
    "qs1": Board(chips=1, meshes=((1, 1),), arch="quasar", cluster_yaml="quasar_Q1.yaml"),
}


@pytest.fixture
def added(monkeypatch: pytest.MonkeyPatch) -> dict[str, Board]:
    """BOARDS with NEW_BOARDS added, as it was before once the test ends."""
    for name, board in NEW_BOARDS.items():
        monkeypatch.setitem(BOARDS, name, board)
    return NEW_BOARDS


def test_a_new_board_is_a_target_with_its_meshes_and_topology(added):
    target = target_for("bhtorus8")
    assert (target.mesh, target.topology, target.chips) == ((2, 4), Topology.TORUS_2D, 8)
    with pytest.raises(OpbyopError, match="cannot be used as a 1x8 mesh") as refused:
        target_for("bhtorus8", "1x8")
    assert "--mesh 2x4" in refused.value.fix


def test_the_mesh_simulator_routes_over_the_boards_topology_not_one_guessed_from_the_shape(added):
    target = target_for("bhtorus8")
    simulator = DeviceSimulator()
    # the worker's analyzer sets its simulator up from the run's settings, which carry the target's topology
    OpAnalyzer(None, None, simulator, None, Path()).configure_device(  # type: ignore[arg-type]
        AnalysisSettings(mesh=target.mesh_text, topology=target.topology.value))
    assert simulator.topology is Topology.TORUS_2D  # whole models too: run_stitched is handed it
    mesh = simulator.mesh_simulator().mesh_for(BLACKHOLE_P150, target.mesh)
    guessed = Mesh(BLACKHOLE_P150, target.mesh)
    try:
        assert (mesh.topology, guessed.topology) == (Topology.TORUS_2D, Topology.MESH_2D)
        corner_to_corner = [Transfer((0, 0), [(1, 3)], 2048)]
        assert mesh.cost(corner_to_corner).hops < guessed.cost(corner_to_corner).hops  # over the wrapping links
    finally:
        simulator.close()
        guessed.close()


def mock_mode_by_copy(monkeypatch, descriptor: Path) -> list[Path]:
    """The plugin's mock mode takes a minute: a copy of `descriptor` stands in for what it writes; the
    cluster descriptors it was asked to describe are returned, in order."""
    asked: list[Path] = []
    real = system_desc.run_verb

    def run_verb(compiler, verb, *args, **env):  # noqa: ANN001, ANN202
        if verb != "describe":
            return real(compiler, verb, *args, **env)
        asked.append(Path(env["TT_METAL_MOCK_CLUSTER_DESC_PATH"]))
        shutil.copy(descriptor, args[0])
        return Ran(ok=True)

    monkeypatch.setattr(system_desc, "run_verb", run_verb)
    return asked


def test_a_new_mock_board_is_described_by_the_plugin_from_its_cluster_descriptor(added, monkeypatch, tmp_path):
    asked = mock_mode_by_copy(monkeypatch, resolve("n150", check=False).path)
    monkeypatch.setattr(system_desc, "cache_dir", lambda compiler: tmp_path)
    desc = resolve("p150twin", check=False)
    assert (desc.chip, desc.source, desc.path) == ("p150twin", "mock", tmp_path / "p150twin.ttsys")
    assert asked == [unpack_assets(installed()) / CLUSTER_DIR / "blackhole_P150.yaml"]
    with pytest.raises(OpbyopError, match="no mock cluster descriptor for 'whpair'") as refused:
        generate_mock("whpair", tmp_path / "whpair.ttsys", installed())
    assert "p150twin" in refused.value.fix and "whpair" not in refused.value.fix


def test_a_new_derived_board_is_re_encoded_from_the_boards_its_record_names(added, monkeypatch, tmp_path):
    shutil.copy(resolve("p300", check=False).path, tmp_path / "p300.ttsys")  # the cached mock descriptor
    monkeypatch.setattr(system_desc, "cache_dir", lambda compiler: tmp_path)
    desc = resolve("whpair", check=False)
    assert (desc.source, desc.path) == ("derived", tmp_path / "whpair.ttsys")
    # the n300's recipe on the p300's layout: the same bytes as the n300's, derived from the p150's
    assert desc.path.read_bytes() == resolve("n300", check=False).path.read_bytes()


# The T3K derived from the plugin's own 8-chip Blackhole mesh (p150x8, minutes of mock start), measured
# with jax-tt-plugin 0.1.3: deriving it from the p150 instead must give these very bytes.
T3K_FROM_P150X8_SHA256 = "84a6ca1ef4a81e3c365a66ad3eeccc3333e403dd477be8f44dfe7f3e867a6bff"


def test_a_t3k_derived_from_the_p150_is_the_one_derived_from_the_plugins_eight_chip_mesh(monkeypatch, tmp_path):
    shutil.copy(resolve("p150", check=False).path, tmp_path / "p150.ttsys")
    monkeypatch.setattr(system_desc, "cache_dir", lambda compiler: tmp_path)
    said: list[str] = []
    desc = resolve("t3k", check=False, notices=Notices(say=said.append))
    if installed().identity.version == "0.1.3":
        assert desc.sha256 == T3K_FROM_P150X8_SHA256
    assert not (tmp_path / "p150x8.ttsys").exists()  # no mock start of a mesh
    (line,) = said  # said once, with what it is made from and why
    assert "t3k system descriptor: derived by opbyop" in line and "mock mode cannot" in line
    assert "t3k_cluster_desc.yaml" in line and str(desc.path) in line
    said.clear()
    resolve("t3k", check=False, notices=Notices(say=said.append))
    assert said == []  # nothing made the second time: nothing said


def test_errors_that_list_boards_name_the_new_ones(added):
    with pytest.raises(OpbyopError) as unknown:
        resolve("no-such-board")
    assert all(name in unknown.value.fix for name in added)
    with pytest.raises(OpbyopError) as single:
        check_fits(ModuleMesh(axes=(("x", 2),)), 1, "the module", "p150")
    assert "bhtorus8" in single.value.fix and "whpair" in single.value.fix and "qs1" not in single.value.fix


def test_a_device_image_names_a_chip_of_a_new_architecture_by_its_board(added, tmp_path):
    spec = BLACKHOLE_P150.model_copy(update={"arch": "quasar"})
    path = build_image(tmp_path / "image.zip", model="m", program_text="", flatbuffer=None, spec=spec, inputs=[],
                       parameters={}, outputs=[], compiler=CompilerIdentity())
    with zipfile.ZipFile(path) as zf:
        assert json.loads(zf.read(DEVICE))["device_type"] == "qs1"


def test_help_texts_list_a_board_added_before_the_commands_are_built():
    # help texts are made when the commands are: the board is added first, in a process of its own
    boards = {name: board.model_dump(mode="json") for name, board in NEW_BOARDS.items()}
    script = f"""
from opbyop.boards import BOARDS, Board
BOARDS.update({{name: Board.model_validate(b) for name, b in {boards!r}.items()}})
from typer.testing import CliRunner
from opbyop.cli.main import build_app
from opbyop.config import AnalysisConfig
from opbyop.corpus.config import CorpusConfig
app = build_app()
for command in (["run", "--help"], ["analyze", "--help"], ["corpus", "run", "--help"], ["system-desc", "--help"]):
    print(" ".join(CliRunner().invoke(app, command).output.split()))
for field in ("chip", "mesh"):
    print(AnalysisConfig.model_fields[field].description)
print(CorpusConfig.model_fields["meshes"].description)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "COLUMNS": "1000", "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    run, analyze, corpus_run, describe, chip, mesh, corpus_meshes = proc.stdout.strip().splitlines()[-7:]
    for text in (run, analyze, corpus_run, describe, chip):
        assert "p150twin" in text and "qs1" in text and "whpair" in text, text
    for text in (run, analyze):
        assert "bhtorus8" in text, text
    assert "p150x4: 1x4|2x2" in analyze  # every board that allows several shapes, none forgotten
    assert "p150x4: 1x4 or 2x2" in mesh and "bh-galaxy: 4x8 or 8x4 or 1x32" in mesh
    assert "bhtorus8" in corpus_meshes and "whpair" in corpus_meshes and "p150twin" not in corpus_meshes


def test_each_boards_record_agrees_with_its_cluster_descriptor_and_the_boards_it_derives_from():
    for name, board in BOARDS.items():
        path = unpack_assets(installed()) / CLUSTER_DIR / board.cluster_yaml
        assert topology_of(links_of(path), board.chips) is board.topology, name
        if board.source is DescriptorSource.DERIVED:
            layout, chip = BOARDS[board.layout_from], BOARDS[board.chip_from]
            assert layout.source is DescriptorSource.MOCK, name
            assert (chip.chips, chip.arch) == (1, board.arch), name


def test_a_record_that_contradicts_itself_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="must have 8 chips"):
        Board(chips=8, meshes=((2, 2),), topology=Topology.MESH_2D, cluster_yaml="x.yaml")
    with pytest.raises(ValueError, match="cannot have topology single"):
        Board(chips=2, meshes=((1, 2),), cluster_yaml="x.yaml")
    with pytest.raises(ValueError, match="needs layout_from"):
        Board(chips=2, meshes=((1, 2),), topology=Topology.LINEAR, cluster_yaml="x.yaml",
              source=DescriptorSource.DERIVED)


def test_one_topology_reads_the_spellings_older_device_runs_stored():
    assert DeviceRun(topology="mesh2d").topology == DeviceRun(topology="2d").topology == "2d"
    assert Topology("torus2d") is Topology.TORUS_2D and Topology("linear") is Topology.LINEAR


@pytest.mark.slow
def test_the_shipped_descriptors_are_what_the_plugin_writes_and_a_refused_one_falls_back_to_the_plugin(
        monkeypatch, tmp_path):
    compiler = installed()
    shipped = system_desc.shipped_descriptor(compiler.identity, "p150")
    if shipped is None or not shipped.exists():
        pytest.skip(f"nothing shipped for {compiler.label}: the plugin makes them")
    # the plugin itself, in mock mode, writes the very bytes opbyop ships for its version
    made = generate_mock("p150", tmp_path / "made" / "p150.ttsys", compiler)
    assert made.read_bytes() == shipped.read_bytes()
    # a shipped file the compiler refuses is said, and the plugin makes the descriptor instead
    corrupt = tmp_path / "shipped" / "p100.ttsys"
    corrupt.parent.mkdir()
    data = bytearray(shipped.read_bytes())
    data[200:260] = bytes(60)  # a body the header checks cannot see
    corrupt.write_bytes(bytes(data))
    asked = mock_mode_by_copy(monkeypatch, made)
    monkeypatch.setattr(system_desc, "shipped_descriptor", lambda identity, board: tmp_path / "shipped" / f"{board}.ttsys")
    monkeypatch.setattr(system_desc, "cache_dir", lambda compiler: tmp_path / "cache")
    said: list[str] = []
    desc = resolve("p100", check=False, notices=Notices(say=said.append))
    assert asked == [unpack_assets(compiler) / CLUSTER_DIR / "blackhole_P100.yaml"]
    assert desc.path.read_bytes() == made.read_bytes()
    assert any("the shipped p100 descriptor was refused" in line for line in said), said
    assert any("tt-metal's mock mode" in line for line in said), said
