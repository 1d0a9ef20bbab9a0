"""The quarantine's circuit breaker: a batch that quarantines too much of what it read fails before its commit.

A few malformed records among many are what the quarantine is for. Most or all of a partition's records
failing, usually for one reason, is a configuration problem (a wrong format, schema, model or registry), and
committing such a batch would move the group past records that are fine. So once the reading tasks have staged
their outputs and the counts add up, the batch compares each partition's share of quarantined records, and the
whole batch's, with `PipelineSpec.quarantine_limit`: past it (and past `quarantine_limit_min_records`
quarantined records, so that one bad record of one is not a trip) the batch fails with nothing committed or
published, its staged outputs withdrawn, and an error naming the partitions, their shares and the commonest
reasons with their counts.

`QuarantineLimit.exceeded` decides (pure); `refuse_over_limit` applies it to a batch's staged counts.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cohort.common.types import TopicPartition
from cohort.common.validation import as_integer, is_number

__all__ = [
    "LimitTrip",
    "PartitionShare",
    "QuarantineLimit",
    "QuarantineLimitError",
    "refuse_over_limit",
    "staged_reasons",
]

DEFAULT_FRACTION = 0.5
DEFAULT_MIN_RECORDS = 10
_SHOWN_PARTITIONS = 5
_SHOWN_REASONS = 3
_REASON_CHARS = 160


class QuarantineLimitError(RuntimeError):
    """A batch quarantined more of its records than the pipeline's quarantine limit allows: nothing was
    committed or published."""


@dataclass(frozen=True)
class PartitionShare:
    """One partition's quarantined records among those the batch read of it."""

    tp: TopicPartition
    quarantined: int
    consumed: int

    @property
    def fraction(self) -> float:
        return self.quarantined / self.consumed if self.consumed else 0.0

    def describe(self) -> str:
        return f"{self.tp} {self.quarantined} of {self.consumed} records ({_percent(self.fraction)})"


@dataclass(frozen=True)
class QuarantineLimit:
    """At most `fraction` of a partition's records in a batch, and of the batch's, may go to the quarantine once
    at least `min_records` of them do (a smaller count never trips)."""

    fraction: float = DEFAULT_FRACTION
    min_records: int = DEFAULT_MIN_RECORDS

    def __post_init__(self) -> None:
        if not is_number(self.fraction) or not 0.0 <= float(self.fraction) <= 1.0:
            raise ValueError(
                f"quarantine_limit must be a fraction in [0, 1] (or None: no limit), got {self.fraction!r}"
            )
        if as_integer(self.min_records, "quarantine_limit_min_records") < 1:
            raise ValueError(f"quarantine_limit_min_records must be >= 1, got {self.min_records}")

    @classmethod
    def of(cls, fraction: float | None, min_records: int) -> QuarantineLimit | None:
        """The limit a spec's settings give (checked), None when they disable it (None or 1.0)."""
        if fraction is None:
            as_integer(min_records, "quarantine_limit_min_records")
            return None
        limit = cls(fraction, min_records)
        return None if limit.fraction >= 1.0 else limit

    def _past(self, quarantined: int, consumed: int) -> bool:
        return quarantined >= self.min_records and quarantined > self.fraction * consumed

    def exceeded(self, counts: Mapping[TopicPartition, tuple[int, int]]) -> LimitTrip | None:
        """The trip for a batch's (quarantined, consumed) counts per partition, None when it is within the limit.

        Each partition is held to the limit, and so is the batch as a whole (many partitions of a few records
        each, all failing). The trip names the partitions past the fraction, the most quarantined first.
        """
        shares = [PartitionShare(tp, q, c) for tp, (q, c) in sorted(counts.items()) if c > 0]
        quarantined = sum(s.quarantined for s in shares)
        consumed = sum(s.consumed for s in shares)
        tripped = [s for s in shares if self._past(s.quarantined, s.consumed)]
        if not tripped and not self._past(quarantined, consumed):
            return None
        named = tripped or [s for s in shares if s.quarantined and s.quarantined > self.fraction * s.consumed]
        named.sort(key=lambda s: (-s.fraction, -s.quarantined, s.tp))
        return LimitTrip(self, tuple(named), quarantined, consumed, whole_batch=not tripped)


