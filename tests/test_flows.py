"""The analyze flow under Prefect's test harness, on real Dask clusters, writing to a real store."""

from __future__ import annotations

import pytest
from distributed import Client, LocalCluster

from flows.analyze import RunSummary, analyze, new_run_id
from flows.nightly import nightly
from opbyop.config import AnalysisConfig, ClusterConfig, CompilerOptions
from opbyop.records import Status
from storage.dataset import Store


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def run(config: AnalysisConfig, run_id: str | None = None):
    state = analyze(config=config, run_id=run_id or new_run_id(), return_state=True)
    summary = state.result(raise_on_failure=False)
    assert isinstance(summary, RunSummary), state
    return state, summary


def config(*models: str, **changes) -> AnalysisConfig:
    base = AnalysisConfig(models=list(models), whole_model=False, cluster=ClusterConfig(workers=2))
    return base.model_copy(update=changes)


def test_analyze_fans_out_one_task_per_op_and_stores_every_result(harness, home):
    state, summary = run(config("mlp", whole_model=True))
    assert state.is_completed() and "71 success" in state.message
    store = Store(home / "store")
    results = store.results(summary.run_id)
    assert len(results) == summary.ops_unique == 71 and all(r.status is Status.SUCCESS for r in results)
    assert len({r.worker for r in results}) == 2  # both Dask workers did work
    assert summary.whole == {"mlp": "success"} and (home / "reports" / f"{summary.run_id}.html").exists()
    task_runs = _task_run_names(state.state_details.flow_run_id, at_least=71)
    assert sum(1 for name in task_runs if name.startswith(("dot_general-", "add-", "constant-"))) >= 10
    assert len([n for n in task_runs if not n.startswith(("split-", "stage-", "whole-", "publish-"))]) == 71
    assert {"run-summary", "regressions", "report"} <= _artifact_keys(state.state_details.flow_run_id)


def test_a_dask_worker_dying_fails_only_its_op(harness, home, clean_env, mlp_ops):
    from opbyop.ir.dedupe import dedupe
    from opbyop.ir.split import split_module
    from opbyop.frontends.loader import load_model

    ops = dedupe(split_module(load_model("jax-mlp").module_text, "jax-mlp").ops)
    victim = next(op for op in ops if op.op_name == "stablehlo.tanh")
    clean_env.setenv("OPBYOP_DASK_FAULT_INJECT", f"exit:{victim.signature[:16]}")
    state, summary = run(config("jax-mlp", reuse_cached=False))
    results = {r.signature: r for r in Store(home / "store").results(summary.run_id)}
    assert results[victim.signature].status is Status.CRASHED
    assert "Dask worker" in results[victim.signature].message
    assert sum(r.status is Status.SUCCESS for r in results.values()) == len(ops) - 1
    assert state.is_completed() and "1 crashed" in state.message  # never a silent success


def test_an_existing_cluster_is_used_by_address_and_left_running(harness, home):
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        state, summary = run(config("jax-mlp", cluster=ClusterConfig(address=cluster.scheduler_address)))
        assert state.is_completed() and summary.statuses == {"success": summary.ops_unique}
        with Client(cluster.scheduler_address) as client:
            assert len(client.scheduler_info()["workers"]) == 1  # still up: the flow did not close it


def test_results_are_reused_only_for_the_same_compiler_chip_and_options(harness, home):
    _, first = run(config("jax-mlp", "cnn"))  # two exporters in one run: split one after another
    assert not first.model_errors and first.models == ["jax-mlp", "cnn"]
    _, second = run(config("jax-mlp", "cnn"))
    assert second.reused == second.ops_unique > 0
    assert {r.reused_from for r in Store(home / "store").results(second.run_id)} == {first.run_id}
    _, lofi = run(config("jax-mlp", compiler=CompilerOptions(math_fidelity="lofi")))
    assert lofi.reused == 0


def test_a_run_interrupted_halfway_is_completed_by_the_next_run_of_its_id(harness, home):
    _, full = run(config("jax-mlp"))
    store = Store(home / "store")
    done = store.results(full.run_id)[:3]
    run_id = new_run_id()
    with store.writer() as writer:  # what an interrupted run leaves behind: a started run, 3 results
        from opbyop.records import RunInfo

        writer.start(RunInfo(run_id=run_id, models=["jax-mlp"]))
        writer.add_results([r.model_copy(update={"reused_from": None}) for r in done])
    _, resumed = run(config("jax-mlp", reuse_cached=False), run_id=run_id)
    results = store.results(run_id)
    assert len(results) == len({r.signature for r in results}) == resumed.ops_unique  # no duplicates
    kept = {r.signature: r.started_at for r in results}
    assert all(kept[r.signature] == r.started_at for r in done)  # the finished ones were not redone


def test_the_run_form_is_built_from_the_pydantic_parameters():
    from prefect.utilities.callables import parameter_schema

    schema = parameter_schema(analyze).model_dump()
    config_schema = schema["definitions"]["AnalysisConfig"]["properties"]
    assert {"models", "chip", "compiler", "thresholds", "seed", "reuse_cached", "cluster"} <= set(config_schema)
    assert config_schema["chip"]["default"] == "p150" and "descriptor" in config_schema["chip"]["description"]
    fidelity = schema["definitions"]["CompilerOptions"]["properties"]["math_fidelity"]
    assert "lofi" in str(fidelity)
    assert "cluster" in parameter_schema(nightly).model_dump()["properties"]


def _task_run_names(flow_run_id, at_least: int) -> list[str]:
    """The flow run's task runs (the server records them from events, a little after the fact)."""
    import time

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    deadline = time.monotonic() + 120
    with get_client(sync_client=True) as client:
        while True:
            runs, page = [], None
            while page is None or len(page) == 200:  # the API serves at most 200 per request
                page = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
                                             limit=200, offset=len(runs))
                runs += page
            if len(runs) >= at_least or time.monotonic() > deadline:
                return [r.name for r in runs]
            time.sleep(2)


def _artifact_keys(flow_run_id) -> set[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    return {a.key for a in artifacts if a.key}
