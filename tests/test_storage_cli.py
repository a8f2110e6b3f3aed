"""The store's commands, registered on a Typer app the way opbyop's CLI does it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from opbyop_storage.cli import register
from opbyop_storage.dataset import Store


@pytest.fixture
def cli():
    app = typer.Typer()

    @app.callback()
    def main() -> None:  # a group, as in opbyop's CLI
        pass

    register(app)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


def test_sql_formats_and_refusal(cli, history_store: Store) -> None:
    got = cli("sql", "SELECT run_id, chip FROM runs ORDER BY run_id", "--format", "json", "--store", history_store.root)
    assert got.exit_code == 0, got.output
    assert json.loads(got.stdout) == [{"run_id": "n0", "chip": "n150"}, {"run_id": "n1", "chip": "p150"},
                                      {"run_id": "n2", "chip": "p150"}]
    got = cli("sql", "SELECT run_id FROM runs ORDER BY run_id", "-f", "csv", "--store", history_store.root)
    assert got.stdout.splitlines() == ["run_id", "n0", "n1", "n2"]
    got = cli("sql", "SELECT run_id, status FROM runs", "--store", history_store.root)
    assert got.exit_code == 0 and "completed" in got.stdout and "3 row(s)" in got.stdout
    got = cli("sql", "ATTACH '/tmp/x.duckdb'", "--store", history_store.root)
    assert got.exit_code == 2 and "read-only" in got.output and "fix:" in got.output


def test_runs_query_and_skipped_warning(cli, history_store: Store) -> None:
    got = cli("runs", "--format", "json", "--store", history_store.root)
    runs = json.loads(got.stdout)
    assert [r["run_id"] for r in runs] == ["n2", "n1", "n0"] and runs[0]["unique_ops"] == 6
    got = cli("query", "regressions", "--run", "n2", "-f", "json", "--store", history_store.root)
    assert [r["op_name"] for r in json.loads(got.stdout)] == ["stablehlo.tanh"]
    bad = next((history_store.root / "ops").rglob("part-*.parquet"))
    bad.write_bytes(b"not parquet")
    got = cli("runs", "--store", history_store.root)
    assert got.exit_code == 0 and "1 unreadable file(s) skipped" in got.output and bad.name in got.output


def test_export_report_and_expectations(cli, history_store: Store, tmp_path: Path) -> None:
    out = tmp_path / "optest.json"
    got = cli("export", "optest", "--run", "n2", "--out", out, "--store", history_store.root)
    assert got.exit_code == 0, got.output
    assert len(json.loads(out.read_text())) == 7

    expectations = tmp_path / "expectations.yaml"
    got = cli("expectations", "update", "--run", "n1", "--file", expectations, "--store", history_store.root)
    assert got.exit_code == 0, got.output
    entries = yaml.safe_load(expectations.read_text())["expectations"]
    assert {e["depth"] for e in entries} == {"TTIR", "FLATBUFFER", "DEVICE_RUN"} and len(entries) == 4
    assert cli("expectations", "check", "--run", "n1", "--file", expectations,
               "--store", history_store.root).exit_code == 0
    got = cli("expectations", "check", "--run", "n2", "--file", expectations, "-f", "json", "--store", history_store.root)
    assert got.exit_code == 1
    assert sorted((r["kind"], r["op_name"]) for r in json.loads(got.stdout)) == [
        ("unexpected failure", "stablehlo.gather"), ("unexpected failure", "stablehlo.tanh"),
        ("unexpected pass", "stablehlo.dot_general")]

    html = tmp_path / "report.html"
    got = cli("report", "--run", "n2", "--out", html, "--expectations", expectations, "--store", history_store.root)
    assert got.exit_code == 0 and html.read_text().count("stablehlo.tanh") >= 1
    got = cli("report", "--run", "nope", "--out", html, "--store", history_store.root)
    assert got.exit_code == 2 and "not in the store" in got.output


def test_catalog_command(cli, history_store: Store, tmp_path: Path) -> None:
    got = cli("catalog", "--out", tmp_path / "c.duckdb", "--store", history_store.root)
    assert got.exit_code == 0 and (tmp_path / "c.duckdb").exists()
