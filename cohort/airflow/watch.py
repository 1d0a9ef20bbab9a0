"""What the Airflow trigger watches in a group: members the coordinator removed while they held work, and
subscribed topics that grew or appeared; each becomes a signal to run some worker slots, claimed in the store.

`GroupWatch.poll()` is one look, blocking (the store, Kafka's metadata): the trigger runs it in a thread. It
applies the clock (expired sessions and progress deadlines remove their members), reads the group's new
events, and decides with `decide_signals` (a pure function of plain values). Every signal is claimed in the
group's store before it is returned (`Coordinator.claim_rerun`), so of two triggers watching one group (two
triggerers, or two DAG files defining the watcher) only one emits it, and its DAG reruns the slot once.

The first look only takes note (the latest event, the live members, the partition counts): what happened
before the trigger started is the schedule's to catch up on.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import GroupIdNotFoundError
from cohort.assignment.protocol.group_state import GroupEvent
from cohort.assignment.worker_group import WorkerGroup
from cohort.runtime.losses import lost_slot

__all__ = ["GroupWatch", "Signal", "WatchState", "decide_signals"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Signal:
    """Run worker slots `slots` of `group` because of `reason`; `key` names the loss (the claim's key)."""

    group: str
    slots: tuple[int, ...]
    reason: str
    key: str

    def payload(self) -> dict[str, object]:
        """The trigger event's payload (plain JSON; the DAG's first task reads `slots`)."""
        return {"group": self.group, "slots": list(self.slots), "reason": self.reason, "key": self.key}


@dataclass(frozen=True)
class WatchState:
    """What the watch has seen: the last event, the members (id -> (slot, run)), the subscribed counts."""

    last_event: int = 0
    members: Mapping[str, tuple[int | None, str | None]] = field(default_factory=dict)
    counts: Mapping[str, int] | None = None


def decide_signals(
    group: WorkerGroup,
    seen: WatchState,
    live: Mapping[str, tuple[int | None, str | None]],
    events: Sequence[tuple[int, GroupEvent]],
    counts: Mapping[str, int],
) -> tuple[list[Signal], WatchState]:
    """The signals since `seen` and the next state: a slot whose member was removed without leaving on its own
    (its session or progress deadline passed, or it was evicted) is rerun once per lost run; a change of the
    subscribed topics' partition counts (not the first sight) runs every slot."""
    known = {**seen.members, **live}
    signals: list[Signal] = []
    last = seen.last_event
    for event_id, event in events:
        last = max(last, event_id)
        loss = lost_slot(event, known)
        if loss is not None:
            reason = f"slot {loss.slot} lost member {loss.member_id}: {loss.reason}"
            signals.append(Signal(group.group, (loss.slot,), reason, loss.run_id or loss.member_id))
    if seen.counts is not None and dict(counts) != dict(seen.counts):
        digest = hashlib.sha1(repr(sorted(counts.items())).encode()).hexdigest()[:12]
        reason = f"subscribed topics changed to {dict(counts)}"
        signals.append(Signal(group.group, tuple(group.slots()), reason, f"topics-{digest}"))
    members = {mid: v for mid, v in known.items() if mid in live}
    return signals, WatchState(last, members, dict(counts))


class GroupWatch:
    """One trigger's view of a group: `poll()` looks once and answers the signals this watcher claimed."""

    def __init__(
        self,
        group: WorkerGroup,
        coordinator: Coordinator,
        subscribed_counts: Callable[[], Mapping[str, int]],
        holder: str,
    ) -> None:
        self.group = group
        self.coordinator = coordinator
        self.subscribed_counts = subscribed_counts
        self.holder = holder
        self.state: WatchState | None = None

    def poll(self) -> list[Signal]:
        """Apply the clock, read what changed, claim and answer the signals (none on the first look)."""
        name = self.group.group
        with contextlib.suppress(GroupIdNotFoundError):  # no member ever joined: nothing can be lost yet
            self.coordinator.expire(name)
        record = self.coordinator.store.load(name)
        members = record.members if record is not None else {}
        live = {mid: (self.group.slot_of(m.instance_id), m.client_id) for mid, m in members.items()}
        counts = self.subscribed_counts()
        if self.state is None:
            last = self.coordinator.last_group_event_id(name)
            self.state = WatchState(last, live, dict(counts))
            return []
        events = self.coordinator.group_events(name, after=self.state.last_event)
        decided, self.state = decide_signals(self.group, self.state, live, events, counts)
        if any(s.key.startswith("topics-") for s in decided):
            self.coordinator.report_topic_metadata(name, counts)  # the members rebalance onto the new partitions
        claimed = []
        for signal in decided:
            holder = self.coordinator.claim_rerun(name, lost=signal.key, slot=signal.slots[0], holder=self.holder)
            if holder == self.holder:
                claimed.append(signal)
            else:
                log.info("group %r: %s is signalled by %s", name, signal.reason, holder)
        return claimed
