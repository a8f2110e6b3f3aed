"""`opbyop analyze` starts its Prefect server and Dask cluster before the command line is built: only
for an analyze command that will want them, adopted by the run that asked for the same, stopped for
any other."""

from __future__ import annotations

import os

import pytest

from opbyop_flows.cli import early
from opbyop_flows.cli.early import adopt, prepare
from opbyop_flows.cli.launching import Launch
from opbyop.environment import workspace_root


@pytest.mark.parametrize("argv, wanted", [
    (["analyze", "mlp"], (None, None, "p150")),
    (["analyze", "mlp", "cnn", "--workers", "2", "--chip", "n150", "--no-reuse"], (2, None, "n150")),
    (["analyze", "--address=tcp://127.0.0.1:8786", "--workers=3"], (3, "tcp://127.0.0.1:8786", "p150")),
])
def test_an_analyze_command_s_workers_address_and_chip_are_read_before_the_command_line(argv, wanted):
    options = early._analyze_options(argv)
    assert (options.workers, options.address, options.chip) == wanted


@pytest.mark.parametrize("argv", [[], ["run", "mlp"], ["analyze", "--help"], ["analyze", "mlp", "-h"],
                                  ["analyze", "--workers", "two"], ["analyze", "--workers", "0"]])
def test_nothing_starts_early_for_another_command_its_help_or_options_the_command_line_will_refuse(argv):
    assert early._analyze_options(argv) is None


def test_nothing_starts_early_when_a_prefect_api_is_configured(monkeypatch, tmp_path):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path))
    assert prepare(["analyze", "mlp"]) is None
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_the_run_adopts_the_server_started_for_it_and_one_started_for_other_options_is_stopped(monkeypatch, tmp_path):
    for key in [k for k in os.environ if k.startswith("PREFECT_")] + ["PREFECT_API_URL"]:
        monkeypatch.setenv(key, "")  # restored after the test, even the URL prepare sets
        monkeypatch.delenv(key)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "home"))
    address = "tcp://127.0.0.1:9"  # an existing scheduler named: a server starts, no cluster
    started = prepare(["analyze", "mlp", "--address", address])
    assert started is not None and started.cluster is None and started.api.started_here
    assert os.environ["PREFECT_API_URL"] == started.api.url
    launch = Launch(None, address, "p150", workspace_root() / "logs", started)
    try:
        assert launch.api is started.api and launch.cluster is None  # adopted, not started again
        assert launch.api.wait(timeout=120) == started.api.url  # and it answers
    finally:
        launch.api.close()

    del os.environ["PREFECT_API_URL"]  # a new command line
    started = prepare(["analyze", "mlp", "--address", address, "--chip", "n150"])
    server = started.api._proc  # the process, kept: a stopped PrefectApi forgets it
    assert adopt(started, None, address, "p150", workspace_root() / "logs") is None  # asked for another chip
    assert server.wait(timeout=30) is not None  # stopped


def test_the_command_finds_the_early_start_among_what_the_plugins_prepared(tmp_path):
    started = early.Services(None, None, "p150", tmp_path / "logs", api=None, cluster=None)
    assert early.started_early((object(), started)) is started
    assert early.started_early(()) is None and early.started_early(None) is None  # run without main (CliRunner)
