"""The Prefect server opbyop starts: Prefect's own app, its SQLite database migrated once per Prefect
version and copied into every new Prefect home.

A server on a fresh database runs Prefect's hundred-odd migrations and registers its block types
before it answers: on 2 cores that is more than half of its start (benchmarks/bench_front_door.py).
The first server of a Prefect version keeps its freshly migrated database as a template in opbyop's
machine cache (the schema version and the block types only: nothing a run wrote); a later server
whose home has no database yet starts from a copy of it, and does not register the block types the
copy holds again. A database that exists, or is not SQLite, is left alone.

    uvicorn --factory opbyop_flows.hosting.prefect_db:create_app    (what flows/hosting/server.py runs)
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import uuid
from contextlib import asynccontextmanager, closing, nullcontext
from pathlib import Path
from typing import AsyncIterator, Callable

import prefect
from fastapi import FastAPI
from prefect.server.api.server import create_app as prefect_app
from prefect.settings import (PREFECT_API_BLOCKS_REGISTER_ON_START, PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION, Settings,
                              get_current_settings, temporary_settings)

from opbyop.environment import environment

# What a fresh server writes before it answers its first request: kept in the template, all else purged.
TEMPLATE_TABLES = ("alembic_version", "block_type", "block_schema", "block_schema_reference")
# A database copied from the template holds the block types already: neither registered again nor hashed.
REGISTERED = {PREFECT_API_BLOCKS_REGISTER_ON_START: False, PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION: False}


def sqlite_file(settings: Settings) -> Path | None:
    """The SQLite file the server's database is (None: another database, or one in memory)."""
    secret = settings.server.database.connection_url
    url = secret.get_secret_value() if secret is not None else ""
    scheme, _, path = url.partition(":///")
    if not scheme.startswith("sqlite") or not path or path.startswith(":memory:") or "mode=memory" in path:
        return None
    return Path(path.split("?", 1)[0])


class DatabaseTemplate:
    """A migrated Prefect database holding nothing but its schema version and block types, in a folder."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.database = folder / "prefect.db"

    @classmethod
    def for_this_prefect(cls, cache_dir: Path) -> DatabaseTemplate:
        return cls(cache_dir / "prefect-db" / f"prefect-{prefect.__version__}")

    def seed(self, database: Path) -> bool:
        """Copy the template to `database` if it does not exist yet; whether it now holds the template
        (False: no template yet, or a database was already there)."""
        if database.exists() or not self.database.is_file():
            return False
        database.parent.mkdir(parents=True, exist_ok=True)
        partial = database.with_name(f".{database.name}.{uuid.uuid4().hex}")
        try:
            shutil.copyfile(self.database, partial)
            os.link(partial, database)  # only if still absent: another server of this home may have been first
            return True
        except FileExistsError:
            return False
        finally:
            partial.unlink(missing_ok=True)

    def keep(self, database: Path) -> None:
        """Make the template from a database a server has just migrated (a consistent snapshot, while the
        server runs), with nothing but TEMPLATE_TABLES' rows."""
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f".prefect.db.{uuid.uuid4().hex}"
        try:
            with closing(sqlite3.connect(database)) as source, closing(sqlite3.connect(partial)) as copy:
                source.backup(copy)
                tables = [name for (name,) in copy.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
                for name in tables:
                    if name not in TEMPLATE_TABLES and not name.startswith("sqlite_"):
                        copy.execute(f'DELETE FROM "{name}"')
                copy.commit()
                copy.execute("PRAGMA journal_mode = DELETE")  # one file; Prefect turns WAL on again when it opens it
            os.replace(partial, self.database)
        finally:
            partial.unlink(missing_ok=True)


def create_app() -> FastAPI:
    """Prefect's server app on a database seeded from the template (its block types are registered: the
    server does not register them again), or the template made from its own database once the server
    has migrated it (the app's start-up, before it answers)."""
    database = sqlite_file(get_current_settings())
    template = DatabaseTemplate.for_this_prefect(environment().cache_dir)
    if database is None or database.exists():
        return prefect_app()
    if template.seed(database):
        return _around_start_up(prefect_app(), settings=REGISTERED)
    return _around_start_up(prefect_app(), then=lambda: template.keep(database))


def _around_start_up(app: FastAPI, settings: dict | None = None, then: Callable[[], None] | None = None) -> FastAPI:
    """The app, its start-up (migrations, block types) run with `settings`, and `then` run after it,
    before the app serves."""
    started = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(running: FastAPI) -> AsyncIterator[object]:
        with temporary_settings(settings) if settings else nullcontext():
            async with started(running) as state:
                if then is not None:
                    try:
                        then()
                    except (OSError, sqlite3.Error):  # no template: the next fresh home migrates again, nothing worse
                        pass
                yield state

    app.router.lifespan_context = lifespan
    return app
