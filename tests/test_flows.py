"""The analyze and nightly flows under Prefect's test harness, on real Dask clusters, writing to a real store."""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

import pytest
from distributed import Client, LocalCluster

from opbyop_flows.analyze import RunFailed, RunSummary, analyze, new_run_id
from opbyop_flows.engine.phases import time_line
from opbyop_flows.nightly import nightly
from opbyop.config import AnalysisConfig, ClusterConfig, CompilerOptions
from opbyop.records import Status
from opbyop_storage.dataset import Store


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def run(config: AnalysisConfig, run_id: str | None = None):
    state = analyze(config=config, run_id=run_id or new_run_id(), return_state=True)
    data = state.result(raise_on_failure=False)
    summary = data.summary if isinstance(data, RunFailed) else data
    assert isinstance(summary, RunSummary), state
    return state, summary


def config(*models: str, **changes) -> AnalysisConfig:
    base = AnalysisConfig(models=list(models), whole_model=False, cluster=ClusterConfig(workers=2))
    return base.model_copy(update=changes)


@pytest.mark.slow
def test_analyze_fans_out_one_task_per_op_and_stores_every_result(harness, home):
    state, summary = run(config("mlp", whole_model=True))
    store = Store(home / "store")
    results = store.results(summary.run_id)
    assert state.is_completed() and f"{len(results)} success" in state.message
    assert len(results) == summary.ops_unique > 60 and all(r.status is Status.SUCCESS for r in results)
    assert len({r.worker for r in results}) == 2  # both Dask workers did work
    assert summary.whole == {"mlp": "success"} and (home / "reports" / f"{summary.run_id}.html").exists()
    # where the time went: every phase of the run, in the run record too
    assert {"descriptor", "export", "export mlp (beside)", "split", "cluster", "warm-up", "fan-out",
            "whole model (beside)", "ops (beside)", "store", "report", "total"} <= set(summary.phases)
    assert all(seconds >= 0 for seconds in summary.phases.values())
    assert summary.phases["total"] >= summary.phases["fan-out"] > 0
    steps = time_line(summary.phases)  # every second on one step: the steps add up to the total
    assert abs(sum(steps.values()) - summary.phases["total"]) < 0.05 and steps["other"] < 1.0, summary.phases
    assert store.run(summary.run_id).phases == summary.phases and store.run(summary.run_id).status == "completed"
    html = (home / "reports" / f"{summary.run_id}.html").read_text()
    assert 'id="phases-chart"' in html and '"fan-out":' in html  # the report shows them
    op_task_runs = _op_task_run_names(state.state_details.flow_run_id, at_least=len(results))
    assert sum(1 for name in op_task_runs if name.startswith(("dot_general-", "add-", "constant-"))) >= 10
    assert len(op_task_runs) == len(results)
    artifacts = _artifacts(state.state_details.flow_run_id)
    assert {"run-summary", "regressions", "report"} <= set(artifacts)
    report = artifacts["report"]  # what the HTML report shows first, readable in the UI (no file:// link)
    assert "file://" not in report and "| mlp | GOLDEN |" in report and "fan-out" in report
    # the ops with the most simulated device time, as a table; the model's graph kept for Model Explorer
    assert "device-time" in artifacts and "MatmulDeviceOperation" in artifacts["device-time"]
    assert 'id="device-time-table"' in html and '"device_time":[{' in html
    assert all(m.summary.module_artifact for m in store.models(summary.run_id))


