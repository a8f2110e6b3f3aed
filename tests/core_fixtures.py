"""Fixtures for the library, compiler, device and flow tests (loaded from conftest.py).

The real compiler runs in OpWorker child processes; this test process itself only ever uses
XLA:CPU (JAX_PLATFORMS=cpu), as every process that uses JAX must decide before JAX starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from opbyop.jaxenv import prepare_jax

prepare_jax()
from opbyop_flows.hosting.settings import apply_defaults  # noqa: E402

apply_defaults()

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def p150():
    """The Blackhole p150 descriptor the plugin writes in mock mode (shipped, checked; cached per machine)."""
    from opbyop.compiler.system_desc import resolve

    return resolve("p150")


@pytest.fixture(scope="session")
def workspace_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("opbyop-home")


@pytest.fixture(scope="session")
def ttsim_ready(workspace_root):
    """ttsim set up for Blackhole, or the backend's own words on why not (a failure, never a skip)."""
    from opbyop.device.ttsim.install import TtsimUnavailable, locate

    try:
        return locate("blackhole", workspace_root)
    except TtsimUnavailable as e:
        pytest.fail(f"ttsim is not set up here: {e}")


@pytest.fixture(scope="session")
def workspace(workspace_root):
    from opbyop.workspace import Workspace

    return Workspace(workspace_root)


@pytest.fixture(scope="session")
def worker(p150, workspace_root):
    """One warm worker (compiler + XLA:CPU + device in a child process) for the whole session."""
    from opbyop.worker.process import OpWorker

    with OpWorker(p150.path, workspace_root, chip="p150", name="tests") as w:
        yield w


@pytest.fixture(scope="session")
def settings():
    from opbyop.config import load_thresholds
    from opbyop.config import AnalysisSettings

    return AnalysisSettings(thresholds=load_thresholds())


@pytest.fixture(scope="module")
def on_ttsim(settings):
    """The analysis settings with ttsim's device run beside the model's."""
    return settings.model_copy(update={"device": settings.device.model_copy(update={"backend": "ttsim"})})


@pytest.fixture(scope="session")
def compile_only(settings):
    return settings.model_copy(update={"run_device": False, "run_golden": False})


@pytest.fixture(scope="session")
def zoo():
    from opbyop.config import load_zoo

    return load_zoo()


@pytest.fixture(scope="session")
def mlp_graph():
    from opbyop.frontends.loader import load_model

    return load_model("mlp")


@pytest.fixture(scope="session")
def cnn_graph():
    from opbyop.frontends.loader import load_model

    return load_model("cnn")


@pytest.fixture(scope="session")
def mlp_ops(mlp_graph):
    from opbyop.ir.dedupe import dedupe
    from opbyop.ir.split import split_module

    return dedupe(split_module(mlp_graph.module_text, "mlp").ops)


def file_ops(name: str):
    """Unique ops of a StableHLO file in tests/data."""
    from opbyop.frontends.loader import load_stablehlo_file
    from opbyop.ir.dedupe import dedupe
    from opbyop.ir.split import split_module

    graph = load_stablehlo_file(DATA / name)
    return dedupe(split_module(graph.module_text, graph.name).ops)


@pytest.fixture
def clean_env(monkeypatch):
    """Tests that set fault-injection variables get them removed afterwards."""
    for key in ("OPBYOP_FAULT_INJECT", "OPBYOP_DASK_FAULT_INJECT"):
        monkeypatch.delenv(key, raising=False)
    return monkeypatch

