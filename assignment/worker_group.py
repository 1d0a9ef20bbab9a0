"""A consumer group as worker slots, for any orchestrator: its protocol settings, its slots' static ids, its store.

Dagster's `CohortGroupResource` and the Airflow DAG factory both describe a group with these settings; the
checks, the slots' instance ids (`<group>/worker-<n>`: successive runs of a slot are successive instances of
one Kafka `group.instance.id`) and the member a slot joins as are decided here, once.

Example:
    >>> group = WorkerGroup("orders-ingest", topics=("orders",), worker_slots=3)
    >>> group.instance_id(2)
    'orders-ingest/worker-2'
    >>> group.slot_of("orders-ingest/worker-2")
    2
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from cohort.assignment.assignors import get_assignor
from cohort.assignment.clock import Clock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.member import GroupMember
from cohort.assignment.protocol.backlog import LogOffsets
from cohort.assignment.protocol.group_state import GroupConfig
from cohort.assignment.protocol.messages import DEFAULT_ASSIGNORS
from cohort.assignment.settings import MemberSettings
from cohort.common.names import validate_group_name, validate_topic_name
from cohort.common.types import TopicPartition

__all__ = ["DEFAULT_STORE_URL", "WorkerGroup", "check_store_url"]

_SETTING_NAMES = re.compile(r"\b(session_timeout|rebalance_timeout|progress_timeout|heartbeat_interval|join_timeout)\b")


def _user_data_dir() -> Path:
    """`$XDG_DATA_HOME` when it is an absolute path, else `~/.local/share`."""
    given = os.environ.get("XDG_DATA_HOME", "")
    if given and Path(given).is_absolute():
        return Path(given)
    try:
        return Path.home() / ".local" / "share"
    except RuntimeError:  # no home directory at all: the working directory, made absolute
        return Path(".cohort").absolute()


DEFAULT_STORE_URL = f"sqlite:///{_user_data_dir() / 'cohort' / 'cohort.db'}"
"""The store of a group given no `store_url`, and of the `cohort` command given neither `--store-url` nor
`COHORT_STORE_URL`: a SQLite file in the user's data directory, `$XDG_DATA_HOME/cohort/cohort.db` (by default
`~/.local/share/cohort/cohort.db`), resolved once per process to an absolute path, so every process of the user
on this host uses the same file whatever its working directory. Use PostgreSQL when workers run on several
hosts."""


def check_store_url(value: str) -> str:
    """`value` if it is a SQLAlchemy URL; a ValueError that does not echo it otherwise (it may hold a password)."""
    try:
        sa.make_url(value)
    except sa.exc.ArgumentError:
        raise ValueError("store_url is not a SQLAlchemy URL (e.g. sqlite:///cohort.db)") from None
    return value


@dataclass(frozen=True)
class WorkerGroup:
    """One consumer group's settings as its worker slots take part in it (validated on construction).

    The settings map to Kafka's consumer settings: `session_timeout_s` (session.timeout.ms),
    `rebalance_timeout_s` (the join phase's wait), `progress_timeout_s` (max.poll.interval.ms; default: the
    rebalance timeout), `assignors` (partition.assignment.strategy, in order of preference), a slot's instance
    id (group.instance.id). `initial_rebalance_delay_s` is the coordinator's group.initial.rebalance.delay.ms;
    `leave_on_finish=False` keeps a finished slot's static membership until its session expires.
    """

    group: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    assignors: tuple[str, ...] = DEFAULT_ASSIGNORS
    worker_slots: int = 3
    session_timeout_s: float = 30.0
    rebalance_timeout_s: float = 60.0
    progress_timeout_s: float | None = None
    heartbeat_interval_s: float | None = None
    join_timeout_s: float = 120.0
    initial_rebalance_delay_s: float = 3.0
    leave_on_finish: bool = True
    store_url: str = DEFAULT_STORE_URL

    def __post_init__(self) -> None:
        validate_group_name(self.group)
        for topic in self.topics:
            validate_topic_name(topic)
        if not self.assignors:
            raise ValueError("assignors needs at least one assignor name")
        for name in self.assignors:
            get_assignor(name)  # UnknownAssignorError names the known ones
        if isinstance(self.worker_slots, bool) or not 1 <= self.worker_slots <= 1000:
            raise ValueError(f"worker_slots must be 1..1000, got {self.worker_slots!r}")
        if not self.rebalance_timeout_s > 0 or not self.join_timeout_s > 0:
            raise ValueError("rebalance_timeout_s and join_timeout_s must be > 0")
        if not self.initial_rebalance_delay_s >= 0:
            raise ValueError("initial_rebalance_delay_s must be >= 0")
        check_store_url(self.store_url)
        bounds = GroupConfig()
        if not bounds.min_session_timeout <= self.session_timeout_s <= bounds.max_session_timeout:
            raise ValueError(
                f"session_timeout_s={self.session_timeout_s} is outside the coordinator's range "
                f"[{bounds.min_session_timeout}, {bounds.max_session_timeout}]"
            )
        try:
            settings = self.member_settings()  # the member's own checks: pattern, assignors, timeouts
        except ValueError as exc:  # name this record's fields (the settings' names end in _s here)
            raise ValueError(_SETTING_NAMES.sub(r"\1_s", str(exc))) from None
        if self.heartbeat_interval_s is not None and not self.heartbeat_interval_s < self.session_timeout_s:
            raise ValueError("heartbeat_interval_s must be > 0 and below session_timeout_s")
        if not settings.subscribes:
            raise ValueError(f"group {self.group!r} subscribes to nothing: give topics or topic_pattern")

    # --------------------------------------------------------------------------------------- slots

    def instance_id(self, slot: int) -> str:
        """The static instance id of worker slot `slot` (1-based)."""
        if not 1 <= slot <= self.worker_slots:
            raise ValueError(f"group {self.group!r} has worker slots 1..{self.worker_slots}, got {slot}")
        return f"{self.group}/worker-{slot}"

    def slot_of(self, instance_id: str | None) -> int | None:
        """The worker slot of a static instance id of this group, or None if it is not one."""
        if instance_id is None:
            return None
        match = re.fullmatch(re.escape(self.group) + r"/worker-(\d+)", instance_id)
        if match is None:
            return None
        slot = int(match.group(1))
        return slot if 1 <= slot <= self.worker_slots else None

    def slots(self) -> list[int]:
        """All worker slots, 1..worker_slots."""
        return list(range(1, self.worker_slots + 1))

    # ---------------------------------------------------------------------------------- coordinator

    def group_config(self) -> GroupConfig:
        """The coordinator-side settings for this group."""
        return GroupConfig(initial_rebalance_delay=self.initial_rebalance_delay_s)

    def member_settings(self) -> MemberSettings:
        """The member-side settings every worker of this group joins with."""
        return MemberSettings(
            topics=tuple(self.topics),
            topic_pattern=self.topic_pattern,
            assignors=tuple(self.assignors),
            session_timeout=self.session_timeout_s,
            rebalance_timeout=self.rebalance_timeout_s,
            progress_timeout=self.progress_timeout_s,
            heartbeat_interval=self.heartbeat_interval_s,
            join_timeout=self.join_timeout_s,
        )

    def open_coordinator(self, clock: Clock | None = None) -> Coordinator:
        """A new coordinator client on `store_url` (the caller closes it); a store that cannot be used raises a
        `StoreError` naming the store and the problem."""
        return Coordinator.from_url(self.store_url, clock=clock, config=self.group_config())

    def member(
        self,
        coordinator: Coordinator,
        slot: int,
        *,
        run_id: str | None,
        topic_metadata: Callable[[], Mapping[str, int]] | None = None,
        log_offsets: Callable[[Sequence[TopicPartition]], LogOffsets] | None = None,
    ) -> GroupMember:
        """A `GroupMember` for worker slot `slot` (its static instance id), reporting `run_id` as its client id;
        `log_offsets` (Kafka's (first, end) offsets) feeds a backlog-aware assignor when the slot leads."""
        return GroupMember(
            coordinator,
            self.group,
            self.member_settings(),
            instance_id=self.instance_id(slot),
            client_id=run_id,
            topic_metadata=topic_metadata,
            log_offsets=log_offsets,
            poll_interval=0.2,
        )