@dataclass(frozen=True)
class LimitTrip:
    """A batch past its quarantine limit: the partitions past the fraction, and the batch's totals."""

    limit: QuarantineLimit
    partitions: tuple[PartitionShare, ...]
    quarantined: int
    consumed: int
    whole_batch: bool
    """Whether only the batch's total is past the limit (each partition quarantined fewer than min_records)."""

    def message(self, reasons: Sequence[tuple[str, int]]) -> str:
        """One line: what is past the limit, the commonest reasons with their counts, and how to relax it."""
        shown = ", ".join(s.describe() for s in self.partitions[:_SHOWN_PARTITIONS])
        more = len(self.partitions) - _SHOWN_PARTITIONS
        if more > 0:
            shown += f" and {more} more partition{'s' if more > 1 else ''}"
        if self.whole_batch:
            share = _percent(self.quarantined / self.consumed if self.consumed else 0.0)
            what = f"the batch quarantined {self.quarantined} of its {self.consumed} records ({share})"
            what += f" ({shown})" if shown else ""
        else:
            what = f"quarantined {shown}"
        because = "; ".join(f"{count} x {_quoted(reason)}" for reason, count in reasons[:_SHOWN_REASONS])
        return (
            f"quarantine limit exceeded, nothing was committed: {what}; past quarantine_limit="
            f"{self.limit.fraction:g} (it applies from {self.limit.min_records} quarantined records). Commonest "
            f"reasons: {because or 'unknown'}. Fix the cause and rerun, or relax PipelineSpec(quarantine_limit=...) "
            "(None disables it)"
        )


def _percent(fraction: float) -> str:
    shown = math.floor(fraction * 1000) / 10  # 99.95% is not 100%
    return f"{shown:g}%"


def _quoted(reason: str) -> str:
    flat = " ".join(str(reason).split())
    return repr(flat if len(flat) <= _REASON_CHARS else flat[: _REASON_CHARS - 3] + "...")


def staged_reasons(spark: Any, directories: Sequence[str]) -> list[tuple[str, int]]:
    """The quarantine reasons in staged quarantine directories with their counts, commonest first: with
    pyarrow where it reaches them, else with Spark. Empty when they cannot be read (the trip stands anyway)."""
    from cohort.pipelines.tasks.writer import arrow_filesystem

    counts: Counter[str] = Counter()
    try:
        resolved = [arrow_filesystem(d) for d in directories]
        if all(r is not None for r in resolved):
            import pyarrow.compute as pc
            import pyarrow.dataset as ds

            for found in resolved:
                assert found is not None
                filesystem, path = found
                table = ds.dataset(path, filesystem=filesystem, format="parquet").to_table(columns=["reason"])
                found_counts: Any = pc.value_counts(table.column("reason"))  # a struct array: values, counts
                for reason, count in zip(
                    found_counts.field("values").to_pylist(), found_counts.field("counts").to_pylist(), strict=True
                ):
                    counts[str(reason)] += int(count)
        elif directories:
            frame = spark.read.parquet(*directories).groupBy("reason").count()
            for row in frame.orderBy("count", ascending=False).limit(_SHOWN_REASONS).collect():
                counts[str(row["reason"])] += int(row["count"])
    except Exception:  # reasons are a help in the message: the limit's decision does not depend on them
        return []
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def refuse_over_limit(
    spark: Any,
    limit: QuarantineLimit | None,
    counts: Mapping[TopicPartition, tuple[int, int]],
    staged: Callable[[TopicPartition], str],
) -> None:
    """QuarantineLimitError when a batch's (quarantined, consumed) counts per partition are past `limit`, its
    commonest reasons read from the partitions' staged quarantine directories (`staged(tp)`)."""
    trip = None if limit is None else limit.exceeded(counts)
    if trip is None:
        return
    directories = [staged(s.tp) for s in trip.partitions if s.quarantined]
    raise QuarantineLimitError(trip.message(staged_reasons(spark, directories)))
