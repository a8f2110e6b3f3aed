"""The message normalisation of opbyop.messages, as the DuckDB macro `normalize_message(m)`.

One set of rules for the whole project: the groups in the SQL aggregations and the HTML report are
the groups the CLI prints. The rules are translated, not re-invented: each regex of
opbyop.messages is passed to DuckDB's RE2 as it is (a test checks both give the same text).
"""

from __future__ import annotations

from opbyop import messages
from opbyop.messages import normalize_message

__all__ = ["macro_sql", "normalize_message"]

MAX_CHARS = 300  # as opbyop.messages.normalize_message


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"  # DuckDB strings keep backslashes as they are


def macro_sql() -> str:
    """CREATE MACRO normalize_message(m): first line, the same rules, whitespace collapsed, 300 chars."""
    expr = "split_part(replace(trim(m, ' \t\n\r'), chr(13), chr(10)), chr(10), 1)"
    for pattern, replacement in messages.RULES:  # the single definition of the rules
        expr = f"regexp_replace({expr}, {_sql_literal(pattern.pattern)}, {_sql_literal(replacement)}, 'g')"
    expr = f"left(regexp_replace({expr}, '\\s+', ' ', 'g'), {MAX_CHARS})"
    return f"CREATE OR REPLACE MACRO normalize_message(m) AS CASE WHEN m IS NULL THEN '' ELSE {expr} END"
