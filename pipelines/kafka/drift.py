"""Kafka's committed offsets of a group that disagree with its ledger, said the same way by `cohort audit` and by a
worker slot's batch.

The ledger is the source of truth; Kafka's committed offsets under the group id are its mirror, and Cohort never
reads them back. An offset that differs was moved outside Cohort (Kafka's own `kafka-consumer-groups
--reset-offsets` or `--delete-offsets`, a consumer that used the group id) or was left by a mirror that failed:
nothing tells the two apart (neither says who or why), so Cohort adopts neither. The group's next batch reads from
the ledger and its mirror overwrites Kafka's offset, `cohort audit` reports the difference and `--repair` re-mirrors
at once; moving a group's offsets is `cohort reset-offsets`' work (docs/replay.md), which records the reset in the
ledger and moves Kafka with it (docs/guarantees.md, "Kafka's own reset tool on a Cohort group").

Example:
    >>> drift(0, 20)
    "Kafka's committed offset 0 is behind the ledger's 20"
    >>> drift(20, 20) is None
    True
"""

from __future__ import annotations

from collections.abc import Mapping

from cohort.common.types import TopicPartition

__all__ = ["OUTSIDE_CAUSES", "audit_drift_message", "batch_drift_warning", "drift"]

OUTSIDE_CAUSES = (
    "moved outside Cohort (Kafka's own kafka-consumer-groups --reset-offsets or --delete-offsets, a consumer "
    "using this group id) or left by a Kafka mirror that failed"
)
"""What leaves Kafka's committed offset of a Cohort group away from the ledger's."""

USE_RESET = "to move the group's offsets, use `cohort reset-offsets` (docs/replay.md)"


def drift(kafka: int | None, ledger: int | None) -> str | None:
    """How Kafka's committed offset differs from the ledger's, as one clause; None when they agree."""
    if kafka == ledger:
        return None
    if ledger is None:
        return f"Kafka's committed offset is {kafka} but the ledger has none"
    if kafka is None:
        return f"Kafka has no committed offset, the ledger's is {ledger}"
    side = "behind" if kafka < ledger else "ahead of"
    return f"Kafka's committed offset {kafka} is {side} the ledger's {ledger}"


def _consequence(kafka: int | None, ledger: int) -> str:
    """What the next batch does instead of what Kafka's offset would mean."""
    if kafka is not None and kafka < ledger:
        return f"the next batch starts at {ledger} (it does not read [{kafka}, {ledger}) again)"
    if kafka is not None and kafka > ledger:
        return f"the next batch starts at {ledger} (it does not skip [{ledger}, {kafka}))"
    return f"the next batch starts at {ledger}"


def audit_drift_message(kafka: int | None, ledger: int) -> str:
    """`cohort audit`'s finding on a partition whose Kafka committed offset differs from the ledger's `ledger`."""
    what = drift(kafka, ledger)
    return (
        f"{what}: {OUTSIDE_CAUSES}. Cohort reads from its ledger: {_consequence(kafka, ledger)} and its mirror "
        f"overwrites Kafka's offset; {USE_RESET}"
    )


def batch_drift_warning(group: str, drifts: Mapping[TopicPartition, tuple[int | None, int | None]]) -> str:
    """A batch's warning on the partitions whose (Kafka, ledger) committed offsets differ, before it reads."""
    listed = "; ".join(f"{tp}: {drift(kafka, ledger)}" for tp, (kafka, ledger) in sorted(drifts.items()))
    return (
        f"group {group!r}: {listed}. Kafka's committed offsets were {OUTSIDE_CAUSES}. This batch reads from the "
        f"ledger, as every batch does (a partition it never committed: from the reset policy's start), and its "
        f"mirror overwrites Kafka's offsets; {USE_RESET}"
    )
