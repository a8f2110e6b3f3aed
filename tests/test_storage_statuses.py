"""Whose fault, in the store: pass rates, blockers and regressions count only the compiler's and the
device's verdicts; opbyop's own gaps are listed apart; results written before the statuses were
split (schema version 1) are still read, and reclassified."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import store_samples as samples

from opbyop.records import Stage, Status
from opbyop_storage.aggregate import run_query
from opbyop_storage.dataset import Store
from opbyop_storage.files import data_files
from opbyop_storage.readonly import StoreConnection
from opbyop_storage.schema import VERSION_KEY

NOT_SIMULATED = "not simulated: ttnn.sort"


@pytest.fixture
def store(history_store: Store) -> Store:
    """The three sample nights plus n3: tanh passes again, but dot is not simulated (it passed in n2)."""
    outcomes = {**samples.NIGHT2, "tanh": (Status.SUCCESS, None, None),
                "dot": (Status.NOT_SIMULATED, Stage.DEVICE_RUN, NOT_SIMULATED)}
    n3 = samples.night("n3", 4, outcomes, zoo_night=2)
    history_store.write_run(n3.run, n3.ops, n3.results, n3.models)
    return history_store


@pytest.fixture
def con(store: Store):
    with StoreConnection(store.root) as c:
        yield c


def test_opbyops_gaps_are_neither_blockers_nor_regressions(con: StoreConnection) -> None:
    blockers = {r["op_name"] for r in run_query(con, "blockers", run_id="n3").records()}
    assert "stablehlo.dot_general" not in blockers and "stablehlo.reduce" in blockers
    regressions = {r["op_name"] for r in run_query(con, "regressions", run_id="n3", prev_run_id="n2").records()}
    assert "stablehlo.dot_general" not in regressions  # success -> not_simulated is opbyop's change
    progressions = {r["op_name"] for r in run_query(con, "progressions", run_id="n3", prev_run_id="n2").records()}
    assert progressions == {"stablehlo.tanh"}
    gaps = run_query(con, "opbyop_gaps", run_id="n3").records()
    assert [(g["op_name"], g["status"], g["fault"], g["occurrences"]) for g in gaps] == [
        ("stablehlo.dot_general", "not_simulated", "opbyop", 2)]


def test_pass_rates_count_only_verdicts(con: StoreConnection) -> None:
    rates = {r["op_name"]: r for r in run_query(con, "op_pass_rate", run_id="n3", n=2).records()}
    dot = rates["stablehlo.dot_general"]
    assert (dot["passes"], dot["model_runs"], dot["not_judged"], dot["pass_rate"]) == (1, 1, 1, 1.0)
    (n3,) = [r for r in run_query(con, "trend", run_id="n3", n=1).records()]
    assert n3["unique_not_judged"] == 1
    assert n3["golden_share"] == pytest.approx(n3["unique_golden"] / (n3["unique_ops"] - 1), abs=1e-4)
    models = {m["model"]: m for m in run_query(con, "run_models", run_id="n3").records()}
    assert models["mlp"]["ops_not_judged"] == 2 and models["mlp"]["ops_judged"] == 4


def test_every_result_row_carries_its_fault(con: StoreConnection) -> None:
    rows = con.query("SELECT r.status, r.fault, s.fault AS expected FROM results r "
                     "JOIN statuses s USING (status) WHERE run_id = 'n3'", {}).records()
    assert rows and all(r["fault"] == r["expected"] for r in rows)


def _downgrade_to_version_1(path) -> None:
    """Rewrite a results file as schema version 1 wrote it: no fault / narrowing / golden_method
    columns, and opbyop's gaps written as run_failed, its bugs as crashed."""
    table = pq.read_table(path)
    old = ["run_failed" if s == "not_simulated" else "crashed" if s == "analyzer_error" else s
           for s in table.column("status").to_pylist()]
    table = table.set_column(table.schema.get_field_index("status"), "status", pa.array(old, pa.string()))
    table = table.drop_columns(["fault", "narrowing", "golden_method"])
    pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}), VERSION_KEY: b"1"}), path)


def test_results_of_schema_version_1_are_read_and_reclassified(store: Store) -> None:
    for path in data_files(store.root, "results", "n3"):
        _downgrade_to_version_1(path)
    dot = next(r for r in store.results("n3") if r.op_name == "stablehlo.dot_general")
    assert dot.status is Status.NOT_SIMULATED and dot.message == NOT_SIMULATED
    with StoreConnection(store.root) as con:
        row = con.query("SELECT status, fault FROM results WHERE run_id = 'n3' AND op_name = "
                        "'stablehlo.dot_general'", {}).rows
        assert row == [("not_simulated", "opbyop")]
        older = con.query("SELECT count(*) FROM results WHERE run_id = 'n2' AND fault IS NOT NULL", {}).rows
        assert older[0][0] > 0  # version-2 files beside it keep their own column


def test_an_op_the_frontend_could_not_lower_is_a_judged_blocker_of_its_model(history_store: Store) -> None:
    outcomes = {**samples.NIGHT2, "dot": (Status.FRONTEND_FAILED, Stage.STABLEHLO,
                                          "failed to legalize operation 'torch.aten.histc'")}
    n3 = samples.night("n3", 4, outcomes, zoo_night=2)
    history_store.write_run(n3.run, n3.ops, n3.results, n3.models)
    with StoreConnection(history_store.root) as con:
        blockers = {r["op_name"]: r for r in run_query(con, "blockers", run_id="n3").records()}
        assert blockers["stablehlo.dot_general"]["status"] == "frontend_failed"
        assert not run_query(con, "opbyop_gaps", run_id="n3").records()
        models = {m["model"]: m for m in run_query(con, "run_models", run_id="n3").records()}
        assert models["mlp"]["ops_not_judged"] == 0
