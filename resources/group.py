"""The group resource: one consumer group's protocol settings, its worker slots and the coordinator's store.

It embeds the coordinator client (`get_coordinator()`, cached per clock) and the assignor choice (a
preference list voted on by the members). A worker slot is a static member identity,
`<group>/worker-<n>`: successive runs of the slot are successive instances of one Kafka
`group.instance.id`. No asset logic here: the worker and the sensors use it.

Example:
    >>> group = CohortGroupResource(group="orders-ingest", topics=["orders"], worker_slots=3)
    >>> group.instance_id(2)
    'orders-ingest/worker-2'
    >>> group.slot_of("orders-ingest/worker-2")
    2
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

import dagster as dg
from pydantic import Field, PrivateAttr, field_validator, model_validator

from cohort.assignment import get_assignor
from cohort.assignment.clock import Clock, SystemClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.member import GroupMember
from cohort.assignment.protocol.backlog import LogOffsets
from cohort.assignment.protocol.group_state import GroupConfig
from cohort.assignment.protocol.messages import DEFAULT_ASSIGNORS
from cohort.assignment.settings import MemberSettings
from cohort.assignment.worker_group import DEFAULT_STORE_URL, WorkerGroup, check_store_url
from cohort.common.names import validate_group_name, validate_topic_name
from cohort.common.types import TopicPartition

__all__ = ["DEFAULT_STORE_URL", "CohortGroupResource"]

_SYSTEM_CLOCK = SystemClock()


class CohortGroupResource(dg.ConfigurableResource):
    """A consumer group as Dagster runs take part in it.

    Attributes map to Kafka's consumer settings: `session_timeout_s` (session.timeout.ms),
    `rebalance_timeout_s` (the join phase's wait), `progress_timeout_s` (max.poll.interval.ms),
    `assignors` (partition.assignment.strategy, in order of preference), a worker slot's instance id
    (group.instance.id).
    """

    group: str = Field(description="Consumer group name (letters, digits, '.', '_', '-').")
    topics: list[str] = Field(default_factory=list, description="Explicitly subscribed topics.")
    topic_pattern: str | None = Field(
        default=None, description="Regular expression; every topic it fully matches is subscribed too."
    )
    assignors: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ASSIGNORS), description="Assignor names in order of preference."
    )
    worker_slots: int = Field(default=3, ge=1, le=1000, description="Number of worker slots (static members).")
    session_timeout_s: float = Field(default=30.0, description="Seconds without heartbeat before eviction.")
    rebalance_timeout_s: float = Field(default=60.0, gt=0, description="Seconds a join phase waits for members.")
    progress_timeout_s: float | None = Field(
        default=None, description="Seconds a member may hold partitions without progress (default: rebalance)."
    )
    heartbeat_interval_s: float | None = Field(
        default=None, description="Seconds between heartbeats (default: a third of the session timeout)."
    )
    join_timeout_s: float = Field(default=120.0, gt=0, description="Give up joining after this many seconds.")
    initial_rebalance_delay_s: float = Field(
        default=3.0, ge=0, description="An empty group's first join phase waits this long for more members."
    )
    leave_on_finish: bool = Field(
        default=True, description="A finished worker leaves the group (False: keep its static membership)."
    )
    store_url: str = Field(
        default=DEFAULT_STORE_URL,
        description="SQLAlchemy URL of the coordinator's store (default: cohort/cohort.db in the user's data dir).",
    )

    _coordinators: dict[int, Coordinator] = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown_settings(cls, values: object) -> object:
        """A misspelt setting is an error, not silently ignored."""
        if isinstance(values, dict):
            unknown = sorted(k for k in values if isinstance(k, str) and k not in cls.model_fields)
            if unknown:
                raise ValueError(f"unknown settings {unknown}; the group's settings are {sorted(cls.model_fields)}")
        return values

    @field_validator("group")
    @classmethod
    def _check_group(cls, value: str) -> str:
        return validate_group_name(value)

    @field_validator("topics")
    @classmethod
    def _check_topics(cls, value: list[str]) -> list[str]:
        return [validate_topic_name(t) for t in value]

    @field_validator("assignors")
    @classmethod
    def _check_assignors(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("assignors needs at least one assignor name")
        for name in value:
            get_assignor(name)  # UnknownAssignorError names the known ones
        return value

    @field_validator("store_url", mode="before")
    @classmethod
    def _check_store_url(cls, value: object) -> object:
        if isinstance(value, dg.EnvVar) or not isinstance(value, str):
            return value  # an EnvVar is read when the resource is used (it may hold a password)
        return check_store_url(value)

    @model_validator(mode="after")
    def _check_group_settings(self) -> CohortGroupResource:
        # every setting's check, in one place; the store URL has its own (it may name an environment variable)
        self._settings(DEFAULT_STORE_URL)
        return self

    def worker_group(self) -> WorkerGroup:
        """The group's settings as the orchestrator-free core takes them (cohort.assignment.worker_group)."""
        return self._settings(self.store_url)

    def _settings(self, store_url: str) -> WorkerGroup:
        return WorkerGroup(
            group=self.group,
            topics=tuple(self.topics),
            topic_pattern=self.topic_pattern,
            assignors=tuple(self.assignors),
            worker_slots=self.worker_slots,
            session_timeout_s=self.session_timeout_s,
            rebalance_timeout_s=self.rebalance_timeout_s,
            progress_timeout_s=self.progress_timeout_s,
            heartbeat_interval_s=self.heartbeat_interval_s,
            join_timeout_s=self.join_timeout_s,
            initial_rebalance_delay_s=self.initial_rebalance_delay_s,
            leave_on_finish=self.leave_on_finish,
            store_url=store_url,
        )

    # --------------------------------------------------------------------------------------- slots

    def instance_id(self, slot: int) -> str:
        """The static instance id of worker slot `slot` (1-based)."""
        return self.worker_group().instance_id(slot)

    def slot_of(self, instance_id: str | None) -> int | None:
        """The worker slot of a static instance id of this group, or None if it is not one."""
        return self.worker_group().slot_of(instance_id)

    def slots(self) -> list[int]:
        """All worker slots, 1..worker_slots."""
        return self.worker_group().slots()

    # ---------------------------------------------------------------------------------- coordinator

    def group_config(self) -> GroupConfig:
        """The coordinator-side settings for this group."""
        return self.worker_group().group_config()

    def member_settings(self) -> MemberSettings:
        """The member-side settings every worker run of this group joins with (validated on construction)."""
        return self.worker_group().member_settings()

    def get_coordinator(self, clock: Clock | None = None) -> Coordinator:
        """The coordinator client on `store_url` for `clock` (the system clock by default).

        Owned by this resource: created on first use (one per clock), closed by `close()`, which Dagster
        calls through `teardown_after_execution` at the end of each run or sensor tick. A SQLite file's
        parent directory is created when missing. A store that cannot be used raises a `StoreError`
        (cohort.assignment.errors) whose message names the store and the problem.
        """
        clock = clock if clock is not None else _SYSTEM_CLOCK
        with self._lock:
            cached = self._coordinators.get(id(clock))
            if cached is not None and cached.clock is clock:
                return cached
            coordinator = self.worker_group().open_coordinator(clock)
            self._coordinators[id(clock)] = coordinator
            return coordinator

    def member(
        self,
        slot: int,
        *,
        run_id: str | None,
        topic_metadata: Callable[[], Mapping[str, int]] | None = None,
        coordinator: Coordinator | None = None,
        log_offsets: Callable[[Sequence[TopicPartition]], LogOffsets] | None = None,
    ) -> GroupMember:
        """A `GroupMember` for worker slot `slot` (static instance id), reporting `run_id` as its client id;
        `log_offsets` (e.g. `KafkaResource.watermarks`) feeds the `lag-sticky` assignor when the slot leads."""
        coordinator = coordinator if coordinator is not None else self.get_coordinator()
        return self.worker_group().member(
            coordinator, slot, run_id=run_id, topic_metadata=topic_metadata, log_offsets=log_offsets
        )

    def close(self) -> None:
        """Close the coordinators this resource opened (their store engines)."""
        with self._lock:
            coordinators = list(self._coordinators.values())
            self._coordinators.clear()
        for coordinator in coordinators:
            coordinator.close()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """Dagster's end of a run or sensor tick: close what this resource opened."""
        self.close()
