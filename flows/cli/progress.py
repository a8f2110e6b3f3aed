"""What `opbyop analyze` and `opbyop nightly` show: a progress bar fed from the store while a run
goes, the run's summary and time line at the end, the manifest copied where asked."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable, Optional

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from opbyop_flows.engine.phases import format_phases
from opbyop.cli.app import make_console, styled
from opbyop.pipeline import run_manifest_path

console = make_console()  # prints data literally: stored strings never read as markup
PROGRESS_SECONDS = 0.5  # how often the progress bar reads the store


def say(*parts: str | tuple[str, str]) -> None:
    console.print(styled(*parts), soft_wrap=True)


def progress_from_store(running: Callable[[], bool], store_root: Path | str, run_ids: list[str]) -> None:
    """A progress bar fed from the store (results land there in batches) while `running()` says so,
    over the runs `run_ids` (one per compiler build); `running()` paces the loop (a short wait: the
    end shows at once), the store is read every PROGRESS_SECONDS, only the parts written since the
    read before (each read costs CPU the run could use)."""
    from opbyop_storage.dataset import Store  # pyarrow: loaded only when used
    from opbyop_storage.run_progress import RunSignatures

    store = Store(store_root)
    ops = {r: RunSignatures(store, "ops", r) for r in run_ids}  # a run's ops are stored model by model
    results = {r: RunSignatures(store, "results", r) for r in run_ids}
    name = run_ids[0] if len(run_ids) == 1 else f"{run_ids[0].removesuffix('-c1')} ({len(run_ids)} compilers)"
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        task = progress.add_task(f"run {name}: starting", total=None)
        read = time.monotonic()
        while running():
            if time.monotonic() - read < PROGRESS_SECONDS:
                continue
            read = time.monotonic()
            totals = {r: len(_read(ops[r])) for r in run_ids}
            started = [r for r in run_ids if totals[r]]
            if started:  # a build not started yet has as many ops as the first (the same split)
                total = sum(totals.values()) + (len(run_ids) - len(started)) * totals[started[0]]
                progress.update(task, total=total, completed=sum(len(_read(results[r])) for r in started),
                                description=f"run {name}: ops")


def _read(signatures: Callable[[], set[str]]) -> set[str]:
    try:
        return signatures()
    except Exception:  # a run's files may not exist yet; a bar is never worth a failed run
        return set()


def print_summary(summary) -> None:  # noqa: ANN001  (opbyop_flows.engine.summary.RunSummary)
    for earlier in summary.group:  # a run under several compiler builds: each build's run, then the steps
        print_summary(earlier)
    if summary.compiler:
        say(f"compiler: {summary.compiler}")
    table = Table("status", "unique ops", title=f"run {summary.run_id}")
    for status, n in sorted(summary.statuses.items(), key=lambda kv: -kv[1]):
        table.add_row(status, str(n))
    console.print(table)
    for model, status in summary.whole.items():
        say(f"whole model {model}: {status}")
    for model, error in summary.model_errors.items():
        say((f"{model}: {error}", "red"))
    say(summary.line())
    if summary.phases:
        say(f"time: {format_phases(summary.phases)}")
    if summary.report:
        say(f"report: {summary.report}")
    say(f"query it: opbyop sql \"SELECT status, count(*) FROM results WHERE run_id = '{summary.run_id}' GROUP BY 1\"")
    for step in summary.comparisons:
        say(("compared: ", "bold"), step["line"])
    if summary.comparisons:
        group = summary.run_id.rsplit("-c", 1)[0]
        say(f"every op: opbyop compare --group {group}")


def copy_manifest(root: Path, run_id: str, target: Optional[Path]) -> None:
    """The run's manifest (opbyop.pipeline.write_manifest, beside the report) also at --manifest."""
    written = run_manifest_path(root, run_id)
    if target is None or not written.exists():
        return
    try:
        shutil.copyfile(written, target)
        say(f"manifest: {target}")
    except OSError as e:
        say(("error:", "red"), f" cannot write the manifest {target}: {e}")
