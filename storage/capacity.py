"""A capacity plan from a stored run's own timings: what the run would take on W workers.

The run's measured times become the tasks of opbyop.run.capacity's plan:
- a model's export: the run's own time to have it split into ops (`export <model> (beside)` on the
  run's time line: load, export, split); a run without a time line: models.export_s (nothing for an
  export it reused). One at a time per export place, from the run's start;
- a model's split into the run (dedupe, upstream values), on the run's own thread: the run's `split`
  step shared among its models by their ops;
- an op: its result's ended_at - started_at, with the verbose re-compile that named its failed pass and
  its pass-timing compile, plus the run's own cost of handing an op out (the median gap between an
  op's end and the next op's start on a worker); a reused result costs nothing: it is not analysed;
- a whole model: whole_s (nothing when reused).
An op waits for the split of the first model (in the run's order) that brings it, a whole model for
its own model's. The rest of the run's time line is kept as it was measured, at any worker count:
its start-up (the steps before it first waited for a model: no worker starts earlier) and the steps
that are not export, split or fan-out (warm-up, store, report ...). The exports start at the end of
a CLI run's `imports` step (the command asks for its models once it has read its command line,
within that step, while its server and cluster start), at the end of the start-up in any other run
(the flow asks for them then).

The measured wall is the time line's total (else ended_at - started_at), the workers the run's
configured count (else the Dask workers that ran its ops).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from opbyop.errors import StoreError
from opbyop.frontends.specs import recorded_name
from opbyop.run.capacity import EXPORT, SPLIT, PlannedRun, RunWork, Task, plan_run
from opbyop_storage.location import StoreRoot
from opbyop_storage.readonly import StoreConnection

# The run's time line (opbyop_flows.engine.phases, which storage may not import; a test keeps these
# in step): what ran beside it ends with BESIDE, a model's export is `export <spec>` beside it.
BESIDE = " (beside)"
TOTAL = "total"
WAIT_FOR_MODEL = "export"  # the step of waiting for the next model: the start-up is what comes before it
SCHEDULED_STEPS = ("export", "split", "fan-out")  # the steps the plan's tasks take the place of
SPLIT_STEP = "split"
CLI_START = "imports"  # a CLI run's first step: it asks for its models within it

_LATEST_SQL = "SELECT run_id FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 1"
_RUN_SQL = """
SELECT run_id, status, models, phases, config, epoch(ended_at) - epoch(started_at) AS span_s
FROM runs WHERE run_id = $run_id
"""
_MODELS_SQL = """
SELECT model, ops_total, export_s, coalesce({export_reused}, false) AS export_reused, whole_s,
       {whole_reused_from} AS whole_reused_from
FROM models WHERE run_id = $run_id ORDER BY model
"""
NEWER_MODEL_COLUMNS = ("export_reused", "whole_reused_from")  # a store of older files has none (null)
_FIRST_SQL = """
SELECT signature, model, min(position) AS position
FROM ops WHERE run_id = $run_id AND signature <> '' GROUP BY signature, model
"""
_RESULTS_SQL = """
SELECT signature, reused_from IS NOT NULL AS reused, worker,
       epoch(ended_at) - epoch(started_at) + coalesce(failed_pass_s, 0) + coalesce(pass_timing_compile_s, 0) AS seconds
FROM results WHERE run_id = $run_id ORDER BY signature
"""
_HANDING_OUT_SQL = """
WITH gaps AS (
    SELECT epoch(started_at) - epoch(lag(ended_at) OVER (PARTITION BY worker ORDER BY started_at)) AS gap
    FROM results WHERE run_id = $run_id AND reused_from IS NULL AND worker IS NOT NULL
)
SELECT coalesce(median(gap), 0) FROM gaps WHERE gap >= 0
"""


@dataclass(frozen=True)
class RunTimings:
    """What a run measured, as a plan's work."""

    run_id: str
    status: str
    work: RunWork
    measured_wall: float | None
    wall_from: str  # where the measured wall comes from
    workers: int | None  # as the run recorded them
    workers_from: str
    exports: int
    ops: int  # analysed (planned)
    reused: int  # results reused from earlier runs: not planned
    wholes: int
    handing_out: float  # seconds per op added for handing it out


