"""The store's objects as DuckDB sees them, and files the run writes beside them on object storage.

DuckDB reads S3 through its httpfs extension, which it downloads at run time: instead, each table's
objects become a pyarrow dataset (pyarrow's own S3 client) registered in the connection, which
DuckDB scans like any Arrow source, with filters and projections pushed down.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from opbyop_storage.files import DataFile
from opbyop_storage.object_files import ObjectFiles
from opbyop_storage.schema import schema_of

HIVE_DATE = pa.schema([pa.field("date", pa.date32())])  # the Hive `date` column, typed as DuckDB's glob types it


def register_objects(con: duckdb.DuckDBPyConnection, table: str, files: list[DataFile], filesystem: Any) -> str:
    """Register `table`'s objects in `con`; returns the name to select from."""
    base = str(files[0]).rsplit("/", 3)[0]  # <bucket/prefix>/<table>: above date=/run_id=/<object>
    dataset = ds.dataset([str(f) for f in files], filesystem=filesystem, format="parquet",
                         schema=schema_of(table).append(HIVE_DATE.field("date")),
                         partitioning=ds.partitioning(HIVE_DATE, flavor="hive"), partition_base_dir=base)
    name = f"_{table}_objects"
    con.register(name, dataset)
    return name


def upload_file(store_url: str, local: Path, name: str) -> str:
    """Copy a local file to `<store>/<name>` (one PUT: visible whole or not at all); returns its URL."""
    return ObjectFiles(store_url).upload(local, name)
