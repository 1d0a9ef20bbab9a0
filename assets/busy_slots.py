"""Which worker slots already have a batch in flight, so that no tick launches a second run of a slot.

A slot's runs share one static member id (the slot's instance id): a second run of a slot that joins while
the first is still reading fences the first, whose commit is then refused and whose work is thrown away. On a
loaded machine, where a batch outlasts the schedule's interval, every tick would fence the run before it.
So the schedule and the membership sensor launch a slot only when no run of it is in flight:

- a run queued or starting (not yet running) keeps its slot: it will join;
- a running run whose member is live in the group (its session not yet expired) keeps its slot;
- a running run that has not joined within `STARTING_GRACE_S` of its start, or whose member's session
  expired (the process was killed), does not: it cannot commit anything any more.

The decision is a pure function of values read at the tick (Dagster's runs in flight, the group's members).

Example:
    >>> runs = [InFlight("run-a", slots=(1,), started_at=100.0), InFlight("run-b", slots=(2,), started_at=None)]
    >>> sorted(busy_slots(runs, live_runs={"run-a"}, now=400.0))
    [1, 2]
    >>> sorted(busy_slots(runs, live_runs=set(), now=400.0))
    [2]
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

__all__ = ["STARTING_GRACE_S", "InFlight", "busy_slots"]

STARTING_GRACE_S = 180.0
"""Seconds a running batch run has to join its group (start Spark, reach the coordinator) before its slot is
launched again: past it, a run that is not a live member is taken for lost (killed before it joined)."""


@dataclass(frozen=True)
class InFlight:
    """One unfinished batch run of the group: the slots it hosts, and when it started running (None while it
    is queued or starting)."""

    run_id: str
    slots: tuple[int, ...]
    started_at: float | None


def busy_slots(
    in_flight: Iterable[InFlight],
    live_runs: Collection[str],
    now: float,
    *,
    grace_s: float = STARTING_GRACE_S,
    ignore: Collection[str] = (),
) -> dict[int, str]:
    """slot -> why it is busy (the run holding it), for every slot with a run in flight that can still
    commit; `live_runs` are the run ids of the group's members whose sessions are live; runs in `ignore`
    (a lost run being rerun) hold nothing."""
    busy: dict[int, str] = {}
    for run in in_flight:
        if run.run_id in ignore:
            continue
        if run.run_id in live_runs:
            why = f"run {run.run_id} is a live member of the group"
        elif run.started_at is None:
            why = f"run {run.run_id} is queued"
        elif now - run.started_at < grace_s:
            why = f"run {run.run_id} started {max(0.0, now - run.started_at):.0f} s ago and has not joined yet"
        else:
            continue  # running without a live member past the grace: killed, or its session expired
        for slot in run.slots:
            busy.setdefault(slot, why)
    return busy
