"""Exports kept by what they read: a later run reuses a model's export while every file it read and
every package it imported is unchanged, and exports again exactly the model whose inputs changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import opbyop
from opbyop.config import load_zoo
from opbyop.frontends.export_cache import AGAIN, ExportCache
from opbyop.ir.split_cache import SplitCache
from opbyop.pipeline import prepare_model

FACTORY = '''import numpy as np
import torch

import helpers
import fakepkg


def make(seed=0):
    torch.manual_seed(seed)
    scale = float(np.load(helpers.DATA)[0])
    return helpers.block(scale), [torch.ones(2, 4)]
'''

HELPERS = '''from pathlib import Path

import torch

DATA = Path(__file__).with_name("scale.npy")


def block(scale):
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
'''

OTHER = '''import torch


def make():
    return torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU()), [torch.ones(3, 4)]
'''


def _install_fake_package(site: Path, version: str) -> None:
    """A distribution `fakepkg` at `version`, as pip leaves one (a package and its dist-info)."""
    for old in site.glob("fakepkg-*.dist-info"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    (site / "fakepkg").mkdir(exist_ok=True)
    (site / "fakepkg" / "__init__.py").write_text("")
    info = site / f"fakepkg-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakepkg\nVersion: {version}\n")
    (info / "top_level.txt").write_text("fakepkg\n")


@pytest.fixture
def user_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two factories of a user's own: `models_a:make` imports a helper module and a package and reads
    a data file; `models_b:make` is alone."""
    import numpy as np

    code = tmp_path / "code"
    code.mkdir()
    (code / "models_a.py").write_text(FACTORY)
    (code / "helpers.py").write_text(HELPERS)
    (code / "models_b.py").write_text(OTHER)
    np.save(code / "scale.npy", np.array([1.0], np.float32))
    site = tmp_path / "site"
    site.mkdir()
    _install_fake_package(site, "1.0")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(code))
    return tmp_path


def _prepare(root: Path, spec: str, seed: int = 0, reuse: bool = True):
    graph, split, error = prepare_model(spec, load_zoo(), seed, exports=ExportCache(root / "exports", reuse),
                                        splits=SplitCache(root / "splits", reuse))
    assert error is None, error
    return graph, split


def _again(graph) -> list[str]:
    return [n for n in graph.notes if n.startswith(AGAIN)]


def test_a_users_factory_is_exported_once_and_reused_with_the_same_ops(user_models):
    first, split = _prepare(user_models, "models_a:make")
    second, kept = _prepare(user_models, "models_a:make")
    assert not first.reused and second.reused and not _again(second)
    assert [r.signature for r in kept.ops] == [r.signature for r in split.ops]
    (manifest,) = (user_models / "exports").glob("models_a.make-*.json")
    reads = json.loads(manifest.read_text())["reads"]
    read = {Path(p).name for p in reads["files"]}
    assert {"models_a.py", "helpers.py", "scale.npy"} <= read
    assert reads["packages"]["fakepkg"] == "1.0" and "torch" in reads["packages"]
    assert not any("__pycache__" in p for p in reads["files"])


@pytest.mark.parametrize("change, reason", [
    ("helper", "helpers.py changed"),
    ("data", "scale.npy changed"),
    ("package", "package fakepkg is 1.1"),
])
def test_a_change_to_what_a_factory_read_exports_that_model_again_and_only_it(user_models, change, reason):
    import numpy as np

    _prepare(user_models, "models_a:make")
    _prepare(user_models, "models_b:make")
    code = user_models / "code"
    if change == "helper":
        (code / "helpers.py").write_text(HELPERS + "\n\nEDITED = True  # a helper module edited\n")
    elif change == "data":
        np.save(code / "scale.npy", np.array([2.0], np.float32))
    else:
        _install_fake_package(user_models / "site", "1.1")
    again, _ = _prepare(user_models, "models_a:make")
    assert not again.reused and len(_again(again)) == 1 and reason in _again(again)[0]
    other, _ = _prepare(user_models, "models_b:make")
    assert other.reused  # nothing it read changed
    assert _prepare(user_models, "models_a:make")[0].reused  # kept again, as it is now


def test_another_seed_or_no_reuse_exports_again(user_models):
    _prepare(user_models, "models_b:make", seed=0)
    assert not _prepare(user_models, "models_b:make", seed=1)[0].reused
    assert not _prepare(user_models, "models_b:make", seed=0, reuse=False)[0].reused
    assert _prepare(user_models, "models_b:make", seed=0)[0].reused


