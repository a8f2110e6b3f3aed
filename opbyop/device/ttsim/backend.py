"""The ttsim device backend: a compiled op's TTNN program run by tt-metal's kernels on ttsim.

One runner process (opbyop.device.ttsim.runner, in ttnn's own interpreter) per worker, kept open
across ops so each kernel JIT-compiles once. ttsim ends its process on a feature it does not model:
that costs one op (a `limit` outcome with ttsim's own words) and the next op starts a new runner.
"""

from __future__ import annotations

import io
import json
import os
import re
import select
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from opbyop.device.program import Op, Program
from opbyop.device.ttsim.install import TtsimSetup, TtsimUnavailable, locate
from opbyop.device.ttsim.plan import observed_op, program_plan
from opbyop.records import TtsimOutcome, TtsimRun

RUNNER = Path(__file__).with_name("runner.py")
NOTE = "opbyop-ttsim "  # the runner's own log lines (runner.NOTE): never tt-metal's or ttsim's words
RUNNING = NOTE + "running "  # the runner's log line naming the op it starts (runner.RUNNING)
_CYCLE = re.compile(r"^\[\d+\] ")  # ttsim prefixes its lines with its cycle count
START_TIMEOUT_S = 300.0  # the first open builds tt-metal's firmware (about 15 s; minutes on a loaded machine)


@dataclass
class TtsimResult:
    run: TtsimRun
    outputs: list[np.ndarray] = field(default_factory=list)
    report: bytes | None = None  # ttnn's own TT-NN Visualizer report of the run, as a .tar.gz of its folder
    # seconds per phase: opbyop's ("start": the runner started, once per process; "plan": the program and
    # inputs handed over; "read": the outputs taken back) and the runner's (runner.Interpreter.phases)
    phases: dict[str, float] = field(default_factory=dict)
    # (function, op index) -> the op's output, where asked: any function's ops (its const-eval functions'
    # too), in the order the run last ran each (a loop body's op: its last iteration)
    observed: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)


