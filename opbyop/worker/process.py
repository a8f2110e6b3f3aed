"""OpWorker: one long-lived child process, replaced whenever an op kills or hangs it."""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from multiprocessing.connection import Connection
from pathlib import Path

from dataclasses import dataclass

from opbyop.compiler.assets import private_tmpdir, startup_lock
from opbyop.compiler.builds import Compiler, installed, unpack_assets
from opbyop.compiler.stages import failed_after, read_dumps
from opbyop.environment import environment_of
from opbyop.graph import ArgumentKind, ModelGraph
from opbyop.frontends.values import write_values as write
from opbyop.ir.rewrite import rewritten_text
from opbyop.analysis.steps import STEP_NAMED
from opbyop.op_memory import op_memory_message
from opbyop.records import FailedPass, OpResult, Stage, Status, UniqueOp, WholeModelResult, utcnow
from opbyop.worker.passes import PassFinder, PassTimer, timed_by_sample, wants_failed_pass
from opbyop.worker.protocol import (MESSAGE, AnalysisSettings, Failure, Progress, Ready, Reply, Request, WholeReply,
                                    WholeRequest)


class RunStopped(RuntimeError):
    """A request of a run that was stopped (abort) reached the worker after the stop: it is not run."""


class WorkerStartError(RuntimeError):
    pass


@dataclass(frozen=True)
class _Lost:
    """A request whose child process died or hung."""

    status: Status
    step: str
    what: str
    log_tail: str
    child_pid: int | None
    killed: bool = False  # by SIGKILL: what the kernel's out-of-memory killer sends

    @property
    def message(self) -> str:
        return self.what + (f"; last output: {self.log_tail}" if self.log_tail else "")


