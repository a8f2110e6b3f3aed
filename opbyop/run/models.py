"""A run's models, split one after another while the ops of those before them are analysed.

Exporting a model is the slow part of preparing it (minutes for a large one) and torch.export keeps
global state, so a caller's runs share one split thread (Splits) that exports and splits in the
order asked (exports of two threads take turns: frontends.torch_export); each model's outcome is a
future. The run engine takes the models in that order, and while it waits for the next one it
collects the results of the ops already handed out (Feed.arriving's `idle`): a model's ops fan out
as soon as it is split. A model asked twice (the targets of a nightly, the compiler builds of one
analyze) is split once; a caller may ask early, while its server and cluster start.

A model that must be exported (a framework's, with no fresh kept export) goes to the caller's
ExportPlace when it names one (the run's Dask cluster: flows/hosting/cluster_exports.py), where
several export at once, one per worker; its future is set when it lands. Everything else (a kept
export, a StableHLO file, a dump) is read and split here, in milliseconds. A place that cannot take
an export hands it back: it is exported here, and the model's notes say why.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Generator, Iterator, Protocol, Sequence

from opbyop.config import ExportBudget, Zoo, load_zoo
from opbyop.frontends.export_cache import ExportCache
from opbyop.frontends.loader import expand_specs, needs_export, warm_exports
from opbyop.graph import ModelGraph
from opbyop.ir.split import SplitResult
from opbyop.ir.split_cache import SplitCache
from opbyop.jaxenv import prepare_jax
from opbyop.pipeline import prepare_model

POLL_SECONDS = 0.5  # how often a run waiting for a model looks at its ops' results
# Models split and waiting for the runs that asked for them, at most: each holds its graph and its ops'
# modules, and kept splits are read faster than a run stores their ops (a second night's 318 models
# would all be held at once).
READ_AHEAD = 8
STOPPED = "not split: the run was stopped before this model"
HANDED_BACK = "exported in the run's own process: "  # how a model's notes begin why its place handed it back


@dataclass
class SplitOutcome:
    """One model loaded, exported and split (pipeline.prepare_model), or why it was not; with its wall time."""

    spec: str
    graph: ModelGraph | None
    split: SplitResult | None
    error: str | None
    seconds: float = 0.0


@dataclass(frozen=True)
class ModelAsk:
    """One model as a run asks for it: what preparing it (split_outcome) depends on."""

    spec: str
    zoo: Zoo
    seed: int
    budget: ExportBudget | None = None
    weights: bool = True
    reuse: bool = True
    host_devices: int | None = None  # the XLA:CPU devices of the process that splits it

    def prepared(self) -> SplitOutcome:
        """The model exported (or its kept export taken) and split in this process."""
        prepare_jax(host_devices=self.host_devices)  # before anything in this process imports JAX
        return split_outcome(self.spec, self.zoo, self.seed, self.budget, self.weights, Kept.machine(self.reuse))


class ExportPlace(Protocol):
    """Where a model that must be exported is exported and split, instead of the caller's process."""

    def prepare(self, ask: ModelAsk) -> Future:
        """The model's SplitOutcome to come. A future that fails with PlaceRefused (or any error of the
        place's own) hands the model back: it is prepared in the caller's process, and says why."""


class PlaceRefused(Exception):
    """An ExportPlace cannot take exports (its words say why, with the fix)."""


@dataclass
class _Work:
    """A model queued for the split thread: its key, future and where it may be exported."""

    key: SplitKey
    budget: ExportBudget | None
    future: Future
    zoo: Zoo
    place: ExportPlace | None
    handed_back: str | None = None  # why its place handed it back (it is prepared here)


_WAKE = object()  # on the split thread's queue: a model was handed back (the thread looks at those first)
Arriving = Generator[SplitOutcome, None, None]  # a feed's models; close() lets go of those not taken
SplitKey = tuple[str, int, bool, bool]  # (spec, seed, weights, reuse): one split of a model


@dataclass
class Kept:
    """Where a caller's models' exports and splits are kept (with `reuse` false: kept, never used)."""

    exports: ExportCache
    splits: SplitCache

    @classmethod
    def machine(cls, reuse: bool = True) -> Kept:
        return cls(ExportCache(reuse=reuse), SplitCache(reuse=reuse))


