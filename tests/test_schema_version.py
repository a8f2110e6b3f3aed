"""The store's schema version moves with its columns (storage/schema.py: bump SCHEMA_VERSION on any change)."""

from __future__ import annotations

import pyarrow as pa

from opbyop_storage import schema


def test_the_tables_columns_are_those_the_schema_version_records() -> None:
    found = schema.schema_fingerprint()
    assert found == schema.SCHEMA_FINGERPRINT, (
        f"the tables' columns changed: bump SCHEMA_VERSION (now {schema.SCHEMA_VERSION}) in storage/schema.py, "
        f"say what changed in its comment, and set SCHEMA_FINGERPRINT = {found!r}")


def test_the_fingerprint_changes_when_a_column_is_added(monkeypatch) -> None:
    before = schema.schema_fingerprint()
    monkeypatch.setitem(schema.TABLES, "runs", schema.RUNS.append(pa.field("extra", pa.string())))
    assert schema.schema_fingerprint() != before


def test_the_fingerprint_changes_when_a_column_changes_type(monkeypatch) -> None:
    before = schema.schema_fingerprint()
    first = schema.RUNS.field(0)
    changed = pa.binary() if first.type != pa.binary() else pa.string()
    monkeypatch.setitem(schema.TABLES, "runs", schema.RUNS.set(0, pa.field(first.name, changed)))
    assert schema.schema_fingerprint() != before


def test_a_new_status_column_leaves_the_fingerprint_alone(monkeypatch) -> None:
    """A status is its enum entry alone: the models table's count column follows it unversioned."""
    before = schema.schema_fingerprint()
    monkeypatch.setitem(schema.TABLES, "models", schema.MODELS.append(pa.field("status_brand_new", pa.int64())))
    monkeypatch.setattr(schema, "STATUS_COUNT_COLUMNS", (*schema.STATUS_COUNT_COLUMNS, "status_brand_new"))
    assert schema.schema_fingerprint() == before
