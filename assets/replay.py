"""Replays launched from Dagster: a batch run whose config says `replay_from` (or that carries the run tag
`cohort/replay_from`: a backfill launched from the UI with that tag) resets the selected topic partitions it
owns to that start, as a member of the group, before its batch reads them.

The start is `earliest`, an offset, or an ISO 8601 time (`2026-11-23T08:00:00Z`); the partitions are the
run's asset partitions (a backfill of some partitions of a topic asset, one run per the single-run backfill
policy) or all of them. Each member resets only partitions it owns in its generation (the ledger fences the
reset like a commit), so no partition is replayed by two runs at once; a partition this run reset already
(on another member, or in an earlier attempt after a rebalance) is not reset again. The reset itself is
`cohort reset-offsets`' (`cohort.runtime.offset_reset.apply_reset`): the same ledger entry, and Kafka's
committed offsets moved with it.

Example:
    >>> replay = Replay.parse("earliest", partitions=["0", "2"])
    >>> replay.target.describe(), [replay.selects(TopicPartition("orders", p)) for p in (1, 2)]
    ('earliest', [False, True])
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from cohort.assignment.ledger.resets import ResetTarget, parse_datetime
from cohort.common.types import TopicPartition

__all__ = ["REPLAY_TAG", "Replay"]

REPLAY_TAG = "cohort/replay_from"
"""Run tag of a replay run: where it replays from (`earliest`, `offset 42`, `datetime ...`)."""


@dataclass(frozen=True)
class Replay:
    """Replay `partitions` (Kafka partition numbers; None: every partition) from `target`."""

    target: ResetTarget
    partitions: frozenset[int] | None = None

    @classmethod
    def parse(cls, replay_from: str, partitions: Iterable[str] | None = None) -> Replay:
        """From the op config's `replay_from` and the run's partition keys; ValueError naming a bad value."""
        text = replay_from.strip()
        for prefix in ("offset ", "datetime "):  # the run tag's own forms (ResetTarget.describe), re-executed
            text = text.removeprefix(prefix)
        if text == "earliest":
            target = ResetTarget.earliest()
        elif text.isdigit():
            target = ResetTarget.to_offset(int(text))
        else:
            try:
                at: datetime = parse_datetime(text)
            except ValueError:
                raise ValueError(
                    f"replay_from must be 'earliest', an offset or an ISO 8601 time such as 2026-11-23T08:00:00Z, "
                    f"got {replay_from!r}"
                ) from None
            target = ResetTarget.to_datetime(at)
        chosen = None
        if partitions is not None:
            keys = list(partitions)
            if not all(k.isdigit() for k in keys):
                raise ValueError(f"partition keys are Kafka partition numbers, got {keys}")
            chosen = frozenset(int(k) for k in keys)
        return cls(target, chosen)

    def selects(self, tp: TopicPartition) -> bool:
        return self.partitions is None or tp.partition in self.partitions

    def wanted(self, owned: Sequence[TopicPartition], done: Iterable[TopicPartition]) -> list[TopicPartition]:
        """The owned partitions this replay still has to reset."""
        skip = set(done)
        return [tp for tp in owned if self.selects(tp) and tp not in skip]
