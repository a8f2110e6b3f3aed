"""Failure messages, normalised so that the same failure on different shapes groups together."""

from __future__ import annotations

import re

_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r'loc\([^)]*\)'), "loc(...)"),
    (re.compile(r"(/[\w.\-]+)+(:\d+)*"), "<path>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"\b\d+(x\d+)*x(f|bf|i|si|ui)\d+\b"), "<shape>"),
    (re.compile(r"\b(\d+x)+\d+\b"), "<dims>"),
    (re.compile(r"%[\w#]+"), "%<v>"),
    (re.compile(r"[-+]?\b\d+(\.\d+)?([eE][-+]?\d+)?\b"), "<n>"),
]


def normalize_message(message: str | None) -> str:
    """`failed to legalize 'stablehlo.cholesky' at /x/y.mlir:3 for 4x4xf32` -> stable group text."""
    if not message:
        return ""
    text = message.strip().splitlines()[0] if message.strip() else ""
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return re.sub(r"\s+", " ", text)[:300]
