"""The failing pass of a failed compile, and each pass's time: the op compiled again in a side child.

The plugin reads TTXLA_LOGGER_LEVEL once, when it loads, and verbose IR printing makes every compile
slow and single-threaded: so only failed ops are compiled again, in a second child process of the
same worker that was started with verbose printing on. It starts with the first failed compile (a
start costs seconds once; started with the first op instead, it held 0.3-0.4 GB through every run,
most of which never fail), is bounded by the op's time limit like any compile, and when an op kills
or hangs it, its successor starts in the background while the next ops run. Pass timing
(TTXLA_MLIR_PASS_TIMING, which verbose printing disables) gets a child of its own, started in the
background with the worker's first op, for the ops asked for.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

from opbyop.artifacts import ArtifactStore
from opbyop.atomic import write_text
from opbyop.compiler.pass_timing import pass_timing
from opbyop.compiler.passes import find_failed_pass
from opbyop.config import AnalysisSettings
from opbyop.records import FailedPass, OpResult, PassOutcome, PassTiming, Stage, Status, UniqueOp

VERBOSE_ENV = {"TTXLA_LOGGER_LEVEL": "VERBOSE"}
TIMING_ENV = {"TTXLA_MLIR_PASS_TIMING": "1"}
# The statuses whose compile stopped in the compiler, with how the original compile ended.
PASS_STATUSES = {Status.COMPILE_FAILED: PassOutcome.FAILED, Status.CRASHED: PassOutcome.DIED,
                 Status.TIMEOUT: PassOutcome.HUNG}
# Builds the side child's worker: opbyop.worker.process passes its OpWorker in (it imports this module).
Spawn = Callable[..., Any]
_LOG_LIMIT = 64 << 20  # the verbose log is emptied past this size: only the last compile's part is read


def wants_failed_pass(result: OpResult) -> bool:
    """A compile that stopped in the compiler (not a device, golden or opbyop failure)."""
    return result.status in PASS_STATUSES and result.failed_stage is not None and result.failed_stage.rank <= Stage.FLATBUFFER.rank


class SideChild:
    """A second compile child of a worker, started with its own environment (the plugin reads it only
    at load), whose log is read compile by compile. Started in the background (warm), replaced in
    the background when an op kills or hangs it."""

    def __init__(self, spawn: Spawn, system_desc: Path, workspace: Path, chip: str, name: str, env: dict[str, str]):
        self.worker = spawn(system_desc, workspace, chip=chip, name=name, env=env)
        self._lock = threading.Lock()  # the log offset and the request belong together
        self._starting: threading.Thread | None = None  # starts the child while other ops run

    def compile(self, op: UniqueOp, settings: AnalysisSettings, timeout: float, tag: str = "") -> tuple[OpResult, str, float]:
        """(the compile's result, what the child printed meanwhile, its wall seconds); raises when the
        child cannot start."""
        compile_only = settings.model_copy(update={"run_device": False, "run_golden": False, "failed_pass": False,
                                                     "pass_timing": 0.0})
        with self._lock:
            if self._starting is not None:
                self._starting.join()
                self._starting = None
            log = self.worker.log_path
            if log.exists() and log.stat().st_size > _LOG_LIMIT:
                log.write_bytes(b"")  # the child appends (O_APPEND): it goes on at the new end
            offset = log.stat().st_size if log.exists() else 0
            started = time.perf_counter()
            result = self.worker.analyze(op, compile_only, timeout, tag)
            seconds = time.perf_counter() - started
            text = _read_from(log, offset)
            if self.worker.pid is None:  # the op killed or hung it: its successor starts while other ops run
                self._start_in_background()
        return result, text, seconds

    def warm(self) -> None:
        """Start the child in the background (the first op that needs it then finds it ready)."""
        with self._lock:
            if self._starting is None and self.worker.pid is None:
                self._start_in_background()

    def _start_in_background(self) -> None:
        self._starting = threading.Thread(target=self._start_quietly, name=f"{self.worker.name}-start", daemon=True)
        self._starting.start()

    def _start_quietly(self) -> None:
        try:
            self.worker.start()
        except Exception:  # compile() starts it again in the foreground and reports why it cannot
            pass

    def abort(self, tag: str) -> bool:
        return self.worker.abort(tag)

    def close(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        self.worker.close()


class PassFinder(SideChild):
    """A worker's verbose compile child."""

    def __init__(self, spawn: Spawn, system_desc: Path, workspace: Path, chip: str, name: str,
                 env: dict[str, str] | None = None):
        super().__init__(spawn, system_desc, workspace, chip, f"{name}-verbose", {**(env or {}), **VERBOSE_ENV})
        self.artifacts = ArtifactStore(Path(workspace) / "artifacts")

    def find(self, op: UniqueOp, settings: AnalysisSettings, timeout: float, tag: str = "",
             keep_log: Path | None = None) -> FailedPass:
        """Compile `op` again with IR printing on and name the pass it stops in (`keep_log`: where to
        write that compile's verbose log)."""
        started = time.perf_counter()
        try:
            result, text, seconds = self.compile(op, settings, timeout, tag)
        except Exception as e:  # the verbose child could not start: say so on the op, lose nothing
            return FailedPass(outcome=PassOutcome.NONE, seconds=time.perf_counter() - started,
                              reason=f"the verbose compile child could not run: {type(e).__name__}: {e}")
        if keep_log is not None:
            write_text(keep_log, text)
        ended = PASS_STATUSES.get(result.status, PassOutcome.NONE)
        trace = find_failed_pass(text, ended)
        found = trace.failed_pass.model_copy(update={"seconds": seconds})
        if trace.ir_before is not None:
            found.ir_before = self.artifacts.put(trace.ir_before.encode(), ".mlir")
        if found.outcome is PassOutcome.NONE and ended is not PassOutcome.NONE and result.message:
            found.reason = f"{found.reason}: {result.message[:300]}"
        return found


class PassTimer(SideChild):
    """A worker's pass-timing compile child (TTXLA_MLIR_PASS_TIMING=1: MLIR's timing reports)."""

    def __init__(self, spawn: Spawn, system_desc: Path, workspace: Path, chip: str, name: str,
                 env: dict[str, str] | None = None):
        super().__init__(spawn, system_desc, workspace, chip, f"{name}-timing", {**(env or {}), **TIMING_ENV})

    def time(self, op: UniqueOp, settings: AnalysisSettings, timeout: float, tag: str = "") -> PassTiming | None:
        """Each pass's time in a compile of `op`; None when the compile printed no report (it
        crashed or hung before its pass managers reported)."""
        try:
            _, text, seconds = self.compile(op, settings, timeout, tag)
        except Exception:  # no timing child: the op's own result stands, untimed
            return None
        return pass_timing(text, seconds)


def timed_by_sample(signature: str, share: float) -> bool:
    """Whether an op is in the timed sample: `share` of all ops, chosen by signature (the same ops
    every night, so nights compare)."""
    return share >= 1.0 or (share > 0.0 and int(signature[:8] or "0", 16) / 0x100000000 < share)


def _read_from(path: Path, offset: int) -> str:
    if not path.exists():
        return ""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")
