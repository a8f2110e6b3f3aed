"""The multichip corpus as part of the corpus target: its cases compiled for a board's mesh, run on
the mesh of simulated chips and against XLA:CPU on a host mesh, counted in the coverage report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbyop.corpus.coverage import simulated
from opbyop.corpus.mesh_run import board_targets
from opbyop.errors import OpbyopError
from opbyop.records import Status


def test_a_board_runs_every_catalog_mesh_shape_it_allows_or_the_one_it_names():
    assert [t.mesh_text for t in board_targets("p150x4")] == ["1x4", "2x2"]
    assert [t.mesh_text for t in board_targets("p150x8:1x8")] == ["1x8"]
    assert [t.mesh_text for t in board_targets("bh-galaxy")] == ["4x8"]


@pytest.mark.parametrize("board", ["p150", "no-such-board"])
def test_a_board_of_one_chip_or_an_unknown_one_is_refused_with_the_boards_to_use(board):
    with pytest.raises(OpbyopError, match="not a board of several chips") as e:
        board_targets(board)
    assert "p300" in e.value.fix


@pytest.mark.slow
def test_the_corpus_nightly_runs_the_multichip_cases_of_its_boards_and_reports_their_coverage(tmp_path: Path,
                                                                                               monkeypatch):
    """f32 on p300 (1x2): seven collectives through a real worker, compiled for the mesh, stored as a run."""
    from opbyop.cli.main import build_app
    from opbyop_storage.dataset import Store

    app = build_app()
    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "home"))
    (tmp_path / "corpus.yaml").write_text("chips: [p150]\nops: [exponential]\ndtypes: [f32]\nforms: [args]\n"
                                          "meshes: [p300]\n")
    night = CliRunner().invoke(app, ["corpus", "nightly", "--config", str(tmp_path / "corpus.yaml")])
    assert night.exit_code == 0, night.output
    assert "p300 1x2: 7 unique ops, 0 reused" in night.output  # every collective: the ops name none of them
    assert "ttnn.all_reduce" in night.output and "ttnn.point_to_point" in night.output  # the board's coverage table
    run_id = re.search(r"p300 1x2: .*\(run (\S+)\)", night.output).group(1)
    store = Store(tmp_path / "home" / "store")
    found = {r.signature: r for r in store.results(run_id)}
    assert len(found) == 7 and all(r.mesh == "1x2" for r in found.values()) and store.run(run_id).mesh == "1x2"
    coverage = json.loads(CliRunner().invoke(app, ["coverage", "--run", run_id, "-f", "json"]).output)
    emitted = {o["ttnn_op"] for o in coverage["ops"]}
    assert {"ttnn.all_reduce", "ttnn.all_gather", "ttnn.reduce_scatter", "ttnn.point_to_point"} <= emitted
    assert all(simulated(op) for op in emitted)  # collectives by the mesh, the rest by each chip
    # collective_broadcast too: XLA:CPU lacks it, its golden runs the same values as an all_gather
    assert {s: r.status for s, r in found.items()} == dict.fromkeys(found, Status.SUCCESS), \
        {s: r.message for s, r in found.items()}
    again = CliRunner().invoke(app, ["corpus", "nightly", "--config", str(tmp_path / "corpus.yaml")])
    assert again.exit_code == 0 and "p300 1x2: 7 unique ops, 7 reused" in again.output
