"""The Prefect server's database template: made once from a freshly migrated database, copied into a
new Prefect home, never over a database that exists, never carrying what a run wrote."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from opbyop_flows.hosting.prefect_db import DatabaseTemplate
from opbyop_flows.hosting.server import PrefectApi

ROOT = Path(__file__).resolve().parents[1]


def _database(path: Path, **rows: int) -> Path:
    with closing(sqlite3.connect(path)) as db:
        for table, count in rows.items():
            db.execute(f"CREATE TABLE {table} (id INTEGER)")
            db.executemany(f"INSERT INTO {table} VALUES (?)", [(i,) for i in range(count)])
        db.commit()
    return path


def _rows(path: Path) -> dict[str, int]:
    with closing(sqlite3.connect(path)) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}


def test_the_template_keeps_the_schema_version_and_block_types_and_drops_what_a_run_wrote(tmp_path):
    served = _database(tmp_path / "prefect.db", alembic_version=1, block_type=54, flow_run=3, events=7)
    template = DatabaseTemplate(tmp_path / "cache")
    template.keep(served)
    assert _rows(template.database) == {"alembic_version": 1, "block_type": 54, "flow_run": 0, "events": 0}
    assert _rows(served)["flow_run"] == 3  # the served database itself is untouched


def test_a_new_home_starts_from_the_template_and_an_existing_database_is_left_alone(tmp_path):
    template = DatabaseTemplate(tmp_path / "cache")
    fresh = tmp_path / "fresh" / "prefect.db"
    assert not template.seed(fresh) and not fresh.exists()  # no template yet: the server migrates
    template.keep(_database(tmp_path / "served.db", alembic_version=1, block_type=2))
    assert template.seed(fresh) and _rows(fresh) == {"alembic_version": 1, "block_type": 2}
    used = _database(tmp_path / "used.db", alembic_version=1, flow_run=5)
    assert not template.seed(used) and _rows(used)["flow_run"] == 5


@pytest.mark.slow
def test_a_server_in_a_fresh_home_answers_on_a_copy_of_the_first_one_s_migrated_database(tmp_path, monkeypatch):
    """Two servers, each in a Prefect home of its own: the first migrates and leaves the template, the
    second starts from it (no migrations to run, no block types to register)."""
    for key in [k for k in os.environ if k.startswith("PREFECT_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("OPBYOP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    for home in ("first", "second"):
        monkeypatch.setenv("PREFECT_HOME", str(tmp_path / home))
        api = PrefectApi(tmp_path / home / "logs")
        try:
            api.wait(timeout=120)
        finally:
            api.close()
    template = DatabaseTemplate.for_this_prefect(tmp_path / "cache")
    assert template.database.is_file() and _rows(template.database)["alembic_version"] == 1
    assert _rows(tmp_path / "second" / "prefect.db")["block_type"] > 0  # the copy, served