def split_outcome(spec: str, zoo: Zoo, seed: int, budget: ExportBudget | None = None,
                  weights: bool = True, kept: Kept | None = None) -> SplitOutcome:
    """pipeline.prepare_model, timed."""
    start = time.monotonic()
    kept = kept or Kept.machine()
    graph, split, error = prepare_model(spec, zoo, seed, budget, weights, kept.exports, kept.splits)
    return SplitOutcome(spec, graph, split, error, time.monotonic() - start)


class Feed(Protocol):
    """A run's models as they become ready."""

    def arriving(self, idle: Callable[[], None], stop: Callable[[], bool] = lambda: False) -> Arriving:
        """Each model in order; `idle()` is called every POLL_SECONDS while the next one is not ready,
        and the models end there once `stop()` is true."""


class Ready:
    """Models split already (a corpus's cases, a test's modules)."""

    def __init__(self, outcomes: Sequence[SplitOutcome]):
        self.outcomes = list(outcomes)

    def arriving(self, idle: Callable[[], None], stop: Callable[[], bool] = lambda: False) -> Arriving:
        yield from self.outcomes


class Arrivals:
    """Models asked of Splits: each one's future, in the order asked. Each outcome is let go of as it is
    taken (Splits.release): a run holds only the models it has not reached yet."""

    def __init__(self, futures: Sequence[tuple[str, SplitKey, Future]], splits: Splits | None = None):
        self.futures = deque(futures)
        self.splits = splits

    def arriving(self, idle: Callable[[], None], stop: Callable[[], bool] = lambda: False) -> Arriving:
        try:
            while self.futures:
                spec, key, future = self.futures[0]
                outcome = self._wait(spec, future, idle, stop)
                if outcome is None:
                    return
                self.futures.popleft()
                self._release(key)
                # Handed over without a reference left in this frame (the future's result is the
                # outcome too): a model's weights (4 GB for a 1 B-parameter one) are let go of as soon
                # as the run is done with them, not kept while the next model exports.
                del future
                handed = [outcome]
                del outcome
                yield handed.pop()
        finally:  # a run that ends early lets go of the models it did not take
            while self.futures:
                self._release(self.futures.popleft()[1])

    @staticmethod
    def _wait(spec: str, future: Future, idle: Callable[[], None], stop: Callable[[], bool]) -> SplitOutcome | None:
        """The model's outcome once it is split (None: stopped first)."""
        while not stop():
            try:
                return future.result(timeout=POLL_SECONDS)
            except FutureTimeout:
                idle()
            except Exception as e:  # the split thread's own failure: this model's error, the others go on
                return SplitOutcome(spec, None, None, f"{type(e).__name__}: {e}")
        return None

    def _release(self, key: SplitKey) -> None:
        if self.splits is not None:
            self.splits.release(key)


