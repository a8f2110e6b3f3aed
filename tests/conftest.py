"""Shared fixtures."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

pytest_plugins = ["core_fixtures", "object_store"]  # library, compiler, device and flow fixtures; S3 (moto)


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C tests send SIGINT to the commands they start. A shell starts a background job (`make
    test &`, nohup) with SIGINT ignored, the commands would inherit that and never see the Ctrl-C:
    a handler here is reset to the default in every child instead."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    """An empty store directory for one test."""
    return tmp_path / "store"


@pytest.fixture
def history_store(store_root: Path):
    """A store holding store_samples.history(): nights n0 (n150), n1 and n2 (p150)."""
    from store_samples import history

    from opbyop_storage.dataset import Store

    store = Store(store_root)
    for night in history():
        store.write_run(night.run, night.ops, night.results, night.models)
    return store


@pytest.fixture(scope="module")
def harness():
    """Prefect's test server, one per test file that runs flows (started once for its tests)."""
    from prefect.testing.utilities import prefect_test_harness  # prefect: imported by the files that run flows

    with prefect_test_harness(server_startup_timeout=120):
        yield
