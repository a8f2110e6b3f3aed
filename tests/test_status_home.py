"""A status's facts live in its enum entry (records.Status): the CLI's style, the colours, the SQL
judged counts, the report's verdicts and the reclassification of older rows all derive from it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import duckdb
import pytest

from opbyop.cli.app import status_text
from opbyop.records import LEGACY_RECLASSIFICATION, Fault, Status, StatusFacts, legacy_status
from opbyop_storage.catalog import create_status_views, legacy_status_sql
from opbyop_storage.colours import status_colours
from opbyop_storage.exports.explorer import GRAPH_ID, Metric, node_data
from opbyop_storage.queries import SQL_DIR, get_query
from opbyop_storage.exports.report import TEMPLATE, status_data
from opbyop_storage.schema import schema_of

# Two statuses no file of opbyop knows: one the compiler's (a verdict), one opbyop's own gap (not).
NEW_VERDICT = ("EXAMPLE_VERDICT", "example_verdict", StatusFacts(Fault.COMPILER, "bold blue", "#123456",
                                                                 "a compiler failure added by a test"))
NEW_GAP = ("EXAMPLE_GAP", "example_gap", StatusFacts(Fault.OPBYOP, "italic cyan", "#654321",
                                                     "an opbyop gap added by a test"))


def _add_status(monkeypatch: pytest.MonkeyPatch, name: str, value: str, facts: StatusFacts) -> Status:
    """`Status` with one more member, made by the enum's own constructor as a new entry would be."""
    assert value not in Status._value2member_map_
    member = Status._new_member_(Status, value, facts)
    member._name_ = name
    member.__objclass__ = Status
    member._sort_order_ = len(Status._member_names_)
    monkeypatch.setattr(Status, "_member_names_", [*Status._member_names_, name])
    monkeypatch.setitem(Status._member_map_, name, member)
    monkeypatch.setitem(Status._value2member_map_, value, member)
    return member


@pytest.fixture
def added(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Status, Status]]:
    """The enum with NEW_VERDICT and NEW_GAP added, as they were before once the test ends."""
    yield _add_status(monkeypatch, *NEW_VERDICT), _add_status(monkeypatch, *NEW_GAP)


def _models(con: duckdb.DuckDBPyConnection, counts: dict[Status, int]) -> None:
    """A models table (the stored schema, plus the added statuses' columns) with one model of run r1."""
    empty = schema_of("models").empty_table()  # noqa: F841 (read by DuckDB's replacement scan)
    con.execute("CREATE TABLE models AS SELECT * FROM empty")
    present = {row[0] for row in con.execute("DESCRIBE models").fetchall()}
    for status in counts:
        if f"status_{status.value}" not in present:
            con.execute(f'ALTER TABLE models ADD COLUMN "status_{status.value}" BIGINT')
    columns = ", ".join(f'"status_{s.value}"' for s in counts)
    values = ", ".join(str(n) for n in counts.values())
    con.execute(f"INSERT INTO models (run_id, model, depth_golden, {columns}) VALUES ('r1', 'mlp', 1, {values})")
    con.execute("CREATE TABLE runs AS SELECT 'r1' AS run_id, TIMESTAMP '2026-01-01' AS started_at")


def test_a_new_status_needs_only_its_enum_entry(added: tuple[Status, Status]) -> None:
    verdict, gap = added
    assert Status("example_verdict") is verdict and list(Status)[-2:] == [verdict, gap]
    assert status_text(verdict).style == "bold blue" and status_text("example_gap").style == "italic cyan"
    assert status_colours()["example_verdict"] == "#123456" and status_colours()["example_gap"] == "#654321"
    thresholds = node_data([], Metric.STATUS)[GRAPH_ID]["thresholds"]
    assert thresholds[-2:] == [{"value": len(Status) - 2, "bgColor": "#123456"},
                               {"value": len(Status) - 1, "bgColor": "#654321"}]
    verdicts = status_data()["verdict_statuses"]
    assert "example_verdict" in verdicts and "example_gap" not in verdicts


def test_the_sql_judged_counts_add_up_a_new_statuss_column(added: tuple[Status, Status]) -> None:
    verdict, gap = added
    con = duckdb.connect()
    _models(con, {Status.SUCCESS: 1, Status.NOT_SIMULATED: 1, verdict: 3, gap: 2})
    create_status_views(con)
    (model,) = con.execute(get_query("run_models").sql, {"run_id": "r1"}).fetchall()
    columns = [d[0] for d in con.description]
    row = dict(zip(columns, model))
    assert (row["ops_judged"], row["ops_not_judged"], row["golden_share"]) == (4, 3, 0.25)
    (trend,) = con.execute(get_query("model_trend").sql, {"runs": ["r1"]}).fetchall()
    assert dict(zip([d[0] for d in con.description], trend))["ops_judged"] == 4
    rows = con.execute("SELECT status, fault, verdict, description FROM statuses "
                       "WHERE status LIKE 'example%'").fetchall()
    assert rows == [("example_verdict", "compiler", True, "a compiler failure added by a test"),
                    ("example_gap", "opbyop", False, "an opbyop gap added by a test")]


def test_no_sql_file_or_report_lists_statuses_by_hand() -> None:
    # success and skipped are named where they mean themselves; any other status is found through
    # the statuses or model_verdicts views
    named = {s.value for s in Status} - {Status.SUCCESS.value, Status.SKIPPED.value}
    for path in sorted(SQL_DIR.glob("*.sql")):
        code = re.sub(r"--[^\n]*", "", path.read_text())
        assert not re.findall(r"status_\w+", code), path.name
        assert not [v for v in named if f"'{v}'" in code], path.name
    page = Path(TEMPLATE).read_text()
    assert not [v for v in named if f'"{v}"' in page or f"'{v}'" in page]
    assert status_data()["verdict_statuses"] == [s.value for s in Status if s.is_verdict]


@pytest.mark.parametrize("status, message", [
    *[(written.value, opening + " ttnn.sort") for written, opening, _ in LEGACY_RECLASSIFICATION],
    ("run_failed", "the device said no"), ("crashed", None), ("success", "not simulated: as a message only"),
])
def test_older_rows_are_reclassified_by_one_rule_in_python_and_in_sql(status: str, message: str | None) -> None:
    con = duckdb.connect()
    (in_sql,) = con.execute(f"SELECT {legacy_status_sql()} FROM (SELECT $status AS status, $message AS message)",
                            {"status": status, "message": message}).fetchone()
    assert in_sql == legacy_status(status, message).value
