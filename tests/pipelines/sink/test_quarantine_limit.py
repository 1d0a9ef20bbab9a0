"""The quarantine limit's decision (pure): which batches trip it, what the error says, and the spec's settings."""

from __future__ import annotations

import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.sink.quarantine_limit import QuarantineLimit
from cohort.pipelines.spec import PipelineSpec

A, B, C = TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("orders", 2)
DEFAULT = QuarantineLimit()


def test_the_default_is_half_of_a_partition_from_ten_quarantined_records() -> None:
    assert (DEFAULT.fraction, DEFAULT.min_records) == (0.5, 10)
    assert DEFAULT.exceeded({A: (20, 20)}) is not None  # every record quarantined
    assert DEFAULT.exceeded({A: (11, 20)}) is not None
    assert DEFAULT.exceeded({A: (10, 20)}) is None  # exactly half is not past it
    assert DEFAULT.exceeded({A: (1, 1)}) is None  # one bad record of one
    assert DEFAULT.exceeded({A: (9, 9)}) is None  # fewer than min_records quarantined
    assert DEFAULT.exceeded({A: (5, 3000)}) is None  # the demo's few malformed records
    assert DEFAULT.exceeded({A: (0, 0)}) is None and DEFAULT.exceeded({}) is None


def test_each_partition_is_held_to_the_limit_and_the_trip_names_only_those_past_it() -> None:
    trip = DEFAULT.exceeded({A: (2, 100), B: (40, 40), C: (30, 50)})
    assert trip is not None and not trip.whole_batch
    assert [s.tp for s in trip.partitions] == [B, C]  # the worst first
    assert (trip.quarantined, trip.consumed) == (72, 190)  # 38% of the batch: one partition is enough


def test_the_batch_as_a_whole_trips_when_each_partition_is_too_small_to() -> None:
    counts = {TopicPartition("orders", p): (3, 3) for p in range(8)}
    trip = DEFAULT.exceeded(counts)
    assert trip is not None and trip.whole_batch and len(trip.partitions) == 8
    assert DEFAULT.exceeded({A: (3, 3), B: (3, 3), C: (0, 100)}) is None  # 6 < 10 quarantined


def test_the_message_names_partitions_fractions_reasons_and_how_to_relax() -> None:
    trip = DEFAULT.exceeded({A: (20, 20), B: (2, 30)})
    assert trip is not None
    message = trip.message([("value is not valid JSON", 19), ("null value (tombstone)", 1)])
    assert "\n" not in message
    assert message.startswith("quarantine limit exceeded, nothing was committed: quarantined orders-0 20 of 20 records")
    assert "(100%); past quarantine_limit=0.5 (it applies from 10 quarantined records)" in message
    assert "Commonest reasons: 19 x 'value is not valid JSON'; 1 x 'null value (tombstone)'" in message
    assert "orders-1" not in message and "quarantine_limit=...) (None disables it)" in message

    many = DEFAULT.exceeded({TopicPartition("t", p): (3, 3) for p in range(8)})
    assert many is not None
    text = many.message([("x" * 500, 24)])
    assert text.startswith("quarantine limit exceeded, nothing was committed: the batch quarantined 24 of its 24")
    assert "and 3 more partitions" in text and len(text) < 800
    assert DEFAULT.exceeded({A: (19999, 20000)}).message([]).count("99.9%") == 1  # type: ignore[union-attr]


def test_zero_refuses_any_quarantined_record_from_min_records() -> None:
    strict = QuarantineLimit(0.0, 1)
    assert strict.exceeded({A: (1, 1000)}) is not None and strict.exceeded({A: (0, 1000)}) is None


@pytest.mark.parametrize(
    ("fraction", "min_records", "problem"),
    [
        (1.5, 10, "quarantine_limit must be a fraction in"),
        (-0.1, 10, "quarantine_limit must be a fraction in"),
        (float("nan"), 10, "quarantine_limit must be a fraction in"),
        (True, 10, "quarantine_limit must be a fraction in"),
        ("0.5", 10, "quarantine_limit must be a fraction in"),
        (0.5, 0, "quarantine_limit_min_records must be >= 1"),
        (0.5, 2.5, "quarantine_limit_min_records must be an integer"),
        (None, "ten", "quarantine_limit_min_records must be an integer"),
    ],
)
def test_the_spec_refuses_bad_settings(fraction: object, min_records: object, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        PipelineSpec(
            sink_path="/tmp/x", value_format="utf8", quarantine_limit=fraction, quarantine_limit_min_records=min_records
        )  # type: ignore[arg-type]


def test_the_spec_s_limit_is_on_by_default_and_none_or_one_disable_it() -> None:
    assert PipelineSpec(sink_path="/tmp/x", value_format="utf8").quarantine_rule == QuarantineLimit(0.5, 10)
    assert PipelineSpec(sink_path="/tmp/x", value_format="utf8", quarantine_limit=None).quarantine_rule is None
    assert PipelineSpec(sink_path="/tmp/x", value_format="utf8", quarantine_limit=1.0).quarantine_rule is None
    relaxed = PipelineSpec(
        sink_path="/tmp/x", value_format="utf8", quarantine_limit=0.9, quarantine_limit_min_records=50
    )
    assert relaxed.quarantine_rule == QuarantineLimit(0.9, 50)