@pytest.mark.slow
def test_a_dask_worker_dying_fails_only_its_op(harness, home, clean_env):
    from opbyop.frontends.loader import load_model
    from opbyop.ir.dedupe import dedupe
    from opbyop.ir.split import split_module

    ops = dedupe(split_module(load_model("jax-mlp").module_text, "jax-mlp").ops)
    victim = next(op for op in ops if op.op_name == "stablehlo.tanh")
    clean_env.setenv("OPBYOP_DASK_FAULT_INJECT", f"exit:{victim.signature[:16]}")
    state, summary = run(config("jax-mlp", reuse_cached=False))
    results = {r.signature: r for r in Store(home / "store").results(summary.run_id)}
    assert results[victim.signature].status is Status.CRASHED
    assert "ran alone" in results[victim.signature].message  # it killed a worker twice, the second time alone
    others = [r for s, r in results.items() if s != victim.signature]
    assert len(others) == len(ops) - 1 and all(r.status is Status.SUCCESS for r in others)
    assert state.is_completed() and "1 crashed" in state.message  # never a silent success


@pytest.mark.slow
def test_an_existing_cluster_is_used_by_address_gets_the_settings_and_is_left_running(harness, home):
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        with Client(cluster.scheduler_address) as client:  # the scheduler's own defaults
            assert client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.allowed_failures) != 0
        state, summary = run(config("jax-mlp", cluster=ClusterConfig(address=cluster.scheduler_address)))
        assert state.is_completed() and summary.statuses == {"success": summary.ops_unique}
        with Client(cluster.scheduler_address) as client:
            assert len(client.scheduler_info()["workers"]) == 1  # still up: the flow did not close it
            settings = client.run_on_scheduler(
                lambda dask_scheduler: (dask_scheduler.allowed_failures, dask_scheduler.WORKER_SATURATION))
            assert settings == (0, 1.0)  # applied on the scheduler itself, where they are read


@pytest.mark.slow
def test_results_are_reused_only_for_the_same_compiler_chip_and_options(harness, home):
    _, first = run(config("jax-mlp", "cnn"))  # two exporters in one run: split one after another
    assert not first.model_errors and first.models == ["jax-mlp", "cnn"]
    _, second = run(config("jax-mlp", "cnn"))
    assert second.reused == second.ops_unique > 0
    assert "fan-out" not in second.phases and "cluster" not in second.phases  # nothing to analyse: no cluster
    assert {r.reused_from for r in Store(home / "store").results(second.run_id)} == {first.run_id}
    _, lofi = run(config("jax-mlp", compiler=CompilerOptions(math_fidelity="lofi")))
    assert lofi.reused == 0


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_run_without_a_run_id_gets_one_from_its_flow_run(harness, home):
    state = analyze(config=config("jax-mlp"), return_state=True)
    summary = state.result()
    assert summary.run_id.endswith(state.state_details.flow_run_id.hex[:6])  # a retry of it finds the same run
    assert Store(home / "store").run(summary.run_id).status == "completed"


@pytest.mark.slow
def test_a_run_whose_models_all_fail_to_split_is_stored_as_failed_without_a_cluster(harness, home, tmp_path):
    bad = tmp_path / "broken.mlir"
    bad.write_text("func.func @main( this is not MLIR\n")
    unreachable = ClusterConfig(address="tcp://127.0.0.1:9")  # a cluster would be refused: none is asked for
    state, summary = run(config(str(bad), cluster=unreachable))
    assert state.is_failed() and summary.error == "no model could be split"
    assert summary.model_errors and "cluster" not in summary.phases
    with pytest.raises(RunFailed):  # a proper exception where Prefect raises the state's data
        state.result()
    run_info = Store(home / "store").run(summary.run_id)
    assert run_info.status == "failed" and Store(home / "store").results(summary.run_id) == []


@pytest.mark.slow
def test_a_descriptor_no_worker_can_start_with_stops_the_run_before_the_fan_out(harness, home):
    from opbyop.compiler.system_desc import resolve

    # a corrupt copy of the descriptor where the Dask workers keep theirs (a broken cache, a bad disk)
    data = resolve("p150").path.read_bytes()
    cached = home / "system_descs" / f"{hashlib.sha256(data).hexdigest()[:16]}.ttsys"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"not a system descriptor" * 64)
    state, summary = run(config("jax-mlp", reuse_cached=False))
    assert state.is_failed() and "no op worker could start" in summary.error and "p150" in summary.error
    assert "fix:" in summary.error and "fan-out" not in summary.phases
    store = Store(home / "store")
    assert store.run(summary.run_id).status == "failed" and store.results(summary.run_id) == []


