"""The HTML report of one run: one self-contained file (inline CSS, JS and data; no CDN, no fetch).

Python gathers the numbers (the aggregation queries, the expectations check) into one JSON
document embedded in the page; small inline JS draws the charts as SVG and the tables with search,
filters and sorting, so the file opens offline, from a mail attachment or a CI artifact.

    python -m opbyop_storage.exports.report STORE RUN_ID OUT

writes a report in a process of its own (ReportApart: what a run's publish step starts first).
"""

from __future__ import annotations

import subprocess
import sys
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import jinja2

from opbyop.atomic import write_text
from opbyop.errors import OpbyopError
from opbyop.records import RunInfo, Status
from opbyop.shrink.saved import load_shrink
from opbyop.workspace import Workspace
from opbyop_storage.aggregate import nightly, run_query
from opbyop_storage.colours import DEPTH_COLOURS, status_colours
from opbyop_storage.compare import compare_group, compiler_label
from opbyop_storage.convert import run_row, shrink_rows
from opbyop_storage.dataset import Store
from opbyop_storage.expectations import Expectations, compare, load_expectations, run_outcomes
from opbyop_storage.expectations import default_path as default_expectations_path
from opbyop_storage.exports.perf_csv import busiest_signatures, perf_rows, top_ops
from opbyop_storage.location import StoreRoot
from opbyop_storage.readonly import StoreConnection

TEMPLATE = Path(__file__).resolve().parent / "templates" / "report.html"
APART_TIMEOUT_S = 600.0  # a report of 17,681 unique ops takes 3 s


def _jsonable(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    return str(value)


def report_data(root: Path | str | None, run_id: str, expectations: Expectations | None = None,
                previous: str | None = None, n: int = 30) -> dict[str, Any]:
    """Everything the page shows, as plain JSON-ready values (the trend against `previous` over `n` runs)."""
    store = Store(root)
    run = store.run(run_id)
    with StoreConnection(store.root) as con:
        summary = nightly(con, run_id, previous, n=n)
        ops = run_query(con, "run_ops", run_id=run_id).records()
        models = run_query(con, "run_models", run_id=run_id).records()
        gaps = run_query(con, "opbyop_gaps", run_id=run_id).records()
        mesh_ops = run_query(con, "mesh_collectives", run_id=run_id).records()
        failed_passes = run_query(con, "failed_passes", run_id=run_id).records()
        slowest_passes = run_query(con, "slowest_passes", run_id=run_id, limit=5).records()
        accuracy_trace = run_query(con, "accuracy_trace", run_id=run_id).records()
        ttsim_agreement = run_query(con, "ttsim_agreement", run_id=run_id).records()
        compilers = compilers_data(con, run)
        skipped = [{"path": str(s.path), "error": s.error} for s in con.skipped]
    expectation_report = None
    if expectations is not None:
        expectation_report = compare(run_id, run_outcomes(store.root, run_id), expectations).model_dump(mode="json")
    return {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "run": run.model_dump(mode="json"),
        "previous_run_id": summary.previous_run_id,
        "depth_histogram": summary.depth_histogram.records(),
        "top_blockers": summary.top_blockers.records(),
        "blockers": summary.blockers.records(),
        "trend": summary.trend.records(),
        "regressions": summary.regressions.records(),
        "progressions": summary.progressions.records(),
        "new_ops": summary.new_ops.records(),
        "removed_ops": summary.removed_ops.records(),
        "top_failures": summary.top_failures.records(),
        "kind_depth_matrix": summary.kind_depth_matrix.records(),
        "models": models,
        "ops": ops,
        "gaps": gaps,
        "mesh_ops": mesh_ops,
        "failed_passes": failed_passes,
        "slowest_passes": slowest_passes,
        "accuracy_trace": accuracy_trace,
        "ttsim_agreement": ttsim_agreement,
        "compilers": compilers,
        "expectations": expectation_report,
        "skipped": skipped,
        "shrinks": shrinks_of(store, run_id, [o["signature"] for o in ops if o.get("signature")]),
        "device_time": device_time(store, run_id),
        **status_data(),
        "depth_colours": DEPTH_COLOURS,
    }


def compilers_data(con: StoreConnection, run: RunInfo) -> dict[str, Any]:
    """The run's compiler build and, for a run of a group (one run per build), its ops beside the run
    of the build before it, and where each op of the group starts or stops failing."""
    data: dict[str, Any] = {"compiler": compiler_label(run_row(run)), "group_id": run.group_id, "previous": None,
                            "history": []}
    if not run.group_id:
        return data
    group = compare_group(con, run.group_id)
    step = next((s for s in group.steps if s.run_id == run.run_id), None)
    if step is not None:
        data["previous"] = {**step.summary(), "line": step.line(),
                            "ops": [r for r in step.rows if r["change"] in ("regression", "progression", "message")],
                            "compile_time": step.compile_time_changes(20)}
    data["history"] = [h for h in group.history if h["starts_failing_under"] or h["stops_failing_under"]]
    data["compilers"] = group.compilers
    return data


def status_data() -> dict[str, Any]:
    """What the page knows of statuses, from the enum: their colours and the ones pass rates count."""
    return {"status_colours": status_colours(), "verdict_statuses": [s.value for s in Status if s.is_verdict]}


def device_time(store: Store, run_id: str, n: int = 30) -> list[dict[str, Any]]:
    """The op occurrences (and whole-model programs) with the most simulated device time, from the
    rows of the `n` busiest unique ops only (a run of hundreds of models has 100,000s of occurrences)."""
    return top_ops(perf_rows(store, run_id, signatures=busiest_signatures(store, run_id, n)), n)


def shrinks_of(store: Store, run_id: str, signatures: list[str]) -> list[dict[str, Any]]:
    """Per shrunk op: its sentences and its boundary variants. From the run's shrinks table; for an op
    of the run shrunk by `opbyop shrink` instead, its latest shrink in the workspace."""
    rows = store.shrinks(run_id)
    stored = {r["signature"] for r in rows}
    home = Workspace.default().root
    for signature in signatures:
        if signature not in stored and (found := load_shrink(home, signature)) is not None:
            rows += shrink_rows(run_id, found)
    by_op: dict[str, dict[str, Any]] = {}
    for r in rows:
        entry = by_op.setdefault(r["signature"], {"signature": r["signature"], "op_name": r["op_name"],
                                                   "summary": (r["summary"] or "").splitlines(), "boundaries": []})
        if r["boundary"]:
            entry["boundaries"].append({k: r[k] for k in ("dtype", "dimension", "size", "boundary", "status",
                                                          "variant_signature", "message")})
    return list(by_op.values())


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE.parent), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    # tojson escapes <, >, & and ' inside the JSON, so no value can close the <script> element
    env.policies["json.dumps_kwargs"] = {"default": _jsonable, "separators": (",", ":")}
    return env


