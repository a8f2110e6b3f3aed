"""Each pass's time in a compile, read from MLIR's pass timing reports (TTXLA_MLIR_PASS_TIMING=1).

Every pass manager of the plugin prints one report to stderr when it finishes:
`Total Execution Time: 0.0022 seconds`, then `----Wall Time----  ----Name----` and one line per
pass, `    0.0004 ( 18.8%)  Inliner`, nested pipelines indented under `'func.func' Pipeline` lines,
analyses as `(A) CallGraph`, and `Rest` / `Total` lines. Passes are leaves: pipelines (their time is
their passes'), analyses (counted inside the pass that asked for them), Rest and Total are not.
"""

from __future__ import annotations

import re

from opbyop.records import PassTiming

_TOTAL = re.compile(r"^\s*Total Execution Time:\s*([0-9.]+) seconds")
_ROW = re.compile(r"^\s+([0-9.]+) \(\s*[0-9.]+%\)\s{2}(\s*)(.+?)\s*$")
_NOT_A_PASS = ("Rest", "Total")


def pass_timing(log: str, compile_seconds: float = 0.0) -> PassTiming | None:
    """The pass times of every report in `log` (one compile's output), summed by pass; None when
    there is no report."""
    passes: dict[str, float] = {}
    total, reports, in_report = 0.0, 0, False
    for line in log.splitlines():
        if m := _TOTAL.match(line):
            total += float(m.group(1))
            reports += 1
            in_report = True
            continue
        if not in_report:
            continue
        m = _ROW.match(line)
        if m is None:
            if line.startswith("===") or not line.strip() or "----Wall Time----" in line:
                continue
            in_report = False  # the report ended: anything else is the compiler's other output
            continue
        name = m.group(3)
        if name in _NOT_A_PASS or name.endswith(" Pipeline") or name.startswith("(A) "):
            continue
        passes[name] = passes.get(name, 0.0) + float(m.group(1))
    if not reports:
        return None
    return PassTiming(passes=passes, total_seconds=total, compile_seconds=compile_seconds, reports=reports)
