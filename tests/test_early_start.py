"""`opbyop analyze` starts its Prefect server and Dask cluster before the command line is built: only
for an analyze command that will want them, adopted by the run that asked for the same, stopped for
any other."""

from __future__ import annotations

import os
import time

import pytest
from distributed import Client

from opbyop_flows.cli import early
from opbyop_flows.cli.early import adopt, prepare
from opbyop_flows.cli.launching import Launch
from opbyop_flows.hosting.cluster_process import ClusterProcess
from opbyop.boards import DEFAULT_CHIP
from opbyop.compiler.builds import installed
from opbyop.compiler.builds import prepare as prepare_build
from opbyop.compiler.system_desc import resolve
from opbyop.compiler.targets import target_for
from opbyop.compiler_spec import INSTALLED
from opbyop.environment import workspace_root
from opbyop.worker.dask import OpWorkerPlugin
from opbyop.workspace import Workspace

ANOTHER_BUILD = "jax-tt-plugin==0.1.2"  # not the installed plugin


@pytest.mark.parametrize("argv, wanted", [
    (["analyze", "mlp"], (None, None, "p150")),
    (["analyze", "mlp", "cnn", "--workers", "2", "--chip", "n150", "--no-reuse"], (2, None, "n150")),
    (["analyze", "--address=tcp://127.0.0.1:8786", "--workers=3"], (3, "tcp://127.0.0.1:8786", "p150")),
])
def test_an_analyze_command_s_workers_address_and_chip_are_read_before_the_command_line(argv, wanted):
    options = early._analyze_options(argv)
    assert (options.workers, options.address, options.chip) == wanted


@pytest.mark.parametrize("argv, wanted", [
    (["analyze", "mlp"], INSTALLED),
    (["analyze", "mlp", "--compiler", ANOTHER_BUILD, "--compiler", "installed"], ANOTHER_BUILD),
    (["analyze", "mlp", f"--compiler={ANOTHER_BUILD}"], ANOTHER_BUILD),
])
def test_the_build_the_early_cluster_warms_for_is_the_command_s_first(argv, wanted):
    options = early._analyze_options(argv)
    assert (options.compiler or [INSTALLED])[0] == wanted


def test_what_was_started_for_another_build_is_not_adopted(tmp_path):
    started = early.Services(None, None, "p150", tmp_path / "logs", INSTALLED, api=None, cluster=None)
    assert adopt(started, None, None, "p150", tmp_path / "logs", ANOTHER_BUILD) is None
    started = early.Services(None, None, "p150", tmp_path / "logs", ANOTHER_BUILD, api=None, cluster=None)
    assert adopt(started, None, None, "p150", tmp_path / "logs", ANOTHER_BUILD) is started


@pytest.mark.slow
def test_a_cluster_started_for_a_run_of_another_build_warms_that_build_s_op_workers(monkeypatch, tmp_path):
    """The plugin the run registers (its name carries the build) is on the workers before the run asks,
    and none for the installed build, which this run would never use."""
    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "home"))
    wanted = {}
    for build in (prepare_build(ANOTHER_BUILD), installed()):
        desc = resolve(DEFAULT_CHIP, compiler=build)
        wanted[build.identity.spec] = OpWorkerPlugin.for_home(  # as the run makes it (flows/engine/analyze_run.py)
            Workspace.default().root, {desc.chip: desc.path.read_bytes()},
            host_devices=target_for(DEFAULT_CHIP).chips, compiler=build).name
    process = ClusterProcess(1, DEFAULT_CHIP, tmp_path / "logs", compiler=ANOTHER_BUILD)
    try:
        with Client(process.wait(), timeout=30, set_as_default=False) as client:
            deadline, plugins = time.monotonic() + 300, []
            while time.monotonic() < deadline and wanted[ANOTHER_BUILD] not in plugins:
                (plugins,) = client.run(lambda dask_worker: sorted(dask_worker.plugins)).values()
                time.sleep(0.5)
    finally:
        process.close()
    assert wanted[ANOTHER_BUILD] in plugins, (tmp_path / "logs" / "dask-cluster.log").read_text()[-2000:]
    assert wanted[INSTALLED] not in plugins


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
    started = early.Services(None, None, "p150", tmp_path / "logs", INSTALLED, api=None, cluster=None)
    assert early.started_early((object(), started)) is started
    assert early.started_early(()) is None and early.started_early(None) is None  # run without main (CliRunner)