def test_a_kept_export_that_cannot_be_read_is_exported_again_and_said_so(user_models):
    _prepare(user_models, "models_b:make")
    (kept,) = (user_models / "exports").glob("models_b.make-*.pickle")
    kept.write_bytes(b"not a pickle")
    graph, split = _prepare(user_models, "models_b:make")
    assert not graph.reused and split.ops
    assert "cannot be read" in _again(graph)[0] and kept.name in _again(graph)[0]
    assert _prepare(user_models, "models_b:make")[0].reused


def test_a_zoo_models_export_and_split_are_kept_too(tmp_path):
    first, split = _prepare(tmp_path, "jax-mlp")
    second, kept = _prepare(tmp_path, "jax-mlp")
    assert second.reused and any("split reused" in n for n in second.notes)
    assert [r.signature for r in kept.ops] == [r.signature for r in split.ops]


@pytest.mark.slow
def test_opbyop_split_keeps_an_export_and_reads_it_back(tmp_path):
    env = {**os.environ, "OPBYOP_HOME": str(tmp_path / "home"), "OPBYOP_CACHE_DIR": str(tmp_path / "cache")}

    def split() -> list[str]:
        done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "split", "jax-mlp", "--json"], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return [r["signature"] for r in json.loads(done.stdout)]

    exported = split()
    (kept,) = (tmp_path / "cache" / "exports").glob("jax-mlp-*.pickle")
    os.utime(kept, (0, 0))
    assert split() == exported
    assert kept.stat().st_mtime > 0  # read back (a read marks the entry recently used)


def test_a_split_is_kept_by_its_module_and_made_again_when_the_module_changes(tmp_path):
    from dataclasses import replace

    from opbyop.frontends.loader import load_stablehlo_file
    from opbyop.pipeline import split_graph

    data = Path(__file__).parent / "data"
    graph = load_stablehlo_file(data / "tanh_matmul_chain.mlir")
    cache = SplitCache(tmp_path / "splits")
    first, kept_first = cache.split(graph, split_graph)
    again, kept_again = cache.split(graph, split_graph)
    assert not kept_first and kept_again and [r.signature for r in again.ops] == [r.signature for r in first.ops]
    other = replace(graph, module_text=load_stablehlo_file(data / "cholesky.mlir").module_text)
    changed, kept_changed = cache.split(other, split_graph)
    assert not kept_changed and [r.signature for r in changed.ops] != [r.signature for r in first.ops]


def test_a_zoo_models_kept_export_has_the_same_key_from_any_working_directory(tmp_path):
    # an editable install is found by its import hook, not on sys.path: a key read from sys.path alone
    # changed with the working directory (the run's process and its Dask workers disagreed)
    script = ("from opbyop.config import load_zoo; from opbyop.frontends.export_cache import Request; "
              "print(Request(load_zoo().get('mlp'), 0, True).key)")
    keys = {subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, check=True
                           ).stdout for cwd in (tmp_path, Path(__file__).parents[1])}
    assert len(keys) == 1 and len(keys.pop().strip()) == 32


NEEDS_EXPORT = ("import sys; from pathlib import Path; import opbyop; from opbyop.config import load_zoo; "
                "from opbyop.frontends.export_cache import ExportCache; "
                "from opbyop.frontends.loader import needs_export; "
                "print(Path(opbyop.__file__).parent, needs_export('models_b:make', load_zoo(), 0, "
                "ExportCache(Path(sys.argv[1]))))")


def test_opbyops_own_sources_are_recorded_by_their_place_in_its_package(user_models):
    """Another checkout with the same files uses the export; a file of opbyop's that differs exports again."""
    _prepare(user_models, "models_b:make")
    (manifest,) = (user_models / "exports").glob("models_b.make-*.json")
    kept = json.loads(manifest.read_text())
    package = Path(opbyop.__file__).resolve().parent
    assert "opbyop:frontends/loader.py" in kept["reads"]["files"]
    assert not any(name.startswith(str(package)) for name in kept["reads"]["files"])
    checkout = user_models / "checkout"  # a copy of this opbyop, found first on the path
    shutil.copytree(package, checkout / "opbyop", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(package.parent / "configs", checkout / "configs")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), *sys.path])}
    found, needs = subprocess.run([sys.executable, "-c", NEEDS_EXPORT, str(user_models / "exports")], env=env,
                                  cwd=user_models, capture_output=True, text=True, check=True).stdout.split()
    assert Path(found) == checkout / "opbyop" and needs == "False"
    kept["reads"]["files"]["opbyop:frontends/loader.py"] = "0" * 64  # read from a loader other than this one
    manifest.write_text(json.dumps(kept))
    graph, _ = _prepare(user_models, "models_b:make")
    assert not graph.reused and "opbyop/frontends/loader.py changed" in _again(graph)[0]
