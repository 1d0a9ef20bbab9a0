"""Public value types of the assignment layer: topic partitions, subscriptions, the assignor protocol.

These are the records every assignor and the coordinator exchange. They are immutable and
import nothing beyond the standard library (and `cohort.common.validation`, which imports only that), so the
protocol's decisions stay testable with plain values.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from cohort.common.types import TopicPartition

__all__ = ["COOPERATIVE", "EAGER", "Assignment", "Assignor", "Subscription"]

EAGER = "eager"
COOPERATIVE = "cooperative"


@dataclass(frozen=True)
class Subscription:
    """What a member asks for and what it holds now.

    `owned_partitions` were assigned to the member in `generation` (-1 when unknown); sticky assignors use
    them to keep partitions where they are, and the generation settles conflicting claims.
    """

    topics: Collection[str]
    owned_partitions: Sequence[TopicPartition] = ()
    generation: int = -1
    rack: str | None = None


Assignment = dict[str, list[TopicPartition]]
"""member id -> sorted partitions; every member id is a key, an idle member maps to []."""


@runtime_checkable
class Assignor(Protocol):
    """A stateless partition assignor: everything it needs is passed to `assign`."""

    name: str
    protocol: str  # EAGER or COOPERATIVE

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> Assignment: ...