class OpWorker:
    """Analyse ops in a child process that keeps compiler, XLA:CPU and device warm.

    `analyze` always returns an OpResult: a child that dies becomes `crashed`, one that exceeds the
    time limit becomes `timeout`, both at the stage the child was in; the child is then replaced.
    `host_devices`: the child's XLA:CPU devices (a sharded op's golden runs on a host mesh as large
    as its target's); None: the child's OPBYOP_HOST_DEVICES. `compiler`: the build that compiles (its
    descriptor is `system_desc`); None: the plugin installed beside opbyop.
    """

    def __init__(self, system_desc: Path, workspace: Path, chip: str = "", name: str = "worker",
                 env: dict[str, str] | None = None, start_timeout: float = 600.0, host_devices: int | None = None,
                 compiler: Compiler | None = None):
        self.compiler = compiler or installed()  # the build that compiles (opbyop.compiler.builds)
        self.system_desc = Path(system_desc)
        self.workspace = Path(workspace)
        self.chip = chip or self.system_desc.stem
        self.name = name
        self.env = env
        self.start_timeout = start_timeout
        self.host_devices = host_devices
        self.log_path = self.workspace / "logs" / f"{name}.log"
        self._proc: subprocess.Popen | None = None
        self._to_child: Connection | None = None
        self._from_child: Connection | None = None
        self.ready: Ready | None = None
        self.restarts = 0
        self._lock = threading.Lock()  # one request at a time on the pipe, whatever the caller's threads
        self._tag = ""  # who sent the request in flight (a run's gate): abort() ends only that one's
        self._stopped: collections.deque[str] = collections.deque(maxlen=64)  # tags aborted: refused from now on
        self._tag_lock = threading.Lock()  # a request's tag is set, or refused, atomically with abort()
        self._killed_by_abort: int | None = None  # the child pid abort() killed (not out of memory)
        self._tmp: Path | None = None  # the child's private $TMPDIR, removed when it has exited
        self._passes: PassFinder | None = None  # the verbose compile child (failed passes)
        self._timer: PassTimer | None = None  # the pass-timing compile child

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Ready:
        if self._proc is not None and self._proc.poll() is None and self.ready is not None:
            return self.ready
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with startup_lock():  # held until the child has loaded the plugin
            # private to this process too: two workers of the same name must never share it (the plugin
            # deletes the descriptor it wrote there when its process exits)
            tmp = private_tmpdir(self.workspace / "scratch" / f"tmp-{self.name}-{os.getpid()}",
                                 unpack_assets(self.compiler))
            self._tmp = tmp
            req_r, req_w = os.pipe()
            rep_r, rep_w = os.pipe()
            log = open(self.log_path, "ab")
            cmd = [sys.executable, "-m", "opbyop.worker.child", "--in-fd", str(req_r), "--out-fd", str(rep_w),
                   "--system-desc", str(self.system_desc), "--workspace", str(self.workspace), "--chip", self.chip,
                   "--compiler", self.compiler.model_dump_json()]
            if self.host_devices is not None:
                cmd += ["--host-devices", str(self.host_devices)]
            env = {**os.environ, **self.compiler.environment, **(self.env or {}), "TMPDIR": str(tmp)}
            if environment_of(env).worker_memory_limit:
                # an address-space cap counts glibc's per-thread arenas (64 MB reserved each): with one
                # arena the threads a compile or an XLA run starts cannot spend the cap on reservations
                env.setdefault("MALLOC_ARENA_MAX", "1")
            # cwd: tt-metal writes generated/ files into the working directory
            self._proc = subprocess.Popen(cmd, pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=log, env=env, cwd=tmp)
            log.close()
            os.close(req_r)
            os.close(rep_w)
            self._to_child = Connection(req_w, readable=False)
            self._from_child = Connection(rep_r, writable=False)
            message = self._receive(self.start_timeout)
        if not isinstance(message, Ready):
            tail = self._log_tail()
            self.close()
            raise WorkerStartError(f"worker {self.name} did not start: {message!r}\n{tail}")
        self.ready = message
        return message

    def close(self) -> None:
        for conn in (self._to_child, self._from_child):
            if conn is not None:
                conn.close()
        self._to_child = self._from_child = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        self.ready = None
        if self._tmp is not None:  # the child has exited: its private $TMPDIR only links to the shared assets
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self.close()

    def __enter__(self) -> OpWorker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self.close_passes()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # -- requests --------------------------------------------------------------------------
    def analyze(self, op: UniqueOp, settings: AnalysisSettings, timeout: float = 120.0, tag: str = "") -> OpResult:
        """One unique op through compile, device run and golden; never raises for the op's sake."""
        request = Request(id=f"{op.signature[:12]}-{uuid.uuid4().hex[:12]}", op=op, settings=settings)
        started = utcnow()
        # the verbose compile child starts at the first failed compile, not here: idle beside a run
        # whose ops all compile it held 0.3-0.4 GB for nothing
        if settings.pass_timing > 0:
            self._pass_timer().warm()
        if settings.device.backend == "ttsim":  # ttsim has a time of its own; past it the model's verdict stands
            timeout += settings.device.ttsim_timeout_s
        answer = self._exchange(request, timeout, tag)
        if isinstance(answer, _Lost):
            depth, failed = self._lost_stage(request.id, answer)
            message = op_memory_message(op, answer.message) if answer.killed else answer.message
            lost = OpResult.failure(op.signature, op.op_name, answer.status, message, depth=depth, failed_stage=failed,
                                    started_at=started, ended_at=utcnow(), worker=self.name,
                                    compiler=self.compiler.key)
            return self._with_pass_timing(op, settings, timeout, tag,
                                          self._with_failed_pass(op, settings, timeout, tag, lost))
        assert isinstance(answer, Reply)
        answer.result.worker = self.name
        answer.result.compiler = self.compiler.key
        return self._with_pass_timing(op, settings, timeout, tag,
                                      self._with_failed_pass(op, settings, timeout, tag, answer.result))

    def _with_failed_pass(self, op: UniqueOp, settings: AnalysisSettings, timeout: float, tag: str,
                          result: OpResult) -> OpResult:
        """`result`, with the pass its compile stopped in when it failed, crashed or hung there."""
        if not settings.failed_pass or not wants_failed_pass(result) or (tag and tag in self._stopped):
            return result  # a stopped run's op gets no second compile
        result.failed_pass = self.find_failed_pass(op, settings, timeout, tag)
        return result

    def find_failed_pass(self, op: UniqueOp, settings: AnalysisSettings, timeout: float = 120.0, tag: str = "",
                         keep_log: Path | None = None) -> FailedPass:
        """Compile `op` again in the verbose compile child: the pass it stops in (`keep_log`: where to
        write the compiler's verbose log of that compile)."""
        return self._pass_finder().find(op, settings, timeout, tag, keep_log)

    def _with_pass_timing(self, op: UniqueOp, settings: AnalysisSettings, timeout: float, tag: str,
                          result: OpResult) -> OpResult:
        """`result`, with each pass's time in a compile of the op when the op is in the timed sample."""
        never_compiled = result.status is Status.SKIPPED and result.compile is None  # a test-harness check
        if not timed_by_sample(op.signature, settings.pass_timing) or never_compiled or (tag and tag in self._stopped):
            return result
        result.pass_timing = self._pass_timer().time(op, settings, timeout, tag)
        return result

    def _pass_timer(self) -> PassTimer:
        if self._timer is None:
            self._timer = PassTimer(self._spawn, self.system_desc, self.workspace, self.chip, self.name, self.env)
        return self._timer

    def _pass_finder(self) -> PassFinder:
        if self._passes is None:
            self._passes = PassFinder(self._spawn, self.system_desc, self.workspace, self.chip, self.name, self.env)
        return self._passes

    def _spawn(self, *args: object, **kwargs: object) -> OpWorker:
        """A side child's worker: the same compiler build as this one."""
        return OpWorker(*args, compiler=self.compiler, **kwargs)  # type: ignore[arg-type]

    def close_passes(self) -> None:
        """Stop the verbose and pass-timing compile children (the main child is stopped by close())."""
        for side in (self._passes, self._timer):
            if side is not None:
                side.close()

    def analyze_whole(self, graph: ModelGraph, settings: AnalysisSettings, timeout: float = 600.0,
                      iterations: int = 2) -> WholeModelResult:
        """The whole model compiled at once and run stitched (weights pushed once)."""
        values = write_values(graph, self.workspace / "scratch" / f"values-{uuid.uuid4().hex[:12]}.npz")
        try:
            return self.analyze_whole_from(graph.name, rewritten_text(graph.module_text, graph.name), str(values),
                                           parameter_indices(graph), settings, timeout, iterations)
        finally:
            values.unlink(missing_ok=True)

    def analyze_whole_from(self, model: str, module_text: str, values_path: str, parameters: list[int],
                           settings: AnalysisSettings, timeout: float = 600.0, iterations: int = 2,
                           tag: str = "") -> WholeModelResult:
        """Like analyze_whole, from a rewritten module (ir.rewrite) and an npz of arguments (arg*) and references (ref*)."""
        request = WholeRequest(id=f"whole-{uuid.uuid4().hex[:12]}", model=model, module_text=module_text,
                               values_path=values_path, parameters=parameters, iterations=iterations, settings=settings)
        answer = self._exchange(request, timeout, tag)
        if isinstance(answer, _Lost):
            depth, failed = self._lost_stage(request.id, answer)
            return WholeModelResult(status=answer.status, depth=depth, failed_stage=failed, message=answer.message)
        assert isinstance(answer, WholeReply)
        return answer.result

    def _exchange(self, request: Request | WholeRequest, timeout: float, tag: str = "") -> object:
        """Send a request; the child's answer, or a _Lost when it died, hung or failed (a child that
        died or hung is replaced)."""
        with self._lock:
            with self._tag_lock:
                if tag and tag in self._stopped:  # it started after its run's abort (Dask cannot unstart it)
                    raise RunStopped(f"the run that sent {request.id} was stopped")
                self._tag = tag
            try:
                return self._exchange_locked(request, timeout)
            finally:
                with self._tag_lock:
                    self._tag = ""

    def abort(self, tag: str) -> bool:
        """Kill the child if it works on a request sent with `tag` (a run that is stopping, whose op
        would hold this worker up to its timeout); the sender gets a crash it no longer waits for,
        the next request a new child. Requests with `tag` that come later are refused (RunStopped):
        a task the cluster had started before the stop reached it. True if one was killed."""
        if not tag:
            return False
        # a side child may be compiling the run's op again (the main child then idles)
        side_killed = any([side.abort(tag) for side in (self._passes, self._timer) if side is not None])
        with self._tag_lock:
            self._stopped.append(tag)
            proc = self._proc if self._tag == tag else None
        if proc is None or proc.poll() is not None:
            return side_killed
        self._killed_by_abort = proc.pid
        proc.kill()
        return True

    def _exchange_locked(self, request: Request | WholeRequest, timeout: float) -> object:
        self.start()
        child_pid = self._last_pid
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        assert self._to_child is not None
        step = "compile"
        try:
            self._to_child.send_bytes(request.model_dump_json().encode())
        except OSError:  # the child died between requests: this request never reached it
            self.kill()
            self.restarts += 1
            return self._exchange_locked(request, timeout)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            message = self._receive(remaining) if remaining > 0 else None
            if message is None:
                self.kill()
                self.restarts += 1
                return _Lost(_lost_status(step, Status.TIMEOUT, Status.VERDICT_TIMEOUT), step,
                             f"no result within {timeout:.0f} s during {step}",
                             self._log_tail(log_offset), child_pid)
            if isinstance(message, EOFError):
                returncode = self._proc.wait() if self._proc is not None else None
                self.close()
                self.restarts += 1
                # SIGKILL that abort() did not send: the kernel's out-of-memory killer
                killed = returncode == -signal.SIGKILL and self._killed_by_abort != child_pid
                status = Status.INFRA_ERROR if killed else _lost_status(step, Status.CRASHED, Status.ANALYZER_ERROR)
                return _Lost(status, step, f"worker process died ({_describe_exit(returncode)}) during {step}",
                             self._log_tail(log_offset), child_pid, killed)
            if getattr(message, "id", None) != request.id:
                self.kill()  # a stale or foreign message: never credit it to this request
                raise RuntimeError(f"worker {self.name} answered {message!r} to request {request.id}")
            if isinstance(message, Progress):
                step = message.stage
                continue
            if isinstance(message, Failure):  # a bug in opbyop, not in the op: recorded, never a lost run
                return _Lost(Status.ANALYZER_ERROR, step,
                             f"opbyop failed during {step} (not the compiler): {message.error}", "", child_pid)
            if isinstance(message, (Reply, WholeReply)) and message.result.compile is not None:
                # the compiler prints its diagnostics (with MLIR locations) to stderr, not into the exception
                message.result.compile.diagnostics = self._diagnostics(log_offset)
            return message

    def _receive(self, timeout: float) -> object:
        """The next message, None on timeout, an EOFError instance when the child is gone."""
        assert self._from_child is not None
        try:
            if not self._from_child.poll(timeout):
                return None
            return MESSAGE.validate_json(self._from_child.recv_bytes())
        except (EOFError, OSError) as e:
            return EOFError(str(e))

    def _lost_stage(self, request_id: str, lost: _Lost) -> tuple[Stage, Stage]:
        """(depth reached, stage failed) of a request whose child died or hung in step `lost.step` (the
        analyzer's stage table); in the compile, the dumps it left say how far it got."""
        step = STEP_NAMED[lost.step]
        if step.name == "compile":
            export_dir = self.workspace / "scratch" / f"child-{lost.child_pid}" / request_id
            reached = read_dumps(export_dir, 0.0).reached if export_dir.exists() else None
            shutil.rmtree(export_dir, ignore_errors=True)  # a lost child cannot clean up after itself
            return reached or step.before, failed_after(reached)
        return step.before, step.first

    @property
    def _last_pid(self) -> int | None:
        return self.ready.pid if self.ready is not None else None

    def _diagnostics(self, offset: int) -> list[str]:
        """The compiler's `... error: ...` lines the child printed since `offset`."""
        if not self.log_path.exists():
            return []
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        return [line.strip() for line in text.splitlines() if ": error: " in line][:20]

    def _log_tail(self, offset: int = 0, lines: int = 4) -> str:
        """The child's last words since `offset`: error lines first (LLVM ERROR, TT_FATAL ...)."""
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        kept = [line.strip() for line in text.splitlines() if line.strip()]
        errors = [line for line in kept if re.search(r"error|fatal|abort|assert|exception", line, re.I)]
        return " | ".join((errors or kept)[-lines:])


def write_values(graph: ModelGraph, path: Path) -> Path:
    """The arrays a whole-model run needs as one npz (frontends.values: arguments without a value
    travel as their description and are drawn in the worker)."""
    return write(graph, path)


def parameter_indices(graph: ModelGraph) -> list[int]:
    return [i for i, a in enumerate(graph.arguments) if a.kind is ArgumentKind.PARAMETER]


def _lost_status(step: str, compiler_status: Status, after_compile: Status) -> Status:
    """A child lost while compiling is the compiler's crash or hang; while simulating or running XLA:CPU,
    it is opbyop's (a crash of the simulator or its golden reference, or a verdict slower than the
    op's time limit), never counted against the compiler."""
    return compiler_status if step == "compile" else after_compile


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "exit status unknown"
    if returncode < 0:
        try:
            return f"signal {-returncode} {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"
