"""Two runs of the same ops side by side (two compiler builds), and a group's history across builds."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

import store_samples as samples
from opbyop_storage.cli import register
from opbyop_storage.compare import compare_group, compare_runs
from opbyop_storage.dataset import Store
from opbyop_storage.readonly import StoreConnection


@pytest.fixture
def group_store(store_root) -> Store:
    store = Store(store_root)
    for run in samples.compiler_group("g"):
        store.write_run(run.run, run.ops, run.results, run.models)
    return store


def _by_op(rows: list[dict]) -> dict[str, str]:
    return {r["op_name"]: r["change"] for r in rows}


def test_two_compilers_runs_are_compared_op_by_op(group_store: Store) -> None:
    with StoreConnection(group_store.root) as con:
        step = compare_runs(con, "g-c2", "g-c1")
    changes = _by_op(step.rows)
    assert changes["stablehlo.dot_general"] == "progression"  # compile_failed at TTNN -> success
    assert changes["stablehlo.tanh"] == "regression"  # success -> golden_failed
    assert changes["stablehlo.reduce"] == "same"  # the same failure, its numbers aside (the message's pattern)
    assert changes["stablehlo.add"] == "same"
    assert changes["stablehlo.convolution"] == "message"  # run_failed -> timeout at the same depth
    assert step.only_run == 1 and step.only_previous == 1  # gather only under 0.1.2, sort only under 0.1.1
    assert "jax-tt-plugin 0.1.1" in step.previous_compiler and "jax-tt-plugin 0.1.2" in step.compiler
    assert step.counts["regression"] == 1 and step.counts["progression"] == 1
    assert "1 regressions, 1 progressions" in step.line()


def test_a_changed_message_under_the_same_status_is_its_own_kind_of_change(group_store: Store) -> None:
    with StoreConnection(group_store.root) as con:
        rows = compare_runs(con, "g-c1", "g-c1").rows
    assert {r["change"] for r in rows} <= {"same", "no_verdict"}  # a run against itself changes nothing


def test_a_group_names_the_first_compiler_under_which_an_op_starts_and_stops_failing(group_store: Store) -> None:
    with StoreConnection(group_store.root) as con:
        found = compare_group(con, "g")
    assert found.run_ids == ["g-c1", "g-c2", "g-c3"] and len(found.steps) == 2
    history = {h["op_name"]: h for h in found.history}
    assert history["stablehlo.tanh"]["starts_failing_under"] == "jax-tt-plugin==0.1.2"
    assert history["stablehlo.tanh"]["stops_failing_under"] == "jax-tt-plugin==0.1.3"
    assert history["stablehlo.dot_general"]["stops_failing_under"] == "jax-tt-plugin==0.1.2"
    assert history["stablehlo.dot_general"]["starts_failing_under"] == "jax-tt-plugin==0.1.3"
    assert history["stablehlo.add"]["starts_failing_under"] is None
    assert history["stablehlo.add"]["statuses"] == [f"jax-tt-plugin=={v}: success" for v in ("0.1.1", "0.1.2", "0.1.3")]


def test_opbyop_compare_prints_each_step_and_refuses_what_it_cannot_compare(group_store: Store) -> None:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        pass

    register(app)
    runner = CliRunner()

    def cli(*args: object):  # noqa: ANN202
        return runner.invoke(app, [str(a) for a in args])

    got = cli("compare", "g-c1", "g-c2", "--store", group_store.root)
    assert got.exit_code == 0, got.output
    assert "1 regressions, 1 progressions" in got.stdout and "regression (1)" in got.stdout
    got = cli("compare", "--group", "g", "--format", "json", "--store", group_store.root)
    data = json.loads(got.stdout)
    assert [s["regression"] for s in data["steps"]] == [1, 1] and len(data["history"]) == 7
    got = cli("compare", "--group", "g", "--store", group_store.root)
    assert "starts failing under" in got.stdout and "jax-tt-plugin==0.1.3" in got.stdout
    got = cli("query", "compiler_history", "--group", "g", "-f", "json", "--store", group_store.root)
    assert got.exit_code == 0 and len(json.loads(got.stdout)) == 7
    got = cli("query", "compare", "--run", "g-c2", "--previous", "g-c1", "-f", "json", "--store", group_store.root)
    assert sorted(r["change"] for r in json.loads(got.stdout)).count("regression") == 1
    got = cli("runs", "-f", "json", "--store", group_store.root)
    assert {(r["compiler"], r["group_id"]) for r in json.loads(got.stdout)} == \
        {(f"jax-tt-plugin=={v}", "g") for v in ("0.1.1", "0.1.2", "0.1.3")}
    got = cli("compare", "g-c1", "--store", group_store.root)
    assert got.exit_code == 2 and "fix:" in got.output
    got = cli("compare", "g-c1", "nope", "--store", group_store.root)
    assert got.exit_code == 2 and "nope" in got.output
    got = cli("compare", "--group", "nothing", "--store", group_store.root)
    assert got.exit_code == 2 and "no runs of group" in got.output
