"""The named aggregation queries: one SQL file each in storage/sql/, parameters as `$name`.

A file's leading `--` comment lines are its description. A line `-- include: <name>` pastes the
body of sql/<name>.sql (files starting with '_' are such fragments, not queries). `$runs`, a list of
run ids, is derived by aggregate.run_query from `run_id` and `n` (sql/window_runs.sql).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from opbyop.errors import StoreError

_PARAM = re.compile(r"\$([A-Za-z_]\w*)")
_INCLUDE = re.compile(r"^\s*--\s*include:\s*(\w+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class NamedQuery:
    name: str
    description: str
    sql: str
    params: tuple[str, ...]  # in order of first use


SQL_DIR = Path(__file__).resolve().parent / "sql"


def _read(name: str) -> str:
    return (SQL_DIR / f"{name}.sql").read_text()


def _parse(name: str, text: str) -> NamedQuery:
    description = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        description.append(line.removeprefix("--").strip())
    sql = _INCLUDE.sub(lambda m: _read(m.group(1)).strip(), text).strip().rstrip(";")
    code = re.sub(r"--[^\n]*", "", sql)  # parameters named in comments are not parameters
    params = tuple(dict.fromkeys(_PARAM.findall(code)))
    return NamedQuery(name, " ".join(description), sql, params)


@cache
def load_queries() -> dict[str, NamedQuery]:
    names = sorted(p.stem for p in SQL_DIR.glob("*.sql") if not p.name.startswith("_"))
    return {n: _parse(n, _read(n)) for n in names}


def get_query(name: str) -> NamedQuery:
    queries = load_queries()
    if name not in queries:
        raise StoreError(f"no aggregation query named {name!r}", f"use one of: {', '.join(queries)}")
    return queries[name]