def render_html(data: dict[str, Any]) -> str:
    template = _environment().get_template(TEMPLATE.name)
    return template.render(title=f"opbyop report {data['run']['run_id']}", data=data)


def write_report(root: Path | str | None, run_id: str, out: Path, expectations_path: Path | None = None,
                 use_expectations: bool = True, previous: str | None = None, n: int = 30) -> Path:
    """Render the report of `run_id` to `out` (atomically); expectations from `expectations_path`
    (default configs/expectations.yaml) unless use_expectations is False."""
    expectations = None
    if use_expectations:
        path = expectations_path or default_expectations_path()
        if expectations_path is not None or path.exists():  # the default file is optional
            expectations = load_expectations(path)
    page = render_html(report_data(root, run_id, expectations, previous, n))
    return write_text(out, page)



class ReportApart:
    """write_report (expectations from their default file) in a process of its own, started at once:
    the caller does its own work meanwhile and finish() waits for it. What a report reads and holds
    (DuckDB's queries, the rows of every unique op, the page) is given back when the process ends, not
    kept by the run's process (the CLI's, a served deployment's): 0.3 GB above a fresh process for a
    run of 324 models."""

    def __init__(self, root: StoreRoot, run_id: str, out: Path, timeout: float = APART_TIMEOUT_S):
        self.run_id, self.out, self.timeout = run_id, out, timeout
        self._proc = subprocess.Popen([sys.executable, "-m", __name__, str(root), run_id, str(out)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def finish(self) -> Path:
        """The report's path once written; fails with the child's words and the command that rebuilds it."""
        fix = f"rebuild it with `opbyop report --run {self.run_id} --out {self.out}`"
        try:
            _, stderr = self._proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
            raise OpbyopError(f"the report of run {self.run_id} was not written within {self.timeout:.0f} s",
                              fix) from None
        if self._proc.returncode != 0:
            words = stderr.strip().splitlines()[-1:] or [f"exit code {self._proc.returncode}"]
            raise OpbyopError(f"the report of run {self.run_id} could not be written: {words[0]}", fix)
        return self.out


def write_report_apart(root: StoreRoot, run_id: str, out: Path, timeout: float = APART_TIMEOUT_S) -> Path:
    """write_report in a process of its own (ReportApart), waited for."""
    return ReportApart(root, run_id, out, timeout).finish()


if __name__ == "__main__":
    store_root, run, target = sys.argv[1:]
    try:
        write_report(store_root, run, Path(target))
    except OpbyopError as e:  # said on one line: write_report_apart passes on the last one
        sys.exit(e.problem)
