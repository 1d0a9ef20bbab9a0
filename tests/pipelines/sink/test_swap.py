"""The swap probe a replay's publish relies on: concurrent probes (the slots of one run are threads of one
process) must all see that the file system can swap, and leave nothing behind."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cohort.pipelines.sink import swap as local_swap


def test_concurrent_probes_in_one_directory_all_succeed(tmp_path: Path) -> None:
    probe = local_swap._probe.__wrapped__  # uncached: each call really probes
    threads = 8
    start = threading.Barrier(threads)

    def one(_: int) -> list[bool]:
        start.wait()
        return [probe(str(tmp_path)) for _ in range(25)]

    with ThreadPoolExecutor(threads) as pool:
        results = [ok for batch in pool.map(one, range(threads)) for ok in batch]
    assert all(results), f"{results.count(False)} of {len(results)} concurrent probes reported no swap"
    assert os.listdir(tmp_path) == []


def test_exchange_swaps_two_directories(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "from-a").touch()
    local_swap.exchange(str(tmp_path / "a"), str(tmp_path / "b"))
    assert os.listdir(tmp_path / "b") == ["from-a"] and os.listdir(tmp_path / "a") == []
