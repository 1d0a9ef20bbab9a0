"""What one member of a group declares, in one record: its subscription, its assignors and its timeouts.

These are Kafka's consumer settings (subscription, `partition.assignment.strategy`, `session.timeout.ms`,
`max.poll.interval.ms`, `heartbeat.interval.ms`) as a frozen value. The Dagster group resource builds one
from its fields, `GroupMember` takes it whole, and `join_request` is the one place a join request is made
from it, so a setting is validated and handed on once instead of being relayed through every constructor.

Example:
    >>> settings = MemberSettings(topics=("orders",), session_timeout=30.0)
    >>> settings.effective_heartbeat_interval
    10.0
    >>> settings.join_request(instance_id="orders-ingest/worker-1", client_id="run-1").topics
    ('orders',)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from cohort.assignment.protocol.messages import DEFAULT_ASSIGNORS, JoinRequest
from cohort.common.names import validate_topic_name

__all__ = ["MemberSettings"]


def _positive(value: float | None, name: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")


@dataclass(frozen=True)
class MemberSettings:
    """A member's subscription, assignor preferences and timeouts (seconds), validated when built.

    Attributes:
        topics: explicitly subscribed topics.
        topic_pattern: a regular expression; every known topic it fully matches is subscribed too.
        assignors: assignor names in order of preference (the member's ballot in the assignor vote).
        session_timeout: seconds without a heartbeat after which the coordinator removes the member.
        rebalance_timeout: seconds a join phase waits for this member (None: the coordinator's default).
        progress_timeout: seconds the member may hold partitions without committing or reporting progress
            (None: the rebalance timeout).
        heartbeat_interval: seconds between heartbeats (None: a third of the session timeout).
        join_timeout: the member gives up a join after this many seconds (None: never).
    """

    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    assignors: tuple[str, ...] = DEFAULT_ASSIGNORS
    session_timeout: float = 45.0
    rebalance_timeout: float | None = None
    progress_timeout: float | None = None
    heartbeat_interval: float | None = None
    join_timeout: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.topics, str):
            raise ValueError("topics must be a sequence of topic names, not a string")
        object.__setattr__(self, "topics", tuple(validate_topic_name(t) for t in self.topics))
        if isinstance(self.assignors, str):
            raise ValueError("assignors must be a sequence of assignor names, not a string")
        object.__setattr__(self, "assignors", tuple(self.assignors))
        if not self.assignors or not all(isinstance(a, str) and a for a in self.assignors):
            raise ValueError(f"assignors needs at least one assignor name, got {self.assignors!r}")
        if self.topic_pattern is not None:
            try:
                re.compile(self.topic_pattern)
            except (re.error, TypeError) as exc:
                raise ValueError(
                    f"topic_pattern {self.topic_pattern!r} is not a valid regular expression: {exc}"
                ) from None
        for name in ("session_timeout", "rebalance_timeout", "progress_timeout", "heartbeat_interval", "join_timeout"):
            _positive(getattr(self, name), name)

    @property
    def subscribes(self) -> bool:
        """Whether the member subscribes to anything (topics or a pattern)."""
        return bool(self.topics) or self.topic_pattern is not None

    @property
    def effective_heartbeat_interval(self) -> float:
        """Seconds between heartbeats: the setting, or a third of the session timeout."""
        return self.heartbeat_interval if self.heartbeat_interval is not None else self.session_timeout / 3

    def join_request(self, *, instance_id: str | None = None, client_id: str | None = None) -> JoinRequest:
        """The first join request of a member with these settings (no member id yet)."""
        return JoinRequest(
            instance_id=instance_id,
            client_id=client_id,
            topics=self.topics,
            topic_pattern=self.topic_pattern,
            assignors=self.assignors,
            session_timeout=self.session_timeout,
            rebalance_timeout=self.rebalance_timeout,
            progress_timeout=self.progress_timeout,
        )
