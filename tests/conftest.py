"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["core_fixtures"]  # library, compiler, device and flow fixtures


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    """An empty store directory for one test."""
    return tmp_path / "store"


@pytest.fixture
def history_store(store_root: Path):
    """A store holding storage.samples.history(): nights n0 (n150), n1 and n2 (p150)."""
    from storage.dataset import Store
    from storage.samples import history

    store = Store(store_root)
    for night in history():
        store.write_run(night.run, night.ops, night.results, night.models)
    return store
