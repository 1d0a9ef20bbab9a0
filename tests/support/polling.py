"""Waiting in end-to-end tests: poll a probe until it answers, bounded, failing with what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["poll"]

_T = TypeVar("_T")


def poll(probe: Callable[[], _T | None], *, timeout_s: float, what: str, interval_s: float = 1.0) -> _T:
    """The first truthy answer of `probe` within `timeout_s`, else an AssertionError naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)
