"""Blocking I/O side by side: on an object store every footer read, listing or server-side copy is a request that
waits on the store, not on a core, so the sinks run them a bounded number at a time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["IO_WORKERS", "in_parallel"]

IO_WORKERS = 8
"""Requests (a copy, a listing, a footer read) at once."""
_In = TypeVar("_In")
_Out = TypeVar("_Out")


def in_parallel(work: Callable[[_In], _Out], items: Sequence[_In], workers: int = IO_WORKERS) -> list[_Out]:
    """`[work(item) for item in items]`, at most `workers` at a time (threads: for I/O, such as reading the footers
    of a commit's files on an object store); the first error in the order of `items` is raised."""
    if len(items) <= 1 or workers <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(min(workers, len(items)), thread_name_prefix="cohort-io") as pool:
        return list(pool.map(work, items))