@dataclass(frozen=True)
class CapacityPlan:
    timings: RunTimings
    plans: list[PlannedRun]  # one per worker count asked, and the measured one
    measured_workers: int | None  # the count the check is for
    measured_workers_from: str
    export_places: int | None  # None: one per worker on workers, else one
    exports_on_workers: bool

    def at(self, workers: int) -> PlannedRun:
        return next(p for p in self.plans if p.workers == workers)

    def against_measured(self, planned: PlannedRun) -> float | None:
        """A plan's wall against the run's measured wall, in percent (None: the run measured none)."""
        wall = self.timings.measured_wall
        return 100.0 * (planned.wall - wall) / wall if wall else None

    @property
    def check(self) -> float | None:
        """The plan at the measured worker count against the measured wall, in percent (None: no check)."""
        return None if self.measured_workers is None else self.against_measured(self.at(self.measured_workers))


def latest_run(con: StoreConnection) -> str:
    rows = con.query(_LATEST_SQL).rows
    if not rows:
        raise StoreError(f"the store at {con.root} holds no run",
                         "analyse something first (`opbyop analyze MODEL`), or pass --store / set OPBYOP_STORE")
    return rows[0][0]


def run_timings(con: StoreConnection, run_id: str) -> RunTimings:
    """The run's measured times as a plan's work (the module's docstring says which)."""
    found = con.query(_RUN_SQL, {"run_id": run_id}).records()
    if not found:
        raise StoreError(f"run {run_id!r} is not in the store at {con.root}",
                         "list the runs with `opbyop runs`, or pass --store / set OPBYOP_STORE")
    run = found[0]
    phases = {p["phase"]: p["seconds"] for p in run["phases"] or []}
    have = set(con.query("SELECT * FROM models LIMIT 0").columns)
    models = con.query(_MODELS_SQL.format(**{c: c if c in have else "NULL" for c in NEWER_MODEL_COLUMNS}),
                       {"run_id": run_id}).records()
    results = con.query(_RESULTS_SQL, {"run_id": run_id}).records()
    handing_out = con.query(_HANDING_OUT_SQL, {"run_id": run_id}).rows[0][0]
    order = _model_order(run["models"] or [], [m["model"] for m in models])
    first = _first_models(con.query(_FIRST_SQL, {"run_id": run_id}).rows, order)
    analysed = [r for r in results if not r["reused"]]
    tasks = [*_model_tasks(models, order, phases), *_op_tasks(analysed, first, handing_out)]
    start_up, fixed = _outside_the_work(phases)
    exports_from = min(phases[CLI_START], start_up) if CLI_START in phases else start_up
    workers, workers_from = _recorded_workers(run["config"], analysed)
    wall, wall_from = ((phases[TOTAL], "its time line's total") if phases.get(TOTAL)
                       else (run["span_s"], "its started_at to ended_at"))
    work = RunWork(tuple(_in_run_order(tasks, order, first)), start_up, fixed, exports_from)
    return RunTimings(run_id=run_id, status=run["status"], work=work,
                      measured_wall=wall, wall_from=wall_from, workers=workers, workers_from=workers_from,
                      exports=len(models), ops=len(analysed), reused=len(results) - len(analysed),
                      wholes=sum(1 for t in tasks if t.name.startswith("whole ")), handing_out=handing_out)


def capacity_plan(root: StoreRoot, run_id: str | None, workers: Sequence[int], export_places: int | None = None,
                  exports_on_workers: bool = True, measured_workers: int | None = None) -> CapacityPlan:
    """The run (default: the latest in the store) planned on each of `workers` (and on the count it
    ran with, for the check). Exports are cluster work as a run makes them (`exports_on_workers`), at
    most `export_places` at once (default: one per worker, each worker's export resource); beside the
    workers, as a run whose cluster takes no exports makes them, one at a time by default.
    `measured_workers`: the count the run ran with, as the user states it."""
    with StoreConnection(root) as con:
        timings = run_timings(con, run_id or latest_run(con))
    measured, measured_from = ((measured_workers, "as stated (--measured-workers)") if measured_workers
                               else (timings.workers, timings.workers_from))
    counts = list(dict.fromkeys([*workers, *([measured] if measured else [])]))
    places = {w: export_places or (w if exports_on_workers else 1) for w in counts}
    plans = [plan_run(timings.work, w, places[w], exports_on_workers) for w in counts]
    return CapacityPlan(timings, plans, measured, measured_from, export_places, exports_on_workers)


