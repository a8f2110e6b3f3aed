"""A frontend's work in a child process with a memory and a time budget, watched from its parent.

torch.export, torch-mlir and JAX's lowering run in the process that asks for them; one of them
growing without bound (torch-mlir's StableHLO lowering of some graphs grows to tens of GB before
`std::bad_alloc`) would take the run and every other model with it. So a model's export runs in a
child process, and its parent watches the child's memory and wall time: the memory of the child
and its own children, looked at every `POLL_S` (RSS, cheap; PSS where RSS passes the budget). Past
either budget the child and its children are killed and the caller gets `BudgetExceeded`, naming
which budget, the figure and how to raise it.

Why watching and not a limit set on the child: RLIMIT_AS counts address space, and jax and torch
reserve far more of it than they touch (a model would fail at import); a memory cgroup would be
exact, but is rarely writable where opbyop runs (a container, a CI runner, a laptop without
systemd delegation). PSS rather than RSS: a forked child shares its parent's pages, and PSS counts
each shared page once across the tree.

The child hands its result back in files (the StableHLO text can be hundreds of MB; a pipe would
need a reader while the parent watches), and its stderr goes to a file whose tail explains a death.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import signal
import sys
import time
import types
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, Callable, Iterator

POLL_S = 0.1  # between two looks at the child: torch-mlir grows ~0.3 GB/s at worst, 30 MB between looks
RESULT = "result.pkl"
STDERR = "stderr.log"
# Imported once by the forkserver, so that each child is forked with them (milliseconds, not the
# seconds of importing torch and torch-mlir again, and of torch.export's first use: frontends.warm).
# A module that is not installed is skipped.
PRELOAD = ["opbyop.frontends.warm"]


def gigabytes(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


@dataclass
class BudgetExceeded(Exception):
    """A child went past its memory or time budget and was killed."""

    kind: str  # "memory" or "time"
    figure: float  # the memory (bytes) or time (seconds) it had reached
    budget: float

    def words(self, what: str) -> str:
        if self.kind == "memory":
            return (f"{what} went past its memory budget of {gigabytes(self.budget)} (it had reached "
                    f"{gigabytes(self.figure)}) and was stopped")
        return f"{what} went past its time budget of {self.budget:.0f} s and was stopped"

    def __str__(self) -> str:
        return self.words("the child")


class ChildDied(Exception):
    """A child ended without a result: killed by a signal (an abort, the kernel's OOM killer) or exited."""


def _pss(pid: int) -> int | None:
    """PSS of a process, from /proc/PID/smaps_rollup (None where the kernel has none, or it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


_PAGE = os.sysconf("SC_PAGE_SIZE")


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc/PID/task/*/children: no scan of all processes)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as f:
                    children = [int(c) for c in f.read().split()]
            except OSError:
                continue
            out += children
            todo += children
    return out


def tree_memory(pid: int, limit: int | None = None) -> int:
    """Memory of a process and all its descendants (processes_memory)."""
    return processes_memory([pid] + descendants(pid), limit)


def processes_memory(pids: list[int], limit: int | None = None) -> int:
    """Memory of these processes together. RSS first (0.04 ms a process); where the RSS total passes
    `limit`, PSS (10 ms a process of torch's size), which counts each page its members share once: a
    forked child shares its parent's pages."""
    rss = sum(_rss(p) for p in pids)
    if limit is not None and rss <= limit:
        return rss
    pss = [_pss(p) for p in pids]
    return rss if any(p is None for p in pss) else sum(p for p in pss if p is not None)


def kill_tree(pid: int) -> None:
    """SIGKILL a process and its descendants (descendants first, so none is re-parented alive)."""
    for p in descendants(pid)[::-1] + [pid]:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


_FORKSERVER: BaseContext | None = None


def forkserver() -> BaseContext:
    """The forkserver context children are forked from (started on first use, torch preloaded)."""
    global _FORKSERVER
    if _FORKSERVER is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _FORKSERVER = context
    return _FORKSERVER


def start_forkserver() -> None:
    """Start the forkserver now: it imports and warms torch, torch-mlir and JAX while the caller
    does its own start-up, and the first export waits that much less."""
    forkserver()
    multiprocessing.forkserver.ensure_running()


def run_in_child(target: Callable[..., None], args: tuple, folder: Path, memory_bytes: int, timeout_s: float,
                 context: BaseContext, measured: Callable[[int], int] | None = None) -> Any:
    """`target(*args, folder)` in a child process of `context`; returns what it left in
    `folder/RESULT` (through `write_result`). Raises BudgetExceeded when the child (with its own
    children) goes past `memory_bytes` or `timeout_s`; ChildDied when it ends without a result.
    `measured(child_pid)` is the memory compared with the budget (default: the child's tree)."""
    folder.mkdir(parents=True, exist_ok=True)
    process = context.Process(target=_child_main, args=(target, args, folder), daemon=False)
    start = time.monotonic()
    with _main_kept_out():
        process.start()
    measure = measured or (lambda pid: tree_memory(pid, memory_bytes))
    try:
        while True:
            process.join(POLL_S)
            if process.exitcode is not None:
                break
            used = measure(process.pid)
            if used > memory_bytes:
                raise BudgetExceeded("memory", used, memory_bytes)
            if time.monotonic() - start > timeout_s:
                raise BudgetExceeded("time", time.monotonic() - start, timeout_s)
    finally:
        if process.exitcode is None:
            kill_tree(process.pid)
            process.join(5)
    result = folder / RESULT
    if not result.exists():
        raise ChildDied(_death(process.exitcode, folder / STDERR))
    with open(result, "rb") as f:
        return pickle.load(f)


@contextmanager
def _main_kept_out() -> Iterator[None]:
    """A forkserver (or spawned) child imports its parent's __main__ again, by multiprocessing's
    rules: a script that loads a model at its top level would load it again in every export's
    child. The child needs nothing of __main__, so it is shown a blank one while it starts."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def write_result(folder: Path, value: Any) -> None:
    """What a child hands back (run_in_child returns it)."""
    partial = folder / (RESULT + ".partial")
    with open(partial, "wb") as f:
        pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(partial, folder / RESULT)


def _child_main(target: Callable[..., None], args: tuple, folder: Path) -> None:
    _die_with_parent()
    err = os.open(folder / STDERR, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(err, 2)  # a C++ abort's words land here, for the parent to quote
    target(*args, folder)


def _die_with_parent() -> None:
    """The child is killed when its parent dies (a killed run leaves no export behind)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _death(exitcode: int | None, stderr: Path) -> str:
    if exitcode is not None and exitcode < 0:
        how = f"was killed by {signal.Signals(-exitcode).name}"
        if exitcode == -signal.SIGKILL:
            how += " (the kernel's out-of-memory killer sends it)"
    else:
        how = f"exited with code {exitcode}"
    tail = _tail(stderr)
    return how + (f"; its last words: {tail}" if tail else "")


def _tail(path: Path, lines: int = 3, width: int = 400) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()][-lines:]
    out = " | ".join(kept)
    return out if len(out) <= width else "…" + out[-width:]
