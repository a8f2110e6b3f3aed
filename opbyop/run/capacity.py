"""A run's work planned on W workers: list scheduling of its exports, ops and whole models.

The inputs are plain records (a task's seconds, what it waits for, where it runs, the earliest it may
start), so a plan can be made from any run's measured times (opbyop_storage.capacity reads them from
the store) or from hand-made tasks. Each worker runs one task at a time. A task may instead need a
place of a kind of its own, of which there are few: a run exports one model at a time in its split
thread (torch.export keeps global state) and adds each split model to the run in its own thread,
both beside the Dask workers. A kind named in `on_workers` takes a worker as well (exports run as
cluster work).

Which ready task a free worker takes: the one that became ready first, ties in the run's order
(exports in model order, a model's whole model before its ops, ops by position). That is the order
a run hands its work out (a model's ops go to the cluster as soon as it is split, its whole model
first, and the cluster runs them first come, first served), so the plan at the run's own worker
count replays the run, and a plan for more workers says what the same run would take there.
Longest-first would plan a run that opbyop does not carry out.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Collection, Mapping, Sequence


@dataclass(frozen=True)
class Task:
    """One piece of a run's work: `seconds` long, startable once every task of `after` has ended and
    not before `not_before` seconds from the plan's start; on a worker, or on a place of kind `place`."""

    name: str
    seconds: float
    after: tuple[str, ...] = ()
    place: str | None = None
    not_before: float = 0.0


@dataclass(frozen=True)
class Placed:
    """A task as planned: from when to when, on which worker and which place of its kind (or None)."""

    task: Task
    start: float
    end: float
    worker: int | None = None
    place: int | None = None


@dataclass(frozen=True)
class Plan:
    workers: int
    placed: tuple[Placed, ...] = field(default=())

    @property
    def wall(self) -> float:
        """Seconds from the plan's start to the last task's end."""
        return max((p.end for p in self.placed), default=0.0)

    def busy(self) -> float:
        """The share of the workers' time spent on tasks (0..1), from the first task on a worker to the
        plan's end (before it, the workers may not have started)."""
        on_workers = [p for p in self.placed if p.worker is not None]
        span = self.wall - min((p.start for p in on_workers), default=self.wall)
        return sum(p.end - p.start for p in on_workers) / (span * self.workers) if span > 0 else 0.0

    def last_end(self, place: str) -> float:
        """When the last task on a place of kind `place` ends (0 without any)."""
        return max((p.end for p in self.placed if p.task.place == place), default=0.0)


class PlanError(ValueError):
    """Tasks that cannot be planned: a name twice, a wait for a task that is not there, a place
    kind with no place, a cycle."""


