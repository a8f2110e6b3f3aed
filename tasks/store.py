"""The result store from Prefect: aggregation, the HTML report, and the artifacts that show them.

What the report shows first is also put into Prefect artifacts (markdown and tables render in the
UI): a browser refuses file:// links from an http page, so a link to the HTML file would not open.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE

from opbyop_storage.aggregate import NightlySummary, nightly_for
from opbyop_storage.catalog import build_catalog
from opbyop_storage.dataset import Store
from opbyop_storage.location import StoreRoot, is_object_url
from opbyop_storage.object_views import upload_file
from opbyop_storage.readonly import QueryResult
from opbyop_storage.exports.report import ReportApart, device_time


def _cell(value: Any) -> str:
    """One markdown table cell: pipes and newlines would break the table."""
    text = ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")[:200]


def markdown_rows(columns: list[str], rows: list[dict[str, Any]] | list[tuple], limit: int = 30) -> str:
    if not rows:
        return "_none_\n"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows[:limit]:
        values = [row.get(c) for c in columns] if isinstance(row, dict) else list(row)
        lines.append("| " + " | ".join(_cell(v) for v in values) + " |")
    more = f"\n_{len(rows) - limit} more_" if len(rows) > limit else ""
    return "\n".join(lines) + more + "\n"


def _markdown_table(result: QueryResult, limit: int = 30) -> str:
    return markdown_rows(result.columns, result.rows, limit)


def regressions_markdown(summary: NightlySummary) -> str:
    if summary.previous_run_id is None:
        return (f"# Run {summary.run_id}\n\nNo earlier run with the same chip, options and models to compare "
                f"with.\n")
    return (f"# Run {summary.run_id} against {summary.previous_run_id}\n\n"
            f"## Regressions (was deeper, now shallower)\n\n{_markdown_table(summary.regressions)}\n"
            f"## Progressions\n\n{_markdown_table(summary.progressions)}\n"
            f"## New ops\n\n{_markdown_table(summary.new_ops)}\n"
            f"## Removed ops\n\n{_markdown_table(summary.removed_ops)}\n")


def report_markdown(summary: NightlySummary, report_path: Path | str, phases: dict[str, float]) -> str:
    """The report's first screens as markdown: depth per model, blockers, failures, phases."""
    where = (f"is on the object store: `{report_path}`" if isinstance(report_path, str)
             else f"is a file on the machine that ran the flow: `{report_path}`")
    histogram = markdown_rows(["model", "depth", "occurrences", "unique_ops"], summary.depth_histogram.records(),
                              limit=200)
    timing = markdown_rows(["phase", "seconds"], [(p, f"{s:.1f}") for p, s in phases.items()])
    return (f"# Report of run {summary.run_id}\n\n"
            f"The full HTML report (charts, every op, filters) {where}; rebuild it anywhere with `opbyop report --run {summary.run_id} --out report.html`.\n\n"
            f"## Depth reached per model (op occurrences)\n\n{histogram}\n"
            f"## Ops blocking the most models\n\n{_markdown_table(summary.top_blockers, limit=20)}\n"
            f"## Top failure messages\n\n{_markdown_table(summary.top_failures, limit=20)}\n"
            f"## Where the run's time went (its steps add up to the total, its wall time; what ran at the same time is marked beside)\n\n{timing}")


@task(name="publish-run", task_run_name="publish-{run_id}", cache_policy=NONE, persist_result=False)
def publish(store_root: StoreRoot, run_id: str, report_path: Path,
            phases: dict[str, float] | None = None) -> Path | str:
    """Aggregate a finished run: regressions and the report's content as markdown artifacts, the HTML
    report file; refresh the .duckdb catalog (its views list the store's files, so BI tools see it).
    With the store on object storage the report is uploaded beside it (reports/<run_id>.html), since
    the flow's host may be gone when someone reads it; its URL is returned. The HTML report is written
    by a process of its own while this one aggregates."""
    report = ReportApart(store_root, run_id, report_path)
    try:
        build_catalog(store_root)
        summary = nightly_for(store_root, run_id)
        create_markdown_artifact(markdown=regressions_markdown(summary), key="regressions",
                                 description=f"regressions and progressions of run {run_id}")
    finally:  # never leave the report's process behind
        path = report.finish()
    where: Path | str = (upload_file(str(store_root), path, f"reports/{run_id}.html") if is_object_url(store_root)
                         else path.resolve())
    create_markdown_artifact(markdown=report_markdown(summary, where, phases or {}), key="report",
                             description=f"report of run {run_id}")
    publish_device_time(store_root, run_id)
    return where if isinstance(where, str) else path


def publish_device_time(store_root: StoreRoot, run_id: str, n: int = 20) -> None:
    """The op occurrences with the most simulated device time, as a table artifact."""
    rows = device_time(Store(store_root), run_id, n)
    create_table_artifact(table=rows or [{"op": "nothing ran on the simulated device"}], key="device-time",
                          description=f"run {run_id}: the {len(rows)} op occurrences with the most simulated device "
                                      f"time (all of it for tt-perf-report: opbyop export perf --run {run_id})")