@pytest.mark.slow
def test_the_nightly_compares_each_model_with_its_own_previous_night(harness, home, tmp_path):
    nightly_file = tmp_path / "nightly.yaml"
    nightly_file.write_text("models: [jax-mlp]\ntargets: [{chip: p150}]\nwhole_model: false\n")
    first = nightly(config_file=str(nightly_file), cluster=ClusterConfig(workers=1), return_state=True)
    assert first.is_completed(), first.message
    second = nightly(config_file=str(nightly_file), models=["jax-mlp", "cnn"], cluster=ClusterConfig(workers=1),
                     return_state=True)
    assert second.is_completed(), second.message
    summary = _artifacts(second.state_details.flow_run_id)["nightly-summary"]
    first_run = f"{_run_id_of(first)}-t0"
    # jax-mlp against the first night (nothing new or removed), cnn's first night (no baseline)
    assert f"### jax-mlp (against run `{first_run}`)" in summary and "### cnn (first comparable run" in summary
    jax_mlp = summary.split("### jax-mlp")[1].split("###")[0]
    assert "New ops (0)" in jax_mlp and "Removed ops (0)" in jax_mlp and "Regressions (0)" in jax_mlp
    assert "Unexpected failures" in jax_mlp and "| GOLDEN |" in jax_mlp


@pytest.mark.slow
def test_the_nightly_runs_the_corpus_target_and_reports_its_coverage(harness, home, tmp_path):
    (tmp_path / "corpus.yaml").write_text("chips: [p150]\nops: [add, exponential]\ndtypes: [f32]\nforms: [args]\n")
    nightly_file = tmp_path / "nightly.yaml"
    nightly_file.write_text(f"models: [jax-mlp]\ntargets: [{{chip: p150}}]\nwhole_model: false\n"
                            f"corpus: {{config: {tmp_path / 'corpus.yaml'}}}\n")
    state = nightly(config_file=str(nightly_file), cluster=ClusterConfig(workers=1), return_state=True)
    assert state.is_completed(), state.message
    summary = _artifacts(state.state_details.flow_run_id)["nightly-summary"]
    coverage = summary.split("## Single-op corpus")[1]
    assert "### p150:" in coverage and "not simulated:" not in coverage.split("\n")[2]
    assert re.search(r"\| f32 \| \d+ \| \d+ \| 100\.0% \|", coverage)  # add and exp in f32 pass on the device
    # through the same fan-out as a model: its own run in the store, the cases as the ops of `corpus`
    corpus_run = f"{_run_id_of(state)}-corpus-0"
    store = Store(home / "store")
    assert store.run(corpus_run).status == "completed" and {m.summary.model for m in store.models(corpus_run)} == {"corpus"}
    assert len(store.ops(corpus_run, "corpus")) == 8  # add and exponential, f32, four shapes, argument-fed
    assert sorted(r.status.value for r in store.results(corpus_run)) == ["success"] * 8


F64_SCALE = str(Path(__file__).resolve().parent / "data" / "f64_scale.mlir")  # 0.1.2 refuses it, 0.1.3 compiles it