class TtsimRunner:
    """A ttnn interpreter with a ttsim device open, fed one program at a time."""

    def __init__(self, setup: TtsimSetup, scratch: Path, log: Path, mesh: tuple[int, int] | None = None):
        self.setup, self.scratch, self.log_path, self.mesh = setup, scratch, log, mesh
        self._proc: subprocess.Popen | None = None
        self._replies: int | None = None
        self._buffer = b""
        self._offset = 0  # where this start's part of the log begins
        self._ended = False  # the runner closed its end of the reply pipe
        self.started_s = 0.0  # the last start's time (opening the device, building firmware once)
        self.refused: str | None = None  # why the device did not open, once it did not

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        if self.alive:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.setup.cache.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        read_fd, write_fd = os.pipe()
        log = open(self.log_path, "ab")
        # the runner writes replies on its fd 1; its chatter is sent to stderr, which is the log
        mesh = [f"{self.mesh[0]}x{self.mesh[1]}"] if self.mesh else []
        self._proc = subprocess.Popen([str(self.setup.python), str(RUNNER), str(self.setup.sfpi), *mesh],
                                      stdin=subprocess.PIPE, stdout=write_fd, stderr=log,
                                      env={**_base_environment(), **self.setup.environment()}, close_fds=True)
        os.close(write_fd)
        log.close()
        self._replies, self._buffer, self._ended = read_fd, b"", False
        self._offset = self.log_path.stat().st_size
        ready = self._reply(START_TIMEOUT_S)
        if ready is None or not ready.get("ready"):
            detail = self.last_words() or "no output"
            self.close()
            if self.mesh:  # a mesh program keeps the device model's verdict, with this reason
                raise TtsimUnavailable(
                    f"the ttsim {self.mesh[0]}x{self.mesh[1]} mesh ({self.setup.library.parent.name}) did not open: "
                    f"{detail}", f"see {self.log_path}; the device model's verdict stands (a ttsim of the version "
                    "tt-metal names in its ttsim-version may open the mesh)")
            raise TtsimUnavailable(f"the ttsim device did not open: {detail}",
                                   f"see {self.log_path}; check the set-up with `make ttsim`")
        self.started_s = time.perf_counter() - started

    def run(self, program: Program, inputs: Sequence[np.ndarray], timeout: float, report: bool = False,
            observe: Callable[[Op], bool] | None = None) -> TtsimResult:
        """The program's outputs on ttsim, or the outcome that stopped it (never raises for the op's sake);
        with `report`, ttnn's own visualizer report of the run beside them; with `observe`, the output
        of each op it picks, in any function the run runs (TtsimResult.observed)."""
        started = time.perf_counter()
        if self.refused is not None:  # the device did not open before: not tried again for every op
            return TtsimResult(TtsimRun(outcome=TtsimOutcome.UNAVAILABLE, message=self.refused))
        try:
            self.start()
        except TtsimUnavailable as e:
            self.refused = str(e)
            return TtsimResult(TtsimRun(outcome=TtsimOutcome.UNAVAILABLE, message=self.refused))
        began = time.perf_counter()  # the runner up (started once per process)
        folder = self.scratch / f"ttsim-{os.getpid()}-{time.monotonic_ns()}"
        folder.mkdir(parents=True)
        try:
            plan, constants = program_plan(program, observe)
            (folder / "plan.json").write_text(json.dumps(plan))
            arrays = {**constants, **{f"in{i}": np.asarray(x) for i, x in enumerate(inputs)}}
            np.savez(folder / "inputs.npz", **{k: _portable(v) for k, v in arrays.items()})
            handed = time.perf_counter()
            offset = self.log_path.stat().st_size
            assert self._proc is not None and self._proc.stdin is not None
            self._proc.stdin.write((json.dumps({"dir": str(folder), "report": report}) + "\n").encode())
            self._proc.stdin.flush()
            reply = self._reply(timeout)
            seconds = time.perf_counter() - started
            if reply is None:
                return TtsimResult(self._lost(offset, seconds, timeout))
            if not reply["ok"]:
                outcome = TtsimOutcome.CRASHED if reply["kind"] == "host" else TtsimOutcome(reply["kind"])
                return TtsimResult(TtsimRun(outcome=outcome, message=reply["message"],
                                            op=reply.get("op"), seconds=seconds))
            replied = time.perf_counter()
            with np.load(folder / "outputs.npz") as data:
                outputs = [data[f"out{i}"] for i in range(len(data.files))]
            memory = {k: reply[k] for k in ("peak_l1_bytes", "peak_cb_bytes", "peak_dram_bytes")
                      if reply.get("memory_measured")}
            run = TtsimRun(outcome=TtsimOutcome.RAN, seconds=seconds, runner_seconds=reply["seconds"],
                           report_error=reply.get("report_error"), **memory)
            observed = _observed(folder / "observed.npz")
            phases = {"start": began - started, "plan": handed - began, **reply.get("phases", {}),
                      "read": time.perf_counter() - replied}
            return TtsimResult(run, outputs, _archive(folder / reply["report"]) if reply.get("report") else None,
                               phases, observed)
        except (BrokenPipeError, OSError) as e:
            return TtsimResult(self._lost(0, time.perf_counter() - started, timeout, str(e)))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _lost(self, offset: int, seconds: float, timeout: float, note: str = "") -> TtsimRun:
        """The runner gave no reply: it died (ttsim's limit, or a crash) or it ran out of time."""
        if not self._ended and self.alive:
            self.close()
            return TtsimRun(outcome=TtsimOutcome.TIMEOUT, seconds=seconds,
                            message=f"ttsim gave no result within {timeout:.0f} s")
        try:  # its pipe closed: the process is ending
            assert self._proc is not None
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        words, op = self.last_words(offset), self.last_op(offset)
        code = self._proc.returncode if self._proc is not None else None
        self.close()
        if "UnsupportedFunctionality" in words or words.startswith("ERROR:"):
            return TtsimRun(outcome=TtsimOutcome.LIMIT, seconds=seconds, message=words, op=op)
        return TtsimRun(outcome=TtsimOutcome.CRASHED, seconds=seconds, op=op,
                        message=f"the ttsim runner exited ({code}): {words or note or 'no output'}")

    def _log_lines(self, offset: int | None) -> list[str]:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._offset if offset is None else offset)
                return f.read().decode(errors="replace").splitlines()
        except OSError:
            return []

    def last_op(self, offset: int) -> str | None:
        """The TTNN op the runner last started (it names each in its log before running it)."""
        started = [line[len(RUNNING):].strip() for line in self._log_lines(offset) if line.startswith(RUNNING)]
        return started[-1] if started else None

    def last_words(self, offset: int | None = None) -> str:
        """ttsim's or tt-metal's last error lines in the runner's log since `offset` (without the
        simulator's `[cycle]` prefix, so that the same limit reads the same in every op)."""
        lines = [_CYCLE.sub("", line) for line in self._log_lines(offset) if not line.startswith(NOTE)]
        ttsim = [line.strip() for line in lines if line.startswith("ERROR: ")]  # ttsim's own, when it stopped
        errors = ttsim or [line.strip() for line in lines if "ERROR" in line or "TT_FATAL" in line
                           or "TT_THROW" in line or "UnsupportedFunctionality" in line]
        return "\n".join(errors[-3:]) if errors else "\n".join(line.strip() for line in lines[-3:])

    def _reply(self, timeout: float) -> dict | None:
        assert self._replies is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                return None
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                self._ended = True
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                try:
                    assert self._proc.stdin is not None
                    self._proc.stdin.write(b'{"close": true}\n')
                    self._proc.stdin.flush()
                    self._proc.wait(timeout=10)
                except (OSError, subprocess.TimeoutExpired):
                    self._proc.kill()
                    self._proc.wait()
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        if self._replies is not None:
            os.close(self._replies)
        self._proc, self._replies = None, None


