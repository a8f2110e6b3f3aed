"""`opbyop capacity`: a run's exports, ops and whole models list-scheduled on W workers from its own
timings; the scheduler on hand-made tasks, the store's timings on a hand-made run, the command on a
real small run."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from store_samples import ADD, CONV, DOT, TANH, record, result, run_info, summary

from core_fixtures import DATA
from opbyop.errors import OpbyopError
from opbyop.records import Stage, Status, WholeModelResult
from opbyop.run.capacity import EXPORT, SPLIT, PlanError, RunWork, Task, plan, plan_run
from opbyop_flows.engine import phases as time_line
from opbyop_storage import capacity as stored
from opbyop_storage.capacity import capacity_plan
from opbyop_storage.dataset import Store

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- the scheduler


def test_two_workers_run_a_known_chain_in_the_exact_wall_time():
    tasks = [Task("export", 2.0, place=EXPORT), Task("a", 3.0, ("export",)), Task("b", 3.0, ("export",)),
             Task("c", 1.0, ("export",)), Task("d", 1.0, ("a",))]
    planned = plan(tasks, 2, {EXPORT: 1})
    # a and b from 2 to 5 on the two workers; c from 5 to 6, d (after a) from 5 to 6
    assert planned.wall == 6.0
    starts = {p.task.name: (p.start, p.worker) for p in planned.placed}
    assert starts == {"export": (0.0, None), "a": (2.0, 0), "b": (2.0, 1), "c": (5.0, 0), "d": (5.0, 1)}
    assert planned.busy() == pytest.approx(8.0 / (4.0 * 2))


def test_a_free_worker_takes_the_task_ready_first_then_the_run_order_not_the_longest():
    tasks = [Task("short", 1.0), Task("long", 5.0), Task("later", 9.0, not_before=0.5)]
    planned = plan(tasks, 1)
    assert [p.task.name for p in sorted(planned.placed, key=lambda p: p.start)] == ["short", "long", "later"]
    assert planned.wall == 15.0


def test_one_export_place_serialises_the_exports_and_more_places_overlap_them():
    exports = [Task(f"export {m}", 2.0, place=EXPORT) for m in "abc"]
    ops = [Task(f"op {m}", 1.0, (f"export {m}",)) for m in "abc"]
    one = plan([*exports, *ops], 8, {EXPORT: 1})
    assert [one.last_end(EXPORT), one.wall] == [6.0, 7.0]
    assert sorted(p.end for p in one.placed if p.task.place == EXPORT) == [2.0, 4.0, 6.0]
    three = plan([*exports, *ops], 8, {EXPORT: 3})
    assert [three.last_end(EXPORT), three.wall] == [2.0, 3.0]


def test_an_export_on_the_workers_takes_a_worker_and_beside_them_it_does_not():
    tasks = [Task("export", 2.0, place=EXPORT), Task("op", 2.0)]
    assert plan(tasks, 1, {EXPORT: 1}).wall == 2.0
    assert plan(tasks, 1, {EXPORT: 1}, on_workers={EXPORT}).wall == 4.0


def run_shaped(seed: int) -> RunWork:
    """A random run: models exported and split one after another, each with a whole model and ops,
    some ops brought by an earlier model."""
    rng = random.Random(seed)
    tasks: list[Task] = []
    for m in range(rng.randint(1, 6)):
        tasks.append(Task(f"{EXPORT} {m}", rng.uniform(0, 5), place=EXPORT))
        tasks.append(Task(f"{SPLIT} {m}", rng.uniform(0, 0.5), (f"{EXPORT} {m}",), place=SPLIT))
        tasks.append(Task(f"whole {m}", rng.uniform(0, 10), (f"{SPLIT} {m}",)))
        tasks += [Task(f"op {m}.{i}", rng.expovariate(2.0), (f"{SPLIT} {m}",)) for i in range(rng.randint(0, 60))]
    return RunWork(tuple(tasks), start_up=rng.uniform(0, 3), fixed=rng.uniform(0, 3))


@pytest.mark.parametrize("seed", range(12))
def test_more_workers_are_never_slower(seed):
    work = run_shaped(seed)
    walls = [plan_run(work, w).wall for w in range(1, 40)]
    assert all(later <= earlier + 1e-9 for earlier, later in zip(walls, walls[1:])), walls
    busy = sum(t.seconds for t in work.tasks if t.place is None)
    assert walls[0] >= work.start_up + busy + work.fixed - 1e-9  # one worker: everything, after the start-up


def test_the_start_up_holds_back_the_workers_and_not_the_exports_beside_them():
    work = RunWork((Task(f"{EXPORT} m", 4.0, place=EXPORT), Task(f"{SPLIT} m", 0.0, (f"{EXPORT} m",), place=SPLIT),
                    Task("op", 1.0, (f"{SPLIT} m",)), Task("whole", 1.0)), start_up=3.0, fixed=2.0)
    beside = plan_run(work, 2)
    assert beside.plan.wall == 5.0 and beside.wall == 7.0  # the export ran during the start-up
    on_workers = plan_run(work, 2, exports_on_workers=True)
    assert on_workers.plan.wall == 8.0  # the export waits for the workers, then the op for the export


def test_tasks_that_cannot_be_planned_are_refused_with_the_reason():
    with pytest.raises(PlanError, match="'b', which is not a task"):
        plan([Task("a", 1.0, ("b",))], 1)
    with pytest.raises(PlanError, match="cycle"):
        plan([Task("a", 1.0, ("b",)), Task("b", 1.0, ("a",))], 1)
    with pytest.raises(PlanError, match="kind 'export'"):
        plan([Task("a", 1.0, place=EXPORT)], 1)


# ----------------------------------------------------------------------------- the store's timings

T0 = datetime(2026, 11, 5, 2, 0, tzinfo=timezone.utc)


def timed(op, start_s: float, seconds: float, worker: str, reused_from: str | None = None):
    r = result(op, Status.SUCCESS, started_at=T0 + timedelta(seconds=start_s), worker=worker, reused_from=reused_from)
    return r.model_copy(update={"ended_at": r.started_at + timedelta(seconds=seconds), "pass_timing": None})


@pytest.fixture
def small_run(store_root: Path) -> Store:
    """Run `r`: model a brings add and dot, model b dot, tanh and conv (conv's result reused from an
    earlier run); each op back to back on its worker; its time line as a CLI run records it."""
    ops = [record("a", 0, ADD), record("a", 1, DOT), record("b", 0, DOT), record("b", 1, TANH), record("b", 2, CONV)]
    results = [timed(ADD, 0, 1.0, "w0"), timed(DOT, 0, 2.0, "w1"), timed(TANH, 1, 1.0, "w0"),
               timed(CONV, 0, 30.0, "w9", reused_from="earlier")]
    whole = WholeModelResult(status=Status.SUCCESS, depth=Stage.GOLDEN, seconds=1.0)
    models = [summary("a", ops, whole=whole), summary("b", ops)]
    phases = {"imports": 0.5, "server": 2.5, "export": 1.0, "split": 0.4, "fan-out": 2.0, "report": 1.0, "total": 7.4,
              "export a (beside)": 2.0, "export b (beside)": 1.0, "ops (beside)": 3.0}
    run = run_info("r", T0, ["a", "b"]).model_copy(update={"phases": phases})
    store = Store(store_root)
    store.write_run(run, ops, results, models)
    return store


def test_a_runs_timings_become_tasks_that_wait_for_the_model_that_first_brings_them(small_run, store_root):
    found = capacity_plan(store_root, "r", [1, 2, 8])
    t = found.timings
    tasks = {task.name: task for task in t.work.tasks}
    assert tasks[f"{EXPORT} a"].seconds == 2.0 and tasks[f"{EXPORT} b"].seconds == 1.0  # the run's own, not export_s
    assert tasks[f"{SPLIT} a"].seconds == pytest.approx(0.4 * 2 / 5)  # the split step, shared by op count
    assert tasks[f"op {DOT.signature}"].after == (f"{SPLIT} a",)  # dot is a's before it is b's
    assert tasks[f"op {TANH.signature}"].after == (f"{SPLIT} b",)
    assert tasks["whole a"].seconds == 1.0 and "whole b" not in tasks
    assert f"op {CONV.signature}" not in tasks and (t.ops, t.reused) == (3, 1)  # a reused result costs nothing
    assert (t.work.start_up, t.work.exports_from, t.work.fixed, t.handing_out) == (3.0, 0.5, 1.0, 0.0)
    assert (t.measured_wall, t.workers, t.workers_from) == (7.4, 2, "the Dask workers that ran its ops")


def test_the_plan_of_a_stored_run_adds_its_start_up_and_fixed_steps_and_checks_the_measured_wall(small_run,
                                                                                                 store_root):
    found = capacity_plan(store_root, "r", [1, 2, 8], exports_on_workers=False)
    # exports beside the workers from 0.5 s (after the command's imports), workers from 3 s (the start-up): 1 worker runs
    # whole a, add, dot, tanh one after another to 8 s;
    # 2 workers to 6 s; 8 workers to 5 s (dot, 2 s from 3 s); plus the 1 s report
    assert [round(found.at(w).wall, 6) for w in (1, 2, 8)] == [9.0, 7.0, 6.0]
    assert found.measured_workers == 2 and found.check == pytest.approx(100 * (7.0 - 7.4) / 7.4)
    stated = capacity_plan(store_root, "r", [8], exports_on_workers=False, measured_workers=1)
    assert [p.workers for p in stated.plans] == [8, 1] and stated.check == pytest.approx(100 * (9.0 - 7.4) / 7.4)


def test_by_default_the_exports_are_planned_as_a_run_makes_them_on_its_workers_one_per_worker(small_run, store_root):
    found = capacity_plan(store_root, "r", [1, 2, 8])
    assert found.exports_on_workers
    for w in (1, 2, 8):
        assert found.at(w).wall == plan_run(found.timings.work, w, w, exports_on_workers=True).wall
    # on one worker the exports wait for the start-up and take the worker: later than beside it
    assert found.at(1).wall > capacity_plan(store_root, "r", [1], exports_on_workers=False).at(1).wall


def test_the_default_run_is_the_latest_and_an_unknown_run_is_named_with_the_fix(small_run, store_root):
    assert capacity_plan(store_root, None, [2]).timings.run_id == "r"
    with pytest.raises(OpbyopError, match="'nope' is not in the store") as raised:
        capacity_plan(store_root, "nope", [2])
    assert "opbyop runs" in raised.value.fix


def test_the_time_line_names_the_store_reads_are_the_flows_own():
    assert stored.BESIDE == time_line.BESIDE
    assert {stored.TOTAL, stored.WAIT_FOR_MODEL, stored.SPLIT_STEP, stored.CLI_START,
            *stored.SCHEDULED_STEPS} <= set(time_line.ORDER)


# ----------------------------------------------------------------------------- the command, for real


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> dict[str, str]:
    """A real `opbyop analyze` of two small StableHLO files on 2 workers, in a workspace of its own."""
    tmp = tmp_path_factory.mktemp("capacity")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "OPBYOP_", "JAX_"))}
    env.update({"PREFECT_HOME": str(tmp / "prefect"), "OPBYOP_HOME": str(tmp / "home"), "PYTHONPATH": str(ROOT),
                "COLUMNS": "200", "NO_COLOR": "1"})
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "analyze", str(DATA / "tanh_matmul_chain.mlir"),
                           str(DATA / "arith_constant.mlir"), "--workers", "2", "--run-id", "small"],
                          env=env, cwd=tmp, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return env


def capacity(env: dict[str, str], *args: str, expect: int = 0) -> str:
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "capacity", *args], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == expect, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.mark.slow
def test_capacity_plans_a_real_run_on_more_workers_and_checks_it_at_its_own(analysed):
    out = capacity(analysed, "--workers", "1", "2", "8")
    assert "run small (completed)" in out and "on 2 workers (configured)" in out
    assert "check: planned" in out and "on 2 workers against the measured" in out
    rows = json.loads(capacity(analysed, "--run", "small", "--workers", "1", "2", "8", "--format", "json"))
    assert [r["workers"] for r in rows] == [1, 2, 8] and [r["ran_with"] for r in rows] == [False, True, False]
    walls = [r["planned_s"] for r in rows]
    assert walls[0] >= walls[1] >= walls[2] > 0
    assert abs(rows[1]["vs_measured_pct"]) < 50, rows  # the plan replays the run (the figure is in benchmarks/)


@pytest.mark.slow
def test_capacity_of_a_run_that_is_not_there_names_it_and_the_command_that_lists_them(analysed):
    out = capacity(analysed, "--run", "nightly-1999", expect=2)
    assert "run 'nightly-1999' is not in the store" in out and "opbyop runs" in out
