"""Failure messages as patterns: numbers, shapes, paths and addresses replaced, so that the same failure
on different shapes groups together."""

from __future__ import annotations

import re

# Public: storage/ builds its SQL macro message_pattern from the same rules, so reports group alike.
RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r'loc\([^)]*\)'), "loc(...)"),
    # absolute paths, or relative ones two directories deep (not "tiles/core"); RE2 has no
    # lookbehind, so the character before the path is captured and put back
    (re.compile(r"(^|[^\w.])(/(?:[\w.+\-]+/)*[\w.+\-]+|(?:[\w.+\-]+/){2,}[\w.+\-]+)(:\d+)*"), r"\1<path>"),
    # an address stands alone: the "0x4" inside the shape 40000x40000xf32 is not one
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<addr>"),
    (re.compile(r"\b\d+(x\d+)*x(f|bf|i|si|ui)\d+\b"), "<shape>"),
    (re.compile(r"\b(\d+x)+\d+\b"), "<dims>"),
    (re.compile(r"%[\w#]+"), "%<v>"),
    (re.compile(r"[-+]?\b\d+(\.\d+)?([eE][-+]?\d+)?\b"), "<n>"),
]


def message_pattern(message: str | None) -> str:
    """`failed to legalize 'stablehlo.cholesky' at /x/y.mlir:3 for 4x4xf32` -> stable group text."""
    if not message:
        return ""
    text = message.strip().splitlines()[0] if message.strip() else ""
    for pattern, replacement in RULES:
        text = pattern.sub(replacement, text)
    return re.sub(r"\s+", " ", text)[:300]