class TtsimBackend:
    """ttsim runners per architecture, set up on first use (a run that never asks costs nothing)."""

    def __init__(self, home: Path, scratch: Path, ttsim: Path | None = None, python: Path | None = None):
        self.home, self.scratch, self.ttsim, self.python = home, scratch, ttsim, python
        self._runners: dict[str, TtsimRunner] = {}
        self._refused: dict[str, str] = {}  # architecture -> why no ttsim can be set up for it

    def run(self, program: Program, inputs: Sequence[np.ndarray], timeout: float, report: bool = False,
            observe: Callable[[Op], bool] | None = None) -> TtsimResult:
        """A mesh program goes to a runner with a mesh of ttsim's multichip build open (one per shape);
        where that mesh does not open, the reason is its outcome and the model's verdict stands."""
        arch, mesh = program.spec.arch, tuple(program.mesh_shape)
        key = arch if mesh == (1, 1) else f"{arch} {mesh[0]}x{mesh[1]}"
        if key in self._refused:
            return TtsimResult(TtsimRun(outcome=TtsimOutcome.UNAVAILABLE, message=self._refused[key]))
        if key not in self._runners:
            try:
                setup = locate(arch, self.home, self.ttsim, self.python, chips=mesh[0] * mesh[1])
            except TtsimUnavailable as e:
                self._refused[key] = str(e)
                return TtsimResult(TtsimRun(outcome=TtsimOutcome.UNAVAILABLE, message=str(e)))
            log = self.home / "logs" / f"ttsim-{os.getpid()}{'' if mesh == (1, 1) else '-' + key.split()[1]}.log"
            self._runners[key] = TtsimRunner(setup, self.scratch, log, None if mesh == (1, 1) else mesh)
        runner = self._runners[key]
        result = runner.run(program, inputs, timeout, report, observe)
        result.run.simulator = runner.setup.simulator  # which ttsim and patch set gave this outcome
        return result

    def close(self) -> None:
        for runner in self._runners.values():
            runner.close()
        self._runners.clear()


def _observed(path: Path) -> dict[tuple[str, int], np.ndarray]:
    """observed.npz's outputs by their op's (function, index), in the file's order: the run's (none: no
    file)."""
    if not path.exists():
        return {}
    with np.load(path) as data:
        return {observed_op(key): data[key] for key in data.files}


def _archive(folder: Path) -> bytes:
    """A report folder as one .tar.gz (the artifact store keeps files, not folders)."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        tar.add(folder, arcname=".")
    return data.getvalue()


def _portable(x: np.ndarray) -> np.ndarray:
    """An array numpy alone can read: bf16 and other ml_dtypes values as f32 (exactly)."""
    return x.astype(np.float32) if x.dtype.kind == "V" or type(x.dtype).__module__.startswith("ml_dtypes") else x


def _base_environment() -> dict[str, str]:
    """The worker's environment less what belongs to opbyop's own interpreter."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JAX_", "XLA_",
                                                                     "TT_COMPILE_ONLY"))}
