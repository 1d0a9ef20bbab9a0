"""Applying an offset reset: the one path of `cohort reset-offsets` and of a replay run, whichever orchestrator
started it.

A reset looks up the log's ends in Kafka (and, for a time, the offsets Kafka finds for it), plans each
partition's move (`cohort.assignment.ledger.resets.plan_reset`, pure), records the moves in the ledger as reset entries
(who, when, the target and why), then mirrors the new positions to Kafka's committed offsets under the group id,
so `kafka-consumer-groups --describe`, lag exporters and `cohort audit` see the reset at once, not only after
the next batch. The ledger is the truth: a mirror that fails is reported (the group's next batch mirrors its
heads), never undone. A dry run (`execute=False`) reads only.

The ledger is an operator's (`OperatorLedger`: refused while the group has live members, as Kafka refuses it)
or a member's (`GroupMember`: a replay run resets the partitions it owns, fenced like its commits).

Example:
    >>> ledger = OperatorLedger(coordinator, "orders-ingest")  # doctest: +SKIP
    >>> done = apply_reset(ledger, ResetTarget.earliest(), partitions, kafka_config, mirror, reason="bad VAT rule")
    ...     # doctest: +SKIP
"""

from __future__ import annotations

import getpass
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.ledger.resets import PartitionReset, ResetTarget, plan_reset
from cohort.assignment.protocol.messages import LedgerEntry
from cohort.common.ledger import OffsetMirror
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.kafka.client import offsets_for_times, watermarks

__all__ = ["OperatorLedger", "ResetLedger", "ResetOutcome", "apply_reset", "reset_actor"]


class ResetLedger(Protocol):
    """The ledger a reset moves: a `GroupMember` (a replay run's member) or an `OperatorLedger`."""

    @property
    def group(self) -> str: ...

    def committed_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]: ...

    def reset_offsets(
        self, positions: Mapping[TopicPartition, int], *, reason: str, actor: str | None = None
    ) -> tuple[LedgerEntry, ...]: ...


@dataclass(frozen=True)
class OperatorLedger:
    """An operator's reset of `group`: no member, so the coordinator refuses it while the group has live members."""

    coordinator: Coordinator
    group: str

    def committed_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        return self.coordinator.fetch_offsets(self.group, partitions)

    def reset_offsets(
        self, positions: Mapping[TopicPartition, int], *, reason: str, actor: str | None = None
    ) -> tuple[LedgerEntry, ...]:
        return self.coordinator.reset_offsets(self.group, positions, actor=actor or reset_actor(), reason=reason)


@dataclass(frozen=True)
class ResetOutcome:
    """What a reset did: every selected partition's move (`plans`), the ledger's reset entries (none for a dry run
    or for partitions already there), and why Kafka's committed offsets could not follow (None: they did)."""

    plans: tuple[PartitionReset, ...]
    entries: tuple[LedgerEntry, ...] = ()
    mirror_error: str | None = None

    @property
    def moves(self) -> dict[TopicPartition, int]:
        """The partitions whose position changes, and where to."""
        return {p.tp: p.new for p in self.plans if p.changes}


def reset_actor() -> str:
    """Who resets, as the ledger records it: the user and the host of this process."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def apply_reset(
    ledger: ResetLedger,
    target: ResetTarget,
    partitions: Sequence[TopicPartition],
    kafka_config: Mapping[str, Any],
    mirror: OffsetMirror,
    *,
    reason: str,
    execute: bool = True,
    run_id: str | None = None,
    timeout_s: float = 10.0,
) -> ResetOutcome:
    """Plan the reset of `partitions` to `target` and, with `execute`, record it and mirror it to Kafka.

    Each reset entry's note reads `<user>@<host>: <target>: <reason>`; `run_id` goes with the mirrored offsets
    (Kafka's commit metadata). Raises the ledger's `CoordinatorError` (NON_EMPTY_GROUP, PARTITION_NOT_OWNED...)
    with nothing recorded, and Kafka's `KafkaException` when the log's ends cannot be read.
    """
    marks = watermarks(kafka_config, partitions, timeout_s=timeout_s)
    at = target.timestamp_ms
    times = offsets_for_times(kafka_config, partitions, at, timeout_s=timeout_s) if at is not None else None
    plans = tuple(plan_reset(target, ledger.committed_offsets(partitions), marks, times))
    outcome = ResetOutcome(plans)
    if not execute or not outcome.moves:
        return outcome
    entries = ledger.reset_offsets(outcome.moves, actor=reset_actor(), reason=f"{target.describe()}: {reason}")
    moved = [OffsetRange(e.topic, e.partition, e.until_offset, e.until_offset) for e in entries]
    try:
        mirror.mirror(ledger.group, moved, run_id=run_id)
    except Exception as exc:  # the ledger's reset stands; the group's next batch mirrors its heads
        return ResetOutcome(plans, entries, f"{type(exc).__name__}: {exc}")
    return ResetOutcome(plans, entries)