def _model_order(specs: list[str], stored: list[str]) -> list[str]:
    """The run's models in the order it took them (its specs, as recorded), then any other it stored."""
    named = [recorded_name(s) for s in specs]
    return list(dict.fromkeys([*(m for m in named if m in stored), *stored]))


def _first_models(rows: list[tuple[str, str, int]], order: list[str]) -> dict[str, tuple[int, int, str]]:
    """Each signature's first occurrence in the run's order: (model's rank, position, model)."""
    rank = {m: i for i, m in enumerate(order)}
    first: dict[str, tuple[int, int, str]] = {}
    for signature, model, position in rows:
        seen = (rank.get(model, len(order)), position, model)
        if signature not in first or seen < first[signature]:
            first[signature] = seen
    return first


def _model_tasks(models: list[dict[str, Any]], order: list[str], phases: dict[str, float]) -> list[Task]:
    """Each model's export, its split into the run, and its whole model, as the run measured them."""
    exported = {recorded_name(name.removeprefix("export ").removesuffix(BESIDE)): seconds
                for name, seconds in phases.items() if name.startswith("export ") and name.endswith(BESIDE)}
    by_name = {m["model"]: m for m in models}
    ops_total = sum(m["ops_total"] or 0 for m in models)
    split = phases.get(SPLIT_STEP, 0.0)
    tasks = []
    for name in order:
        m = by_name[name]
        export = exported.get(name, 0.0 if m["export_reused"] else m["export_s"] or 0.0)
        tasks.append(Task(f"{EXPORT} {name}", export, place=EXPORT))
        share = split * (m["ops_total"] or 0) / ops_total if ops_total else 0.0
        tasks.append(Task(f"{SPLIT} {name}", share, (f"{EXPORT} {name}",), place=SPLIT))
        if m["whole_s"] and not m["whole_reused_from"]:
            tasks.append(Task(f"whole {name}", m["whole_s"], (f"{SPLIT} {name}",)))
    return tasks


def _op_tasks(analysed: list[dict[str, Any]], first: dict[str, tuple[int, int, str]],
              handing_out: float) -> list[Task]:
    """Each analysed op, after the split of the first model that brings it."""
    tasks = []
    for r in analysed:
        model = first[r["signature"]][2] if r["signature"] in first else None
        tasks.append(Task(f"op {r['signature']}", r["seconds"] + handing_out, (f"{SPLIT} {model}",) if model else ()))
    return tasks


def _in_run_order(tasks: list[Task], order: list[str], first: dict[str, tuple[int, int, str]]) -> list[Task]:
    """Exports and splits in model order, then each model's whole model and its ops by position: the
    order the run hands them out (a model's whole model first)."""
    def key(t: Task) -> tuple[int, int, int]:
        kind, _, name = t.name.partition(" ")
        if kind in (EXPORT, SPLIT):
            return (0, order.index(name), 0)
        if kind == "whole":
            return (1, order.index(name), -1)
        rank, position, _ = first.get(name, (len(order), 0, ""))
        return (1, rank, position)
    return sorted(tasks, key=key)


def _outside_the_work(phases: dict[str, float]) -> tuple[float, float]:
    """(start-up, fixed): the time line's steps before its first wait for a model, and the other
    steps that are not the work the plan schedules."""
    steps = [(name, s) for name, s in phases.items() if not name.endswith(BESIDE) and name != TOTAL]
    names = [name for name, _ in steps]
    before = names.index(WAIT_FOR_MODEL) if WAIT_FOR_MODEL in names else 0
    start_up = sum(s for _, s in steps[:before])
    fixed = sum(s for name, s in steps[before:] if name not in SCHEDULED_STEPS)
    return start_up, fixed


def _recorded_workers(config: str | None, analysed: list[dict[str, Any]]) -> tuple[int | None, str]:
    """The workers the run asked for (its configuration), else the Dask workers that ran its ops."""
    try:
        asked = (json.loads(config or "{}").get("cluster") or {}).get("workers")
    except (ValueError, AttributeError):
        asked = None
    if asked:
        return int(asked), "configured"
    seen = {r["worker"] for r in analysed if r["worker"]}
    return (len(seen), "the Dask workers that ran its ops") if seen else (None, "not recorded")
