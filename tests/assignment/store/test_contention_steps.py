"""Eight processes x a fixed number of protocol steps on ONE group, SQLite and a real PostgreSQL.

Beyond tests/assignment/store/test_contention.py (time-boxed `GroupMember`s, ledger and sync checks): every
process makes an exact number of raw coordinator calls (join / sync / heartbeat / commit / leave cycles,
members leaving and new ones joining), and the store is then checked against what each process saw
accepted: each commit in the ledger exactly once and attributed to its process, every admission and
leave recorded once, generations consecutive, the group row's version between the accepted writes and
the calls made (a lost update would leave it lower), no partition with two owners in a generation.

CI runs the full 8 x 1,000; `benchmarks/contention.py` runs the same and records figures in benchmarks/RESULTS.md.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.reliability.contention_checks import verify
from harness.reliability.contention_worker import run_contention

PROCESSES = 8
STEPS = 1000  # per process: the full 8 x 1,000 (about 30 s per backend on this shared 2-core host)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
@pytest.mark.timeout(240)
def test_eight_processes_step_by_step_lose_nothing(backend: str, request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url"))
    results = run_contention(url, PROCESSES, STEPS, timeout=200)
    figures = verify(url, results)
    assert figures["calls"] >= PROCESSES * STEPS
    # The run really contended: commits, leaves and rejoins from every process, many generations.
    assert figures["generations"] >= 20, figures
    assert figures["commits_accepted"] >= PROCESSES * 50, figures
    for result in results:
        assert result.accepted.get("commit", 0) > 0 and result.accepted.get("sync", 0) > 0, result.tag
    assert sum(r.accepted.get("leave", 0) for r in results) >= 3, figures


def test_the_checks_catch_lost_phantom_and_doubled_work(sqlite_url: str) -> None:
    """`verify` is not vacuous: forging what a process saw accepted makes it fail with a clear message."""
    results = run_contention(sqlite_url, 2, 120, timeout=120)
    assert verify(sqlite_url, results)["commits_accepted"] > 0
    worker = next(r for r in results if r.commits)
    first = worker.commits[0]
    held = next(s for r in results for s in r.syncs if s[2])
    forged = {
        "lost update": replace(worker, commits=(*worker.commits, (first[0], first[1], 10**6, 10**6 + 1, *first[4:]))),
        "ledger rows no process saw": replace(worker, commits=worker.commits[1:]),
        "joined 0 times": replace(worker, admitted=(*worker.admitted, "ghost-member")),
        "held by": replace(worker, syncs=(*worker.syncs, (held[0], "intruder", held[2]))),
    }
    for fragment, bad in forged.items():
        others = [bad if r is worker else r for r in results]
        with pytest.raises(AssertionError, match=fragment):
            verify(sqlite_url, others)
