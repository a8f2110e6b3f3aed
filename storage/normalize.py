"""Failure messages reduced to their shape, so that one bug with a thousand shapes is one group.

The rules are defined once here and used twice: as the DuckDB macro `normalize_message(m)` that the
aggregation SQL calls, and as the Python function of the same name (tests, pandas baseline). They
are written in the regex subset that RE2 (DuckDB) and Python's `re` read alike.
"""

from __future__ import annotations

import re

# (pattern, replacement) in order: paths before numbers (paths hold digits), hex before numbers,
# shapes before numbers (4x32xf32 is one token), SSA names before numbers (%0).
RULES: list[tuple[str, str]] = [
    (r"""(^|[\s"'(=:\[,])(?:~|\.{1,2})?(?:/[\w.+-]+)+(?::\d+)*""", r"\1<path>"),
    (r"\b[\w./-]+\.(?:py|mlir|cpp|cc|c|h|hpp|td):\d+(?::\d+)*", "<path>"),
    (r"0[xX][0-9a-fA-F]+", "<hex>"),
    (r"\b\d+(?:x\d+)*x(?:bf16|f8E\w+|[fiu]\d+|index)\b", "<shape>"),
    (r"\b\d+(?:x\d+)+\b", "<shape>"),
    (r"%[\w.$#-]+", "%<ssa>"),
    (r"\^bb\d+", "^<bb>"),
    (r"-?\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\b", "<n>"),
    (r"\s+", " "),
]

_COMPILED = [(re.compile(p), r) for p, r in RULES]


def normalize_message(message: str | None) -> str | None:
    if message is None:
        return None
    for pattern, replacement in _COMPILED:
        message = pattern.sub(replacement, message)
    return message.strip()


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"  # DuckDB strings keep backslashes as they are


def macro_sql() -> str:
    """CREATE MACRO normalize_message(m): the same rules, in DuckDB."""
    expr = "m"
    for pattern, replacement in RULES:
        expr = f"regexp_replace({expr}, {_sql_literal(pattern)}, {_sql_literal(replacement)}, 'g')"
    return f"CREATE OR REPLACE MACRO normalize_message(m) AS trim({expr})"
