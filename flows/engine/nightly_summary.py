"""The `nightly-summary` artifact: per target and model, the depth histogram, what changed since that
model's previous comparable night, and the expectations that no longer hold."""

from __future__ import annotations

from dataclasses import dataclass, field

from opbyop_storage.aggregate import ModelComparison
from opbyop_storage.expectations import ExpectationReport, Mismatch
from opbyop_tasks.store import markdown_rows

ROWS = 15  # per table: the artifact is a summary, the report and SQL hold the rest


@dataclass
class TargetOutcome:
    """One target of a nightly: its analysis run and how it compares."""

    title: str  # chip and options
    run_id: str
    state: str  # the analysis run's Prefect state name
    message: str
    comparisons: list[ModelComparison] = field(default_factory=list)
    expectations: ExpectationReport | None = None
    model_errors: dict[str, str] = field(default_factory=dict)
    compilers: list[str] = field(default_factory=list)  # the target's build against each it is compared with

    @property
    def ok(self) -> bool:
        return self.state == "Completed"


def _mismatches(mismatches: list[Mismatch], model: str) -> list[dict]:
    return [{"op": m.op_name, "signature": m.signature[:12], "expected": m.expected.value, "actual": m.actual.value,
             "status": m.status.value, "message": (m.message or "").splitlines()[0] if m.message else ""}
            for m in mismatches if model in m.models]


def _changes(rows: list[dict], columns: list[str]) -> str:
    shown = [{**r, "signature": (r.get("signature") or "")[:12]} for r in rows]
    return markdown_rows(columns, shown, ROWS)


def model_markdown(c: ModelComparison, expectations: ExpectationReport | None) -> str:
    against = f"against run `{c.previous_run_id}`" if c.previous_run_id else "first comparable run of this model"
    histogram = markdown_rows(["depth", "occurrences", "unique_ops"], c.depth_histogram, 50)
    parts = [f"### {c.model} ({against})\n", f"Depth reached (op occurrences):\n\n{histogram}"]
    if c.previous_run_id:
        parts += [f"Regressions ({len(c.regressions)}):\n\n"
                  + _changes(c.regressions, ["op_name", "signature", "previous_depth", "depth", "status", "message"]),
                  f"Progressions ({len(c.progressions)}):\n\n"
                  + _changes(c.progressions, ["op_name", "signature", "previous_depth", "depth", "status"]),
                  f"New ops ({len(c.new_ops)}):\n\n"
                  + _changes(c.new_ops, ["op_name", "signature", "depth", "status", "occurrences"]),
                  f"Removed ops ({len(c.removed_ops)}):\n\n"
                  + _changes(c.removed_ops, ["op_name", "signature", "previous_depth", "previous_status",
                                             "occurrences"])]
    if expectations is not None:
        failures = _mismatches(expectations.unexpected_failures, c.model)
        passes = _mismatches(expectations.unexpected_passes, c.model)
        columns = ["op", "signature", "expected", "actual", "status", "message"]
        parts += [f"Unexpected failures ({len(failures)}):\n\n" + markdown_rows(columns, failures, ROWS),
                  f"Unexpected passes ({len(passes)}):\n\n" + markdown_rows(columns, passes, ROWS)]
    return "\n".join(parts)


def nightly_markdown(name: str, outcomes: list[TargetOutcome]) -> str:
    lines = [f"# Nightly {name}\n"]
    lines += [f"- {'ok' if o.ok else o.state}: {o.title}: {o.message}" for o in outcomes]
    for o in outcomes:
        lines.append(f"\n## {o.title}: run `{o.run_id}` ({o.state})\n")
        if o.expectations is not None:
            e = o.expectations
            lines.append(f"Expectations: {len(e.unexpected_failures)} unexpected failures, "
                         f"{len(e.unexpected_passes)} unexpected passes, {e.matched} of {e.checked} ops as expected.\n")
        for line in o.compilers:
            lines.append(f"Compilers: {line} (`opbyop compare --group {o.run_id.rsplit('-c', 1)[0]}`)\n")
        for model, error in o.model_errors.items():
            lines.append(f"### {model}: could not be split\n\n```\n{error[:2000].replace('```', '` ` `')}\n```\n")
        lines += [model_markdown(c, o.expectations) for c in o.comparisons]
    return "\n".join(lines) + "\n"
