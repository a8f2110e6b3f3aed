"""Faults a test asks a process to suffer on chosen ops: read once when the process starts.

`OPBYOP_FAULT_INJECT` (a worker's child process) and `OPBYOP_DASK_FAULT_INJECT` (a Dask worker) hold
';'-separated rules `action:<signature prefix>`: abort (the process aborts, as the compiler can),
hang, raise (a bug in opbyop itself), exit (the process exits at once, as a killed Dask worker),
sigkill (as the kernel's out-of-memory killer ends a process), slow (the op waits SLOW_SECONDS, then
runs as usual: a run that lasts long enough for a test to act in its middle).
Only a process started with rules gets its analyzer wrapped: the op path of every other process
never looks for them.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any, TypeVar

ACTIONS = ("abort", "hang", "raise", "exit", "sigkill", "slow")
SLOW_SECONDS = 0.25
T = TypeVar("T")


@dataclass(frozen=True)
class Fault:
    action: str
    prefix: str

    def strike(self) -> None:
        if self.action == "slow":
            time.sleep(SLOW_SECONDS)
            return
        if self.action == "abort":
            os.abort()
        if self.action == "hang":
            time.sleep(10**6)
        if self.action == "exit":
            os._exit(1)
        if self.action == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"fault injected for {self.prefix}")


def parse(text: str) -> list[Fault]:
    faults = []
    for rule in filter(None, text.split(";")):
        action, _, prefix = rule.partition(":")
        if action not in ACTIONS or not prefix:
            raise ValueError(f"fault rule {rule!r}: write action:<signature prefix>, action one of {', '.join(ACTIONS)}")
        faults.append(Fault(action, prefix))
    return faults


def injected(target: T, rules: str, method: str) -> T:
    """`target` itself without rules; else a stand-in whose `method(op, ...)` first suffers the
    fault of the first rule whose prefix starts the op's signature."""
    faults = parse(rules)
    return _Striking(target, faults, method) if faults else target  # type: ignore[return-value]


class _Striking:
    def __init__(self, target: Any, faults: list[Fault], method: str):
        self._target, self._faults, self._method = target, faults, method

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name != self._method:
            return attr

        def call(op: Any, *args: Any, **kwargs: Any) -> Any:
            for fault in self._faults:
                if op.signature.startswith(fault.prefix):
                    fault.strike()
            return attr(op, *args, **kwargs)

        return call
