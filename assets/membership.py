"""The membership sensor's decisions as plain values: whom to evict, whether the clock made anything due, and
which worker slots to rerun after a loss.

A tick reads (the group record, the Dagster runs of its members, the group's new events), decides here, and
applies (evictions and expiry through the coordinator, run requests through Dagster). The decisions import
neither Dagster nor the store, so every rule below is tested with values.

Reruns: a member removed while its run had not finished (session or progress deadline) is rerun keyed by the
member; a run that failed or was canceled (its member evicted here, or it left on its own, or it came and went
between two ticks, or it failed before the group existed) is rerun keyed by the run, so every path asks for
the same rerun once. A failed or canceled run that was itself a rerun is not rerun again: it needs a person.

Example:
    >>> seen = GroupCursor(members={"m-1": (2, "run-a")})
    >>> runs = {"run-a": RunView("run-a", RunState.FAILURE, slots=(2,))}
    >>> decide_evictions({"m-1": (2, "run-a")}, runs, clock_due=False)
    Evictions(evict=(Eviction(member_id='m-1', reason='run run-a failure'),), expire=False)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cohort.assets.cursors import GroupCursor
from cohort.assignment.protocol.group_state import CLEAN_LEAVE, EventKind, GroupEvent
from cohort.runtime.losses import MemberRuns, lost_slot

__all__ = [
    "CLEAN_LEAVE",
    "REMEMBERED_RERUNS",
    "Eviction",
    "Evictions",
    "MemberRuns",
    "Note",
    "Rerun",
    "Reruns",
    "RunState",
    "RunView",
    "decide_evictions",
    "decide_reruns",
]

REMEMBERED_RERUNS = 200
"""How many rerun run ids a group's cursor keeps (a run rerun at its deadline is not rerun again)."""


class RunState(enum.Enum):
    """What the sensor needs to know of a Dagster run's status."""

    SUCCESS = "success"
    FAILURE = "failure"
    CANCELED = "canceled"
    OTHER = "other"  # queued, starting, started, canceling, ...

    @property
    def dead(self) -> bool:
        """The run ended without finishing its work."""
        return self in (RunState.FAILURE, RunState.CANCELED)


@dataclass(frozen=True)
class RunView:
    """One Dagster run as the decision sees it.

    `slots` are the worker slots the run hosts when it is a worker run of this group (empty otherwise);
    `rerun_of` is the lost run it was requested to redo, if any.
    """

    run_id: str
    state: RunState
    slots: tuple[int, ...] = ()
    rerun_of: str | None = None


@dataclass(frozen=True)
class Eviction:
    """Remove `member_id` from the group: its run is dead."""

    member_id: str
    reason: str


@dataclass(frozen=True)
class Evictions:
    """The first step of a tick: members to evict, and whether to apply what the clock made due.

    Applying an eviction also applies the clock (the coordinator advances the group first), so `expire`
    is only acted on when no eviction went through.
    """

    evict: tuple[Eviction, ...]
    expire: bool


@dataclass(frozen=True)
class Rerun:
    """A run request for worker slot `slot`: `key` makes the run key unique for this loss."""

    slot: int
    generation: int
    key: str
    reason: str
    of: str  # the lost run's id, "" when unknown

    @property
    def run_key(self) -> str:
        """Unique for this loss of this slot (the group's name goes in front of it in Dagster's run key)."""
        return f"slot-{self.slot}:gen-{self.generation}:{self.key}"

    @property
    def loss(self) -> str:
        """What names the loss across Dagster instances (the key of its rerun claim): the lost run's id."""
        return self.of or self.run_key


@dataclass(frozen=True)
class Note:
    """A line for the sensor's log."""

    level: str  # "info" or "warning"
    text: str


@dataclass(frozen=True)
class Reruns:
    """The second step of a tick: the runs to request, the group's next cursor, what to log."""

    reruns: tuple[Rerun, ...]
    cursor: GroupCursor
    notes: tuple[Note, ...] = ()


def decide_evictions(live: MemberRuns, runs: Mapping[str, RunView], *, clock_due: bool) -> Evictions:
    """Evict each live member whose Dagster run is dead; otherwise apply the clock if it made anything due."""
    evict = []
    for member_id, (_slot, run_id) in live.items():
        run = runs.get(run_id) if run_id else None
        if run is not None and run.state.dead:
            evict.append(Eviction(member_id, f"run {run_id} {run.state.value}"))
    return Evictions(tuple(evict), expire=clock_due)


def decide_reruns(
    seen: GroupCursor,
    live: MemberRuns,
    runs: Mapping[str, RunView],
    events: Sequence[tuple[int, GroupEvent]],
    *,
    generation: int,
    scanned_until: float,
) -> Reruns:
    """Which worker slots lost work since `seen`, given the members alive now, their runs and the new events.

    `generation` is the group's generation before the events; `scanned_until` is the wall-clock time up to
    which failed and canceled runs were looked at (the next cursor starts there).
    """
    known = {**seen.members, **live}
    requests: dict[str, Rerun] = {}
    notes: list[Note] = []
    rerun_runs = list(seen.rerun_runs)
    removed: set[str] = set()
    last_event = seen.last_event
    for event_id, event in events:
        last_event = max(last_event, event_id)
        generation = max(generation, event.generation)
        if event.kind is EventKind.MEMBER_REMOVED and event.member_id is not None:
            removed.add(event.member_id)
        loss = lost_slot(event, known)
        run = runs.get(loss.run_id) if loss is not None and loss.run_id else None
        if loss is None or (run is not None and run.state.dead):
            continue  # not a loss; dead runs are rerun below, keyed by the run
        if run is not None and run.state is RunState.SUCCESS:
            continue  # a finished static member whose session ran out: nothing orphaned
        notes.append(Note("info", f"slot {loss.slot} lost member {loss.member_id} ({loss.reason})"))
        rerun = Rerun(loss.slot, loss.generation, loss.member_id[-12:], loss.reason, loss.run_id or "")
        requests[rerun.run_key] = rerun
        if loss.run_id:
            rerun_runs.append(loss.run_id)
    slots_by_run: dict[str, set[int]] = {}
    for slot, rid in known.values():
        if rid and slot is not None:
            slots_by_run.setdefault(rid, set()).add(slot)
    for run in runs.values():
        if not run.state.dead or run.run_id in rerun_runs:
            continue  # alive or finished, or already rerun when its member was removed
        for slot in sorted(slots_by_run.get(run.run_id) or run.slots):  # none: not a worker run of the group
            if run.rerun_of:
                notes.append(Note("warning", f"rerun {run.run_id} of slot {slot} {run.state.value}"))
                continue
            reason = f"run {run.run_id} {run.state.value}"
            rerun = Rerun(slot, generation, f"rerun-{run.run_id[:8]}", reason, run.run_id)
            requests[rerun.run_key] = rerun
    members = {mid: v for mid, v in known.items() if mid not in removed and mid in live}
    cursor = GroupCursor(last_event, members, scanned_until, tuple(rerun_runs[-REMEMBERED_RERUNS:]))
    return Reruns(tuple(requests.values()), cursor, tuple(notes))
