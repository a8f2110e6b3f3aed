"""The result store from Prefect: aggregation, the HTML report, and the artifacts that show them."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.artifacts import create_link_artifact, create_markdown_artifact
from prefect.cache_policies import NONE

from storage.aggregate import NightlySummary, nightly_for
from storage.catalog import build_catalog
from storage.readonly import QueryResult
from storage.report import write_report


def _markdown_table(result: QueryResult, limit: int = 30) -> str:
    if not result.rows:
        return "_none_\n"
    lines = ["| " + " | ".join(result.columns) + " |", "|" + "---|" * len(result.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in result.rows[:limit]]
    more = f"\n_{len(result.rows) - limit} more_" if len(result.rows) > limit else ""
    return "\n".join(lines) + more + "\n"


def regressions_markdown(summary: NightlySummary) -> str:
    if summary.previous_run_id is None:
        return f"# Run {summary.run_id}\n\nNo earlier run with the same chip and options to compare with.\n"
    return (f"# Run {summary.run_id} against {summary.previous_run_id}\n\n"
            f"## Regressions (was deeper, now shallower)\n\n{_markdown_table(summary.regressions)}\n"
            f"## Progressions\n\n{_markdown_table(summary.progressions)}\n"
            f"## New ops\n\n{_markdown_table(summary.new_ops)}\n"
            f"## Removed ops\n\n{_markdown_table(summary.removed_ops)}\n")


@task(name="publish-run", task_run_name="publish-{run_id}", cache_policy=NONE, persist_result=False)
def publish(store_root: Path, run_id: str, report_path: Path) -> Path:
    """Aggregate a finished run: regressions as markdown, the HTML report and a link to it; refresh
    the .duckdb catalog (its views list the store's files, so BI tools see this run)."""
    build_catalog(store_root)
    summary = nightly_for(store_root, run_id)
    create_markdown_artifact(markdown=regressions_markdown(summary), key="regressions",
                             description=f"regressions and progressions of run {run_id}")
    path = write_report(store_root, run_id, report_path)
    create_link_artifact(link=path.resolve().as_uri(), link_text=f"report of run {run_id}", key="report")
    return path
