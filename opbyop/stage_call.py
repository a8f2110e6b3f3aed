"""One place that turns a stage's exception into a typed outcome (after pytest's CallInfo.from_call):
the function is called, and its value or its exception comes back with the stage and the time it
took. What must never be swallowed is re-raised: KeyboardInterrupt and SystemExit always (they are
not Exceptions), and whatever the caller names (MemoryError, where an outer handler owns it)."""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Generic, TypeVar

from opbyop.records import Stage, utcnow

T = TypeVar("T")

OUT_OF_MEMORY: tuple[type[BaseException], ...] = (MemoryError,)  # left to the handler that names the op's size


@dataclass(frozen=True)
class StageCall(Generic[T]):
    """How one call of a stage ended: its value, or the exception it raised."""

    stage: Stage | None
    value: T | None
    error: Exception | None
    started_at: datetime
    seconds: float

    @classmethod
    def of(cls, fn: Callable[[], T], stage: Stage | None = None, *,
           catch: tuple[type[Exception], ...] = (Exception,),
           reraise: tuple[type[BaseException], ...] = ()) -> StageCall[T]:
        """Call `fn`; an exception of `catch` (not of `reraise`) becomes the outcome, any other propagates."""
        started_at, start = utcnow(), time.perf_counter()
        try:
            value, error = fn(), None
        except catch as e:
            if isinstance(e, reraise):
                raise
            value, error = None, e
        return cls(stage=stage, value=value, error=error, started_at=started_at, seconds=time.perf_counter() - start)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def brief(self) -> str:
        """'TypeName: message' of the exception."""
        return f"{type(self.error).__name__}: {self.error}" if self.error is not None else ""

    @property
    def described(self) -> str:
        """The exception as Python prints its last line (module-qualified type, message)."""
        return describe_exception(self.error) if self.error is not None else ""


def describe_exception(e: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(e), e)).strip()
