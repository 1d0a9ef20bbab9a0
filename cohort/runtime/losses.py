"""The loss rule both faces rerun by: which member removals lost a worker slot's work.

The coordinator removes a member when it leaves, when its session or progress deadline passes, or when it is
evicted. Only the last three orphan work: a clean leave (`CLEAN_LEAVE`) ended its batch. Dagster's membership
sensor (cohort.assets.membership) and Airflow's trigger (cohort.airflow.watch) both ask `lost_slot` which
removals to rerun a slot for; each adds what only it knows (Dagster: the state of the member's run).

Example:
    >>> from cohort.assignment.protocol.group_state import EventKind, GroupEvent, GroupState
    >>> event = GroupEvent(0.0, EventKind.MEMBER_REMOVED, GroupState.STABLE, 3, member_id="m-1", reason="expired")
    >>> lost_slot(event, {"m-1": (2, "run-a")})
    SlotLoss(slot=2, member_id='m-1', run_id='run-a', reason='expired', generation=3)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cohort.assignment.protocol.group_state import CLEAN_LEAVE, EventKind, GroupEvent

__all__ = ["MemberRuns", "SlotLoss", "lost_slot"]

MemberRuns = Mapping[str, tuple[int | None, str | None]]
"""member id -> (worker slot or None, the run that hosts it or None)."""


@dataclass(frozen=True)
class SlotLoss:
    """Worker slot `slot` lost its member `member_id` (hosted by run `run_id`) for `reason` in `generation`."""

    slot: int
    member_id: str
    run_id: str | None
    reason: str
    generation: int


def lost_slot(event: GroupEvent, known: MemberRuns) -> SlotLoss | None:
    """The slot `event` orphaned: a member removed without leaving on its own whose slot is known; else None."""
    if event.kind is not EventKind.MEMBER_REMOVED or event.member_id is None:
        return None
    slot, run_id = known.get(event.member_id, (None, None))
    if slot is None or event.reason.startswith(CLEAN_LEAVE):
        return None
    return SlotLoss(slot, event.member_id, run_id, event.reason, event.generation)
