"""The zoo's exports kept in the machine cache: every command that loads a model reads them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from opbyop.config import load_zoo
from opbyop.frontends.graph_cache import cache_path
from opbyop.pipeline import prepare_model


def test_a_zoo_models_export_is_cached_and_splits_into_the_same_ops(monkeypatch, tmp_path):
    monkeypatch.setenv("OPBYOP_CACHE_DIR", str(tmp_path))
    zoo = load_zoo()
    (exported, split, _), (cached, cached_split, _) = prepare_model("jax-mlp", zoo, 0), prepare_model("jax-mlp", zoo, 0)
    assert not any("cache" in n for n in exported.notes) and "read from the cache" in cached.notes[-1]
    assert [r.signature for r in cached_split.ops] == [r.signature for r in split.ops]
    assert all(np.array_equal(a, b) for a, b in zip(cached.argument_values, exported.argument_values))
    assert cache_path("jax-mlp", zoo, 1) != cache_path("jax-mlp", zoo, 0)  # other inputs, another entry
    assert cache_path(str(tmp_path / "model.mlir"), zoo, 0) is None  # files and users' factories: never cached


def test_a_corrupt_cache_entry_is_exported_again_and_replaced(monkeypatch, tmp_path):
    monkeypatch.setenv("OPBYOP_CACHE_DIR", str(tmp_path))
    zoo = load_zoo()
    path = cache_path("jax-mlp", zoo, 0)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a pickle")
    graph, split, error = prepare_model("jax-mlp", zoo, 0)
    assert error is None and split.ops and not any("cache" in n for n in graph.notes)
    assert "read from the cache" in prepare_model("jax-mlp", zoo, 0)[0].notes[-1]


@pytest.mark.slow
def test_opbyop_split_keeps_a_zoo_models_export_and_reads_it_back(tmp_path):
    env = {**os.environ, "OPBYOP_HOME": str(tmp_path / "home"), "OPBYOP_CACHE_DIR": str(tmp_path / "cache")}

    def split() -> list[str]:
        done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "split", "jax-mlp", "--json"], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return [r["signature"] for r in json.loads(done.stdout)]

    exported = split()
    (kept,) = (tmp_path / "cache" / "graphs").glob("jax-mlp-*.pickle")
    os.utime(kept, (0, 0))
    assert split() == exported
    assert kept.stat().st_mtime > 0  # read back (a read marks the entry recently used)