def plan(tasks: Sequence[Task], workers: int, places: Mapping[str, int] | None = None,
         on_workers: Collection[str] = ()) -> Plan:
    """`tasks` (in the run's order) list-scheduled on `workers` workers and `places` (kind -> how
    many): whenever a worker or a place is free, it takes the ready task that became ready first
    (ties: the run's order). A task waiting for its kind of place never holds up the others."""
    places = dict(places or {})
    if workers < 1:
        raise PlanError(f"a plan needs at least one worker (got {workers})")
    index = {t.name: i for i, t in enumerate(tasks)}
    if len(index) != len(tasks):
        raise PlanError("two tasks have the same name")
    waits = [len(set(t.after)) for t in tasks]
    followers: list[list[int]] = [[] for _ in tasks]
    for i, t in enumerate(tasks):
        if t.place is not None and places.get(t.place, 0) < 1:
            raise PlanError(f"task {t.name!r} needs a place of kind {t.place!r} and the plan has none")
        for name in set(t.after):
            if name not in index:
                raise PlanError(f"task {t.name!r} waits for {name!r}, which is not a task")
            followers[index[name]].append(i)
    # ready tasks by (ready time, run order), one heap per kind of place (None: a worker's)
    ready: dict[str | None, list[tuple[float, int]]] = {kind: [] for kind in (None, *places)}

    def release(i: int, now: float) -> None:
        heapq.heappush(ready[tasks[i].place], (max(now, tasks[i].not_before), i))

    for i in range(len(tasks)):
        if not waits[i]:
            release(i, 0.0)
    free_workers = list(range(workers))  # heaps: the lowest-numbered free worker (place) first
    free_places = {kind: list(range(n)) for kind, n in places.items()}
    running: list[tuple[float, int, int | None, int | None]] = []  # (end, task, worker, place)
    now, placed = 0.0, []

    def startable(kind: str | None) -> bool:
        heap = ready[kind]
        if not heap or heap[0][0] > now:
            return False
        needs_worker = kind is None or kind in on_workers
        return (not needs_worker or bool(free_workers)) and (kind is None or bool(free_places[kind]))

    while True:
        while True:  # start everything that can start now
            kinds = [kind for kind in ready if startable(kind)]
            if not kinds:
                break
            kind = min(kinds, key=lambda k: ready[k][0])
            _, i = heapq.heappop(ready[kind])
            worker = heapq.heappop(free_workers) if kind is None or kind in on_workers else None
            place = heapq.heappop(free_places[kind]) if kind is not None else None
            end = now + max(0.0, tasks[i].seconds)
            placed.append(Placed(tasks[i], now, end, worker, place))
            heapq.heappush(running, (end, i, worker, place))
        upcoming = [heap[0][0] for heap in ready.values() if heap and heap[0][0] > now]
        if running:
            upcoming.append(running[0][0])
        if not upcoming:
            break  # done, or tasks left that can never start (a cycle, reported below)
        now = min(upcoming)
        while running and running[0][0] <= now:  # what ends now frees its worker, its place and its followers
            _, i, worker, place = heapq.heappop(running)
            if worker is not None:
                heapq.heappush(free_workers, worker)
            if place is not None:
                heapq.heappush(free_places[tasks[i].place], place)
            for j in followers[i]:
                waits[j] -= 1
                if not waits[j]:
                    release(j, now)
    if len(placed) != len(tasks):
        stuck = sorted({t.name for t in tasks} - {p.task.name for p in placed})
        raise PlanError(f"{len(stuck)} task(s) wait for each other in a cycle, e.g. {stuck[0]!r}")
    return Plan(workers, tuple(placed))


# The kinds of place of a run's work besides its workers (opbyop.run.models: the split thread
# exports; opbyop.run.engine: the run's own thread adds each split model before its ops go out).
EXPORT = "export"
SPLIT = "split"


@dataclass(frozen=True)
class RunWork:
    """A run's work as plain records: its tasks (exports on EXPORT places, each model's split into the
    run on a SPLIT place, ops and whole models on workers), and the run's time outside them."""

    tasks: tuple[Task, ...]
    start_up: float = 0.0  # before any worker can start: the command, its server and cluster, the flow
    fixed: float = 0.0  # the rest of the time no task accounts for (warm-up, store, report ...)
    exports_from: float = 0.0  # when the run starts exporting (a CLI run: while its server and cluster start)


@dataclass(frozen=True)
class PlannedRun:
    workers: int
    plan: Plan
    fixed: float

    @property
    def wall(self) -> float:
        """The run's planned wall time: its tasks' plan (from the run's start) and its fixed time."""
        return self.plan.wall + self.fixed


def plan_run(work: RunWork, workers: int, export_places: int = 1, exports_on_workers: bool = False) -> PlannedRun:
    """`work` planned on `workers` workers and `export_places` export places. Exports start when the
    run started exporting (`work.exports_from`), everything on a worker once the start-up is over;
    `exports_on_workers`: exports are cluster work, each on a worker too, so they start then as well."""
    def released(t: Task) -> Task:
        if t.place is None or (t.place == EXPORT and exports_on_workers):
            return Task(t.name, t.seconds, t.after, t.place, max(t.not_before, work.start_up))
        if t.place == EXPORT:
            return Task(t.name, t.seconds, t.after, t.place, max(t.not_before, work.exports_from))
        return t

    tasks = [released(t) for t in work.tasks]
    return PlannedRun(workers, plan(tasks, workers, {EXPORT: export_places, SPLIT: 1},
                                    on_workers={EXPORT} if exports_on_workers else ()), work.fixed)
