"""Which compiler pass a failed compile stopped in, read from the plugin's verbose IR printing.

With TTXLA_LOGGER_LEVEL=VERBOSE the plugin prints `// -----// IR Dump Before <Pass> (<arg>) ('<op>'
operation) //----- //` followed by the IR before every pass it starts (single-threaded, so in
pipeline order), `IR Dump After ...` when a pass changed the IR, and `IR Dump After <Pass> Failed
(<arg>)` when a pass reports failure. The same pass can run several times (convert-stablehlo-to-ttir
runs on the module, then again inside the device module): the one that failed is the last start
of that pass before its failure line. When the process died or hung, the pass running is the last
one started, since a pass's banner is printed only once its predecessor is done.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from opbyop.records import FailedPass, PassOutcome

_BANNER = re.compile(
    r"^// -----// IR Dump (?P<when>Before|After) (?P<name>\S+)(?P<failed> Failed)?"
    r"(?: \((?P<arg>[^)]*)\))? \('(?P<op>[^']+)' operation(?:: (?P<symbol>[^)]*))?\) //----- //\s*$")
# A line the logger printed (timestamped), not part of an IR dump.
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


@dataclass(frozen=True)
class PassEvent:
    when: str  # Before | After
    failed: bool
    name: str
    argument: str
    anchor: str
    line: int  # index of the banner line in the log


def pass_events(lines: list[str]) -> list[PassEvent]:
    events = []
    for i, line in enumerate(lines):
        if not line.startswith("// -----// IR Dump "):
            continue
        m = _BANNER.match(line)
        if m is None:
            continue
        anchor = m["op"] + (f" {m['symbol']}" if m["symbol"] else "")
        events.append(PassEvent(m["when"], bool(m["failed"]), m["name"], m["arg"] or m["name"], anchor, i))
    return events


def ir_after_banner(lines: list[str], banner: int) -> str:
    """The IR printed under the banner at line `banner`: its top-level operation, which ends with a
    closing brace in the first column (or, cut short, at the next banner or logger line)."""
    block = []
    for line in lines[banner + 1:]:
        if line.startswith("// -----// IR Dump ") or _LOG_LINE.match(line) or line.startswith("loc("):
            break
        block.append(line)
        if line.startswith("}"):
            break
    return "\n".join(block).strip("\n") + "\n"


@dataclass(frozen=True)
class PassTrace:
    """What a verbose compile's log says, before the IR is stored (`ir_before`: its text)."""

    failed_pass: FailedPass
    ir_before: str | None


def find_failed_pass(log: str, ended: PassOutcome) -> PassTrace:
    """The pass a verbose compile stopped in. `ended`: how the compile ended: FAILED (it returned an
    error), DIED (its process died) or HUNG (the time limit ended it); NONE when it succeeded."""
    lines = log.splitlines()
    events = pass_events(lines)
    started = [e for e in events if e.when == "Before"]
    failure = next((e for e in events if e.failed), None)
    if failure is not None:
        index = max((i for i, e in enumerate(started) if e.argument == failure.argument and e.line < failure.line),
                    default=None)
        if index is None:  # the failure banner without its start: name it, the IR is the one it failed on
            return PassTrace(FailedPass(outcome=PassOutcome.FAILED, argument=failure.argument, name=failure.name,
                                        anchor=failure.anchor, passes_started=len(started),
                                        last_succeeded=started[-1].argument if started else None),
                             ir_after_banner(lines, failure.line))
        return _trace(lines, started, index, PassOutcome.FAILED)
    if ended in (PassOutcome.DIED, PassOutcome.HUNG) and started:
        return _trace(lines, started, len(started) - 1, ended)
    return PassTrace(FailedPass(outcome=PassOutcome.NONE, passes_started=len(started),
                                last_succeeded=started[-1].argument if started else None,
                                reason=_no_pass_reason(ended, started)), None)


def _trace(lines: list[str], started: list[PassEvent], index: int, outcome: PassOutcome) -> PassTrace:
    event = started[index]
    return PassTrace(FailedPass(outcome=outcome, argument=event.argument, name=event.name, anchor=event.anchor,
                                position=index + 1, passes_started=len(started),
                                last_succeeded=started[index - 1].argument if index > 0 else None),
                     ir_after_banner(lines, event.line))


def _no_pass_reason(ended: PassOutcome, started: list[PassEvent]) -> str:
    if ended is PassOutcome.NONE:
        return "the verbose re-compile succeeded: the failure did not reproduce"
    if not started and ended is PassOutcome.FAILED:
        return ("the compiler stopped before its first pass: it refused the module while reading or "
                "serialising it (see the message)")
    if not started:
        return f"the verbose re-compile {ended.value} before the compiler started any pass"
    return (f"no pass reported failure: the compile failed outside the pass pipelines, after "
            f"{started[-1].argument} (pass {len(started)}) completed (see the message)")