@pytest.mark.slow
def test_analyze_under_two_compiler_builds_runs_each_and_compares_them_op_by_op(harness, home):
    state, last = run(config(F64_SCALE, compilers=["jax-tt-plugin==0.1.2", "installed"]), run_id="two-builds")
    assert state.is_completed(), state.message
    store = Store(home / "store")
    (earlier,) = last.group
    assert (earlier.run_id, last.run_id) == ("two-builds-c1", "two-builds-c2")
    assert set(earlier.statuses) == {"compile_failed"} and set(last.statuses) == {"success"}
    assert "jax-tt-plugin 0.1.2" in earlier.compiler and "0.1.3" in last.compiler
    (step,) = last.comparisons
    assert step["progression"] == last.ops_unique and step["regression"] == 0
    runs = {r: store.run(r) for r in ("two-builds-c1", "two-builds-c2")}
    assert {r.group_id for r in runs.values()} == {"two-builds"}
    assert runs["two-builds-c1"].compiler.version == "0.1.2" and runs["two-builds-c2"].compiler.spec == "installed"
    assert {r.compiler for r in store.results("two-builds-c1")} == {runs["two-builds-c1"].compiler.key}
    artifacts = _artifacts(state.state_details.flow_run_id)
    assert "compiler-comparison" in artifacts and "progression" in artifacts["compiler-comparison"]
    html = (home / "reports" / "two-builds-c2.html").read_text()
    assert 'id="compilers-section"' in html and "starts_failing_under" in html


@pytest.mark.slow
def test_a_build_that_cannot_be_prepared_is_said_and_the_other_builds_still_run(harness, home, tmp_path):
    bogus = tmp_path / "libtt.so"
    bogus.write_text("not a library")
    state, last = run(config(F64_SCALE, compilers=[str(bogus), "installed"]), run_id="one-refused")
    assert state.is_failed() and "is not a PJRT plugin library" in state.message and str(bogus) in state.message
    assert last.run_id == "one-refused-c2" and not last.group and set(last.statuses) == {"success"}
    assert not Store(home / "store").has_run("one-refused-c1")


@pytest.mark.slow
def test_a_nightly_target_follows_a_build_and_is_compared_with_another_the_same_night(harness, home, tmp_path):
    nightly_file = tmp_path / "nightly.yaml"
    nightly_file.write_text(f"models: ['{F64_SCALE}']\nwhole_model: false\n"
                            "targets: [{chip: p150, compiler_build: installed, compare_with: [jax-tt-plugin==0.1.2]}]\n")
    state = nightly(config_file=str(nightly_file), cluster=ClusterConfig(workers=1), return_state=True)
    assert state.is_completed(), state.message
    summary = _artifacts(state.state_details.flow_run_id)["nightly-summary"]
    assert "compiled by" not in summary.split("\n")[1] and "against jax-tt-plugin==0.1.2" in summary
    assert "Compilers: jax-tt-plugin 0.1.2" in summary and "progressions" in summary
    base = f"{_run_id_of(state)}-t0"
    store = Store(home / "store")
    # the target's own build is the last of its group: the run its night-over-night comparison reads
    assert store.run(f"{base}-c2").compiler.spec == "installed" and store.run(f"{base}-c1").compiler.version == "0.1.2"


def test_the_run_form_is_built_from_the_pydantic_parameters():
    from prefect.utilities.callables import parameter_schema

    schema = parameter_schema(analyze).model_dump()
    config_schema = schema["definitions"]["AnalysisConfig"]["properties"]
    assert {"models", "chip", "compiler", "compilers", "thresholds", "seed", "reuse_cached", "cluster"} <= set(config_schema)
    assert config_schema["compilers"]["default"] == ["installed"] and "newest" in config_schema["compilers"]["description"]
    assert config_schema["chip"]["default"] == "p150" and "descriptor" in config_schema["chip"]["description"]
    fidelity = schema["definitions"]["CompilerOptions"]["properties"]["math_fidelity"]
    assert "lofi" in str(fidelity)
    assert {"cluster", "models", "config_file", "expectations_file"} <= set(parameter_schema(nightly).model_dump()["properties"])


def _run_id_of(state) -> str:
    from prefect.client.orchestration import get_client

    from opbyop_flows.engine.run_ids import run_id_for

    with get_client(sync_client=True) as client:
        return run_id_for(client.read_flow_run(state.state_details.flow_run_id))


_RUN_LEVEL_TASKS = ("split-", "stage-", "whole-", "publish-")


