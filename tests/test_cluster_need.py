"""When the CLI starts a run's Dask cluster: at once when the run will want it soon (a model to export,
ops its store does not hold), else on the run's first need. Told from the kept exports and the store's
runs, with the real installed build and a real store (a real second `opbyop analyze` that starts no
cluster: tests/test_time_line.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from opbyop.compiler.builds import Compiler, prepare
from opbyop.compiler_spec import INSTALLED
from opbyop.config import AnalysisConfig
from opbyop.records import RunInfo, RunStatus
from opbyop.run.verdict_code import verdict_code
from opbyop_flows.cli import early
from opbyop_flows.cli.cluster_need import ClusterNeed, exported
from opbyop_flows.hosting.cluster_process import ClusterProcess
from opbyop_storage.dataset import Store

ROOT = Path(__file__).resolve().parents[1]
MODULE = str(ROOT / "tests" / "data" / "arith_constant.mlir")  # a StableHLO file: nothing to export


@pytest.fixture(scope="module")
def compiler() -> Compiler:
    return prepare(INSTALLED)


def asked(**options) -> AnalysisConfig:
    return AnalysisConfig(**{"models": [MODULE], "chip": "p150", **options})


def completed(asked: AnalysisConfig, build: Compiler, **changed) -> RunInfo:
    """A completed run of `asked` by `build` and this code, with `changed` fields."""
    run = RunInfo(run_id="earlier", models=asked.models, chip=asked.chip, compiler=build.identity,
                  options_key=asked.options_key(), verdict_code=verdict_code(), status=RunStatus.COMPLETED,
                  config=asked.model_dump(mode="json"))
    return run.model_copy(update=changed)


def test_a_run_its_store_already_holds_does_not_want_its_cluster_at_once(tmp_path, compiler):
    config = asked()
    Store(tmp_path / "store").write_run(completed(config, compiler), [], [], [])
    assert ClusterNeed(config, tmp_path / "store").why(compiler) is None


@pytest.mark.parametrize("changed", [
    {"status": RunStatus.FAILED},
    {"verdict_code": "made-by-other-code"},
    {"models": ["another.mlir"]},
    {"options_key": "other-options"},
    {"chip": "n150", "config": asked(chip="n150").model_dump(mode="json")},
    {"config": asked(whole_model=False).model_dump(mode="json")},
], ids=["failed", "other code", "other models", "other options", "other chip", "without whole models"])
def test_a_store_without_the_same_completed_run_wants_the_cluster_at_once(tmp_path, compiler, changed):
    config = asked()
    Store(tmp_path / "store").write_run(completed(config, compiler, **changed), [], [], [])
    assert "no completed run" in ClusterNeed(config, tmp_path / "store").why(compiler)


def test_a_run_by_another_build_wants_the_cluster_at_once(tmp_path, compiler):
    config = asked()
    other = compiler.identity.model_copy(update={"library_sha256": "0" * 64})
    Store(tmp_path / "store").write_run(completed(config, compiler, compiler=other), [], [], [])
    assert ClusterNeed(config, tmp_path / "store").why(compiler) is not None


def test_a_model_to_export_or_no_reuse_wants_the_cluster_at_once(tmp_path, compiler):
    config = asked()
    Store(tmp_path / "store").write_run(completed(config, compiler), [], [], [])
    factory = asked(models=[MODULE, "never_exported_here:model"])
    assert exported(factory.models, 0, True) == "never_exported_here:model is exported"
    assert "--no-reuse" in ClusterNeed(asked(reuse_cached=False), tmp_path / "store").why(compiler)


@pytest.mark.slow
def test_a_cluster_made_not_started_starts_on_its_first_wait_and_never_after_close(tmp_path):
    process = ClusterProcess(1, "p150", tmp_path / "logs", start=False)
    try:
        assert not process.started and process.exit_code() is None and process.pid is None
        assert not (tmp_path / "logs" / "dask-cluster.log").exists()
        assert process.wait().startswith("tcp://") and process.started and process.pid is not None
    finally:
        process.close()
    closed = ClusterProcess(1, "p150", tmp_path / "other", start=False)
    closed.close()
    closed.start()
    assert not closed.started


def test_the_early_start_finds_a_model_to_export_among_the_command_s_words(tmp_path, monkeypatch):
    monkeypatch.setenv("OPBYOP_CACHE_DIR", str(tmp_path / "cache"))  # nothing kept on this machine
    argv = ["analyze", MODULE, "--export-memory", "4", "--compiler", "jax-tt-plugin==0.1.2", "--no-whole"]
    options = early._analyze_options(argv)
    words = [word for word in argv[1:] if not word.startswith("-")]
    assert (options.whole, options.reuse) == (False, True)
    assert exported(words, 0, options.whole) is None  # a file and the options' values: nothing to export
    assert exported([*words, "mlp"], 0, options.whole) == "mlp is exported"  # a zoo model with no kept export
    assert exported(words, 0, options.whole, reuse=False) is not None
