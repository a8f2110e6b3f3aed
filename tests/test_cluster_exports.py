"""Exports on the run's Dask cluster: a model that must be exported is exported on a worker that offers
the export resource, a kept one is read in the run's own process without asking the cluster, and a
cluster that cannot take exports hands them back to the run, which says why and how to fix it."""

from __future__ import annotations

import os
from pathlib import Path

import dask
import pytest
from distributed import LocalCluster

from opbyop_flows.hosting.cluster import local_cluster
from opbyop_flows.hosting.cluster_exports import ClusterExports
from opbyop.config import load_zoo
from opbyop.run.models import HANDED_BACK, SplitOutcome, Splits

MODEL = "jax-mlp"  # a zoo model exported by a framework in a child (JAX: about a second)


@pytest.fixture
def machine_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine cache of the test's own, set before any cluster starts (its workers inherit it)."""
    monkeypatch.setenv("OPBYOP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def prepared(place: ClusterExports, spec: str = MODEL) -> SplitOutcome:
    """`spec` asked of a split thread of its own whose exports go to `place`."""
    splits = Splits()
    try:
        return next(splits.ask([spec], seed=0, zoo=load_zoo(), place=place).arriving(idle=lambda: None))
    finally:
        splits.close()
        place.close()


def never(what: str):  # noqa: ANN201
    def called() -> str:
        raise AssertionError(f"{what} was asked for the cluster's address")
    return called


def test_a_model_that_must_be_exported_is_exported_on_a_dask_worker_and_its_kept_export_read_here(machine_cache):
    with local_cluster(1) as cluster:
        first = prepared(ClusterExports(lambda: cluster.scheduler_address))
    assert first.error is None and first.split is not None and first.split.ops
    on_worker = [note for note in first.graph.notes if note.startswith("prepared on the Dask worker")]
    assert on_worker and f"(pid {os.getpid()})" not in on_worker[0]
    assert first.graph.reused is False

    # the next night: the export is kept and checked in the run's process; the cluster is not asked
    again = prepared(ClusterExports(never("a kept export")))
    assert again.error is None and again.graph.reused
    assert not [note for note in again.graph.notes if "Dask worker" in note]
    assert [op.signature for op in again.split.ops] == [op.signature for op in first.split.ops]


def test_a_cluster_whose_workers_offer_no_export_resource_hands_the_export_back_with_the_fix(machine_cache):
    with dask.config.set({"distributed.worker.daemon": False}), \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                         dashboard_address=None) as cluster:
        outcome = prepared(ClusterExports(lambda: cluster.scheduler_address))
    assert outcome.error is None and outcome.split.ops  # exported after all, in this process
    here = [note for note in outcome.graph.notes if note.startswith(HANDED_BACK)]
    assert here and "offers the `export` resource" in here[0] and "--resources export=1" in here[0]


def test_a_daemonic_worker_refuses_the_export_and_names_the_setting_that_lets_it(machine_cache):
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None, resources={"export": 1}) as cluster:  # Dask's default: daemonic
        outcome = prepared(ClusterExports(lambda: cluster.scheduler_address))
    assert outcome.error is None and outcome.split.ops
    here = [note for note in outcome.graph.notes if note.startswith(HANDED_BACK)]
    assert here and "daemonic" in here[0] and "DASK_DISTRIBUTED__WORKER__DAEMON=False" in here[0]


def test_a_cluster_that_does_not_answer_costs_the_run_nothing_but_the_exports_made_here(machine_cache):
    outcome = prepared(ClusterExports(lambda: "tcp://127.0.0.1:9", connect_timeout=2))  # nothing listens on the discard port
    assert outcome.error is None and outcome.split.ops
    assert [note for note in outcome.graph.notes if note.startswith(HANDED_BACK)]
