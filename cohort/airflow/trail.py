"""Airflow's audit trail as a `TrailSource`: the asset events a group's alias holds, read after a time.

Airflow's inlet-event accessor filters events by time (`after`, inclusive), not by id, so a partition's cursor
here is the event's timestamp in microseconds: one query per run fetches the alias's events from the earliest
cursor of the partitions looked at, and each partition takes its own events from it. Events at the cursor's own
instant are read again, which only re-matches ranges already settled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from cohort.airflow.lineage import group_alias
from cohort.assignment.ledger.trail import TrailEvent, TrailMark
from cohort.common.types import TopicPartition

__all__ = ["AIRFLOW_TRAIL", "AirflowTrail"]

AIRFLOW_TRAIL = "airflow"
"""The trail's name in the store's marks."""


def _micros(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000)


class AirflowTrail:
    """The group's asset events (through its alias), fetched once from the earliest of `marks`' cursors."""

    def __init__(self, inlet_events: Any, group: str, marks: Mapping[TopicPartition, TrailMark]) -> None:
        cursors = [m.event_cursor for m in marks.values()]
        since = None if not cursors or None in cursors else min(c for c in cursors if c is not None)
        self._events: dict[TopicPartition, list[TrailEvent]] = {}
        for event in _read(inlet_events, group, since):
            tp, found = _parse(event)
            if tp is not None:
                self._events.setdefault(tp, []).append(found)
        for events in self._events.values():
            events.sort(key=lambda e: e.event_id)

    def events_after(self, tp: TopicPartition, cursor: int | None) -> list[TrailEvent]:
        """The partition's events stored after `cursor` (microseconds), oldest first."""
        return [e for e in self._events.get(tp, []) if cursor is None or e.event_id > cursor]


def _read(inlet_events: Any, group: str, since: int | None) -> Iterable[Any]:
    if inlet_events is None:
        return ()
    accessor = inlet_events[group_alias(group)]
    if since is not None and hasattr(accessor, "after"):
        accessor = accessor.after(datetime.fromtimestamp(since / 1_000_000, UTC).isoformat())
    return accessor


def _parse(event: Any) -> tuple[TopicPartition | None, TrailEvent]:
    """The event's partition and its trail record (no partition: an event of someone else's making)."""
    extra = getattr(event, "extra", None) or {}
    when = getattr(event, "timestamp", None)
    event_id = _micros(when) if isinstance(when, datetime) else int(getattr(event, "id", 0))
    source = str(getattr(event, "source_run_id", None) or f"event {getattr(event, 'id', '?')}")
    try:
        tp = TopicPartition(str(extra["cohort/topic"]), int(extra["cohort/partition"]))
    except (KeyError, TypeError, ValueError):
        return None, TrailEvent(event_id, None, None, source)
    try:
        start, until = int(extra["cohort/from_offset"]), int(extra["cohort/until_offset"])
    except (KeyError, TypeError, ValueError):
        return tp, TrailEvent(event_id, None, None, source)
    return tp, TrailEvent(event_id, start, until, source)