def _op_task_run_names(flow_run_id, at_least: int) -> list[str]:
    """The names of the flow run's per-op task runs, once at least `at_least` of them are recorded
    (the server records them from events, a little after the fact, in no particular order)."""
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
            names = [r.name for r in runs if not r.name.startswith(_RUN_LEVEL_TASKS)]
            if len(names) >= at_least or time.monotonic() > deadline:
                return names
            time.sleep(2)


def _artifacts(flow_run_id) -> dict[str, str]:
    """key -> data of the flow run's artifacts (a table's data is its JSON)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    return {a.key: str(a.data) for a in artifacts if a.key}


SPLIT_AHEAD = """
import sys
import psutil
from opbyop_flows.hosting.handoff import Handoff

handoff = Handoff()
(model,) = handoff.splits.ask([sys.argv[1]], 0).arriving(idle=lambda: None)
assert model.error is None
print(any("forkserver" in " ".join(c.cmdline()) for c in psutil.Process().children()))
"""


@pytest.mark.slow
def test_the_split_ahead_starts_the_export_forkserver_only_when_a_model_must_be_exported(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "OPBYOP_CACHE_DIR": str(tmp_path)}

    def forkserver_started(spec: str) -> bool:
        done = subprocess.run([sys.executable, "-c", SPLIT_AHEAD, spec], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip() == "True"

    assert forkserver_started("mlp")  # the export is made there, warmed up while the caller starts
    assert not forkserver_started("mlp")  # read from the export cache: torch is neither imported nor warmed
    assert not forkserver_started(str(Path(__file__).parent / "data" / "cholesky.mlir"))  # a file: no framework


def test_a_flow_runs_process_counts_as_gone_when_its_pid_is_dead_or_reused():
    import socket
    import subprocess
    import sys

    from opbyop_flows.hosting.crashed import HOST, PID, PID_START, process_gone, process_labels

    assert not process_gone(process_labels())  # this very process
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    assert process_gone({HOST: socket.gethostname(), PID: str(ended.pid), PID_START: "0"})
    assert process_gone({**process_labels(), PID_START: "1.00"})  # the pid now names another process
    assert not process_gone({**process_labels(), HOST: "another-machine"})  # not this host's to judge
    assert not process_gone({})  # a run that did not label itself


NIGHT_MODELS = '''import torch


def tiny():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2)), [torch.ones(2, 4)]
'''


@pytest.mark.slow
def test_a_second_night_pays_only_for_what_changed(harness, home, tmp_path, monkeypatch):
    monkeypatch.setenv("OPBYOP_CACHE_DIR", str(tmp_path / "cache"))
    code = tmp_path / "code"
    code.mkdir()
    (code / "night_models.py").write_text(NIGHT_MODELS)
    monkeypatch.syspath_prepend(str(code))
    nightly_config = config("jax-mlp", "night_models:tiny", whole_model=True)
    store = Store(home / "store")

    def models(summary: RunSummary) -> dict:
        return {m.summary.model: m.summary for m in store.models(summary.run_id)}

    _, first = run(nightly_config)
    assert all(not m.export_reused and m.whole.status is Status.SUCCESS for m in models(first).values())
    _, second = run(nightly_config)  # nothing changed: no export, no split, no op, no whole model
    assert second.reused == second.ops_unique > 0 and "cluster" not in second.phases
    assert all(m.export_reused and m.whole.reused_from == first.run_id and m.whole.status is Status.SUCCESS
               for m in models(second).values())
    (code / "night_models.py").write_text(NIGHT_MODELS.replace("GELU", "Tanh"))  # one model's source edited
    _, third = run(nightly_config)
    kept = models(third)
    assert kept["jax-mlp"].export_reused and kept["jax-mlp"].whole.reused_from == first.run_id
    assert not kept["night_models.tiny"].export_reused and kept["night_models.tiny"].whole.reused_from is None
    assert 0 < third.ops_unique - third.reused < third.ops_unique  # only the edited model's new ops analysed