class Splits:
    """A caller's split thread: models split one after another in the order asked, each (spec, seed, weights)
    once. Once `stop` is set, or after close(), models not yet started are not split (an export can
    take minutes; nothing of it would be used).

    A model's outcome is kept until every run that asked for it has taken it (ask's claims), then let
    go of, so that a run of many models holds few of them; `prefetch` splits without a claim (a caller
    that starts the run later, which asks then), and within `kept()` nothing is let go of (the runs of
    a group or a nightly that ask, one after another, for the same models). The thread starts the next
    model only while fewer than `read_ahead` split models wait for runs that asked for them; a model
    handed back by its place goes first (a run may be waiting for it)."""

    def __init__(self, stop: threading.Event | None = None, read_ahead: int = READ_AHEAD):
        """`stop`: once set, the models not yet started are not split (the run's own stop request)."""
        self.futures: dict[SplitKey, Future] = {}
        self._work: queue.Queue[object] = queue.Queue()  # _Work as asked; None: closed; _WAKE: one handed back
        self._handed: deque[_Work] = deque()  # handed back by their place: prepared before any new work
        self._held: _Work | None = None  # the next model asked, waiting for room ahead of the runs
        self._read_ahead = read_ahead
        self._thread: threading.Thread | None = None
        self._host_devices: int | None = None
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # notified when a model is taken, asked or handed back
        self._cache_lock = threading.Lock()  # _kept() is called under _lock and from the split thread
        self._stopped = stop or threading.Event()
        self._closed = False
        self._claims: dict[SplitKey, int] = {}  # runs that asked and have not taken the model yet
        self._keeping = 0  # kept() blocks open
        self._caches: dict[bool, Kept] = {}  # reuse -> where exports and splits are kept (files digested once)

    def ask(self, specs: Sequence[str], seed: int, budget: ExportBudget | None = None,
            host_devices: int | None = None, zoo: Zoo | None = None, weights: bool = True,
            reuse: bool = True, place: ExportPlace | None = None) -> Arrivals:
        """The models of `specs` (a folder of IR dumps: each of its modules), split in this order
        after any asked before; those asked before with the same seed and not let go of are not split
        again. `host_devices`: the XLA:CPU devices of the process (pipeline values on a host mesh),
        fixed by the first ask; `zoo`: where zoo names are looked up (default: the configured zoo);
        `weights`: whether the graphs keep their weights' values (a run that stitches whole models;
        a model split with and without them is two splits); `reuse`: whether exports and splits
        kept from earlier runs are used (run.models.Kept); `place`: where the models that must be exported
        are (default: here)."""
        with self._lock:
            keys = self._queue(specs, seed, budget, host_devices, zoo, weights, reuse, place)
            for key in keys:
                self._claims[key] = self._claims.get(key, 0) + 1
            self._room.notify_all()
            return Arrivals([(key[0], key, self.futures[key]) for key in keys], self)

    def prefetch(self, specs: Sequence[str], seed: int, budget: ExportBudget | None = None,
                 host_devices: int | None = None, zoo: Zoo | None = None, weights: bool = True,
                 reuse: bool = True, place: ExportPlace | None = None) -> None:
        """Start splitting these models now, for a run that asks for them later (ask's arguments)."""
        with self._lock:
            self._queue(specs, seed, budget, host_devices, zoo, weights, reuse, place)

    def release(self, key: SplitKey) -> None:
        """One run took model `key`: let go of it when no other run waits for it (outside kept())."""
        with self._lock:
            self._claims[key] = self._claims.get(key, 1) - 1
            if self._claims[key] <= 0 and not self._keeping:
                self._claims.pop(key)
                self.futures.pop(key, None)
            self._room.notify_all()

    @contextmanager
    def kept(self) -> Iterator[None]:
        """Runs within this block that ask for the same models get them split once."""
        with self._lock:
            self._keeping += 1
        try:
            yield
        finally:
            with self._lock:
                self._keeping -= 1
                if not self._keeping:
                    for key in [k for k, n in self._claims.items() if n <= 0]:
                        self._claims.pop(key)
                        self.futures.pop(key, None)

    def _queue(self, specs: Sequence[str], seed: int, budget: ExportBudget | None, host_devices: int | None,
               zoo: Zoo | None, weights: bool, reuse: bool, place: ExportPlace | None) -> list[SplitKey]:
        """The keys of `specs`, the new ones queued for the split thread (under the lock)."""
        zoo = zoo or load_zoo()
        asked = [(spec, seed, weights, reuse) for spec in dict.fromkeys(expand_specs(specs))]
        new = [key for key in asked if key not in self.futures]
        if new and place is None:  # exported here: the export children warm up meanwhile
            warm_exports([key[0] for key in new], zoo, seed, self._kept(reuse).exports, weights)
        for key in new:
            future: Future = Future()
            self.futures[key] = future
            self._work.put(_Work(key, budget, future, zoo, place))
        if self._thread is None:
            self._host_devices = host_devices
            self._thread = threading.Thread(target=self._split, name="split", daemon=True)
            self._thread.start()
        return asked

    def _kept(self, reuse: bool) -> Kept:
        with self._cache_lock:
            if reuse not in self._caches:
                self._caches[reuse] = Kept.machine(reuse)
            return self._caches[reuse]

    def close(self) -> None:
        """No more splits: models not yet started are not split, and the thread ends (a service makes
        one Splits per request)."""
        self._closed = True  # not the caller's stop request: its other runs (a nightly's corpus) go on
        with self._room:
            self._room.notify_all()
        self._work.put(None)

    def waiting(self) -> int:
        """Split models that runs asked for and have not taken yet."""
        with self._lock:
            return self._waiting()

    def _waiting(self) -> int:
        return sum(1 for key, future in self.futures.items() if future.done() and self._claims.get(key, 0) > 0)

    def _split(self) -> None:
        prepare_jax(host_devices=self._host_devices)  # before anything in this process imports JAX
        while (next_work := self._next()) is not None:
            self._prepare(*next_work)

    def _next(self) -> tuple[_Work, bool] | None:
        """The next model to prepare, and whether it goes to its place (None: closed): one handed back
        first (prepared here); else the next one asked: at once if it goes to its place (the cluster's
        exports bound those), else once fewer than `read_ahead` split models wait for their runs (or
        the run stops: it is then let go of at once)."""
        while True:
            with self._room:
                if self._handed:
                    return self._handed.popleft(), False
                held = self._held
                if held is not None and (self._waiting() < self._read_ahead or self._stopped.is_set()
                                         or self._closed):
                    self._held = None
                    return held, False
                if held is not None:
                    self._room.wait(POLL_SECONDS)
                    continue
            work = self._work.get()
            if work is None:
                return None
            if isinstance(work, _Work):
                if self._goes_elsewhere(work):
                    return work, True
                self._held = work

    def _goes_elsewhere(self, work: _Work) -> bool:
        """Whether the model is exported at its place (it has one, and no fresh kept export)."""
        spec, seed, weights, reuse = work.key
        return work.place is not None and needs_export(spec, work.zoo, seed, self._kept(reuse).exports, weights)

    def _hand_back(self, work: _Work) -> None:
        """A model its place handed back, prepared here before any model not started yet."""
        with self._room:
            self._handed.append(work)
            self._room.notify_all()
        self._work.put(_WAKE)  # a thread waiting for new work looks at the handed-back ones

    def _prepare(self, work: _Work, elsewhere: bool) -> None:
        """One model split here, or sent to its place (`elsewhere`); its future set."""
        (spec, seed, weights, reuse), future = work.key, work.future
        if work.handed_back is None and not future.set_running_or_notify_cancel():
            return
        if self._stopped.is_set() or self._closed:
            future.set_result(SplitOutcome(spec, None, None, STOPPED))
            return
        if elsewhere:
            self._elsewhere(work)
            return
        try:
            outcome = split_outcome(spec, work.zoo, seed, work.budget, weights, self._kept(reuse))
            if work.handed_back and outcome.graph is not None:
                outcome.graph.notes.append(HANDED_BACK + work.handed_back)
            future.set_result(outcome)
        except BaseException as e:  # noqa: BLE001  (the run that waits for it reports it)
            future.set_exception(e)

    def _elsewhere(self, work: _Work) -> None:
        """The model exported and split at its place; handed back to this thread if the place cannot."""
        (spec, seed, weights, reuse) = work.key
        ask = ModelAsk(spec, work.zoo, seed, work.budget, weights, reuse, self._host_devices)

        def landed(remote: Future) -> None:
            try:
                work.future.set_result(remote.result())
            except BaseException as e:  # noqa: BLE001  (the place's failure, not the model's: prepared here)
                why = str(e) if isinstance(e, PlaceRefused) else f"its place failed ({type(e).__name__}: {e})"
                if self._closed:  # no thread left to take it
                    work.future.set_result(SplitOutcome(spec, None, None, STOPPED))
                else:
                    self._hand_back(_Work(work.key, work.budget, work.future, work.zoo, None, why))

        try:
            work.place.prepare(ask).add_done_callback(landed)
        except Exception as e:  # noqa: BLE001  (a place that cannot even take it: prepared here)
            self._hand_back(_Work(work.key, work.budget, work.future, work.zoo, None, f"{type(e).__name__}: {e}"))
