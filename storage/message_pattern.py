"""The message patterns of opbyop.messages, as the DuckDB macro `message_pattern(m)`.

One set of rules for the whole project: the groups in the SQL aggregations and the HTML report are
the groups the CLI prints. The rules are translated, not re-invented: each regex of
opbyop.messages is passed to DuckDB's RE2 as it is (a test checks both give the same text).
"""

from __future__ import annotations

from opbyop import messages
from opbyop.messages import message_pattern

__all__ = ["macro_sql", "message_pattern"]

MAX_CHARS = 300  # as opbyop.messages.message_pattern


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"  # DuckDB strings keep backslashes as they are


def macro_sql() -> str:
    """CREATE MACRO message_pattern(m): first line, the same rules, whitespace collapsed, 300 chars."""
    expr = "split_part(replace(trim(m, ' \t\n\r'), chr(13), chr(10)), chr(10), 1)"
    for pattern, replacement in messages.RULES:  # the single definition of the rules
        expr = f"regexp_replace({expr}, {_sql_literal(pattern.pattern)}, {_sql_literal(replacement)}, 'g')"
    expr = f"left(regexp_replace({expr}, '\\s+', ' ', 'g'), {MAX_CHARS})"
    return f"CREATE OR REPLACE MACRO message_pattern(m) AS CASE WHEN m IS NULL THEN '' ELSE {expr} END"
