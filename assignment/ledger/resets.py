"""Offset reset plans: where each partition's committed offset moves for a reset target, as Kafka's
`kafka-consumer-groups --reset-offsets` computes it (earliest, latest, an offset, a datetime, a shift, a
duration), from plain values the caller looked up (the current positions, Kafka's watermarks and, for a
time, the offsets Kafka finds for it).

Targets past either end of the log are clamped to it, as Kafka's tool does, and the plan says so. A reset
backward makes the group read records again (a replay); a reset forward skips records, on purpose.

Example:
    >>> from cohort.common.types import TopicPartition
    >>> tp = TopicPartition("orders", 0)
    >>> [p] = plan_reset(ResetTarget.shift(-30), {tp: 100}, {tp: (0, 120)})
    >>> (p.current, p.new, p.replayed, p.skipped)
    (100, 70, 30, 0)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from cohort.common.types import TopicPartition

__all__ = ["PartitionReset", "ResetTarget", "parse_datetime", "parse_duration", "plan_reset"]

TargetKind = Literal["earliest", "latest", "offset", "shift", "datetime"]


@dataclass(frozen=True)
class ResetTarget:
    """Where a reset moves partitions: `offset` for "offset" (the offset) and "shift" (the shift, signed),
    `at` for "datetime" (a time-zone aware instant; a duration is `now - duration`)."""

    kind: TargetKind
    offset: int | None = None
    at: datetime | None = None

    @classmethod
    def earliest(cls) -> ResetTarget:
        return cls("earliest")

    @classmethod
    def latest(cls) -> ResetTarget:
        return cls("latest")

    @classmethod
    def to_offset(cls, offset: int) -> ResetTarget:
        return cls("offset", offset=offset)

    @classmethod
    def shift(cls, by: int) -> ResetTarget:
        return cls("shift", offset=by)

    @classmethod
    def to_datetime(cls, at: datetime) -> ResetTarget:
        if at.tzinfo is None:
            raise ValueError(f"a reset time needs a time zone, got {at.isoformat()}")
        return cls("datetime", at=at)

    @classmethod
    def by_duration(cls, duration: timedelta, now: datetime) -> ResetTarget:
        """The offsets of `now - duration` (Kafka's `--by-duration`)."""
        return cls.to_datetime(now - duration)

    @property
    def timestamp_ms(self) -> int | None:
        """The target time in epoch milliseconds (for Kafka's offsets-for-times lookup), None otherwise."""
        return None if self.at is None else int(self.at.timestamp() * 1000)

    def describe(self) -> str:
        """The target as a person reads it: "earliest", "offset 42", "shift -30", "datetime 2026-..."."""
        if self.kind in ("offset", "shift"):
            return f"{self.kind} {self.offset}"
        if self.kind == "datetime":
            assert self.at is not None
            return f"datetime {self.at.isoformat()}"
        return self.kind


@dataclass(frozen=True)
class PartitionReset:
    """One partition's move: from `current` (None: nothing committed) to `new`, within Kafka's [low, high);
    `clamped` says the target fell outside the log and `new` is the nearest end."""

    tp: TopicPartition
    current: int | None
    new: int
    low: int
    high: int
    clamped: bool = False

    @property
    def replayed(self) -> int:
        """Records read again after the reset (a move backward)."""
        return max(0, (self.current if self.current is not None else self.new) - self.new)

    @property
    def skipped(self) -> int:
        """Records never read because of the reset (a move forward)."""
        return max(0, self.new - (self.current if self.current is not None else self.new))

    @property
    def changes(self) -> bool:
        return self.current != self.new


def plan_reset(
    target: ResetTarget,
    current: Mapping[TopicPartition, int | None],
    watermarks: Mapping[TopicPartition, tuple[int, int]],
    times: Mapping[TopicPartition, int | None] | None = None,
) -> list[PartitionReset]:
    """The move of every partition of `watermarks` for `target`.

    `current` holds the committed offsets (None: nothing committed); `times` the first offset at or after
    the target time per partition (None: no record that recent, so the end), needed for "datetime". A
    shift of a partition with nothing committed starts from its first available offset.
    """
    plans = []
    for tp, (low, high) in sorted(watermarks.items()):
        position = current.get(tp)
        if target.kind == "earliest":
            wanted = low
        elif target.kind == "latest":
            wanted = high
        elif target.kind == "offset":
            assert target.offset is not None
            wanted = target.offset
        elif target.kind == "shift":
            assert target.offset is not None
            wanted = (position if position is not None else low) + target.offset
        else:
            if times is None or tp not in times:
                raise ValueError(f"{tp}: no offset was looked up for {target.describe()}")
            found = times[tp]
            wanted = high if found is None else found
        new = min(max(wanted, low), high)
        plans.append(PartitionReset(tp, position, new, low, high, clamped=new != wanted))
    return plans


_DURATION = re.compile(
    r"^P(?:(?P<weeks>\d+(?:\.\d+)?)W)?(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


def parse_duration(text: str) -> timedelta:
    """An ISO 8601 duration of weeks, days, hours, minutes and seconds (`PT15M`, `P1DT6H`, `PT0.5S`), as
    Kafka's `--by-duration` takes; years and months are refused (their length varies)."""
    match = _DURATION.match(text.strip().upper())
    if not match or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise ValueError(
            f"{text!r} is not an ISO 8601 duration of days, hours, minutes and seconds such as PT15M or P1DT6H"
        )
    parts = {k: float(v) for k, v in match.groupdict().items() if v is not None}
    return timedelta(**parts)


def parse_datetime(text: str) -> datetime:
    """An ISO 8601 date-time (`2026-11-23T08:00:00+01:00`, `2026-11-23T07:00Z`, or a date); without a time
    zone it is UTC, the zone Kafka's timestamps are in."""
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 date-time such as 2026-11-23T08:00:00Z") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
