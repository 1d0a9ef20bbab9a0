"""Injected time for the coordinator, the member client and the sensors.

Every deadline in the group protocol (session, progress, rebalance, initial delay) is stored as data: a
float of seconds on the clock's scale. Nothing in `assignment/` reads the time except through a `Clock`,
so tests drive timeouts by advancing a `ManualClock` and never sleep.

Example:
    >>> clock = ManualClock(100.0)
    >>> clock.advance(2.5)
    102.5
    >>> clock.now()
    102.5
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """A source of the current time in seconds.

    Deadlines are persisted and compared across processes and hosts, so a clock shared by several
    processes must be on a common scale (wall-clock seconds for `SystemClock`).
    """

    def now(self) -> float:
        """The current time in seconds."""
        ...


class SystemClock:
    """Wall-clock time (`time.time()`), comparable across processes and hosts with synchronised clocks."""

    def now(self) -> float:
        """Seconds since the epoch."""
        return time.time()

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that moves only when told to; for deterministic tests and simulations.

    Thread-safe: a test may advance it while a member's heartbeat thread reads it.

    Example:
        >>> clock = ManualClock()
        >>> clock.advance(10)
        10.0
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        """The time set so far."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward by `seconds` (>= 0) and return the new time."""
        if seconds < 0:
            raise ValueError(f"a clock only moves forward; got advance({seconds})")
        with self._lock:
            self._now += float(seconds)
            return self._now

    def set(self, when: float) -> float:
        """Move the clock to `when`, which must not be earlier than now; return it."""
        with self._lock:
            if when < self._now:
                raise ValueError(f"a clock only moves forward: {when} < {self._now}")
            self._now = float(when)
            return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now!r})"
