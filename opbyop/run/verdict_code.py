"""The opbyop code a verdict is made by: what compiles an op or a whole model, simulates it and
compares it. Its digest is part of every kept verdict's key (an op's result reused from an earlier
run, a whole model's), so a changed device model or comparison is another verdict, never a stale hit."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import opbyop
from opbyop.digests import source_digest, text_digest

PACKAGE = Path(opbyop.__file__).parent
VERDICT_CODE = ("analysis", "compiler", "device", "golden", "worker")  # the packages a verdict is made by


@cache  # once per process: the code it runs is the code it loaded
def verdict_code() -> str:
    return text_digest(*(source_digest(PACKAGE / name) for name in VERDICT_CODE))
