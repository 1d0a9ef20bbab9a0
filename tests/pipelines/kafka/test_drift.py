"""How Kafka's committed offsets that disagree with the ledger are said (cohort.pipelines.kafka.drift), on plain
values: behind, ahead, missing on either side, and the warning a batch logs before it reads."""

from __future__ import annotations

from cohort.common.types import TopicPartition
from cohort.pipelines.kafka.drift import audit_drift_message, batch_drift_warning, drift


def test_each_kind_of_disagreement_is_one_clause_and_agreement_is_none() -> None:
    assert drift(20, 20) is None and drift(None, None) is None
    assert drift(0, 20) == "Kafka's committed offset 0 is behind the ledger's 20"
    assert drift(25, 20) == "Kafka's committed offset 25 is ahead of the ledger's 20"
    assert drift(None, 20) == "Kafka has no committed offset, the ledger's is 20"
    assert drift(12, None) == "Kafka's committed offset is 12 but the ledger has none"


def test_the_audit_says_the_cause_what_the_next_batch_does_and_the_tool_to_move_a_group() -> None:
    behind, ahead, missing = (audit_drift_message(k, 20) for k in (0, 25, None))
    assert "(it does not read [0, 20) again)" in behind and "(it does not skip [20, 25))" in ahead
    assert "the next batch starts at 20 and its mirror overwrites Kafka's offset" in missing
    for text in (behind, ahead, missing):
        assert "moved outside Cohort (Kafka's own kafka-consumer-groups --reset-offsets or --delete-offsets" in text
        assert "or left by a Kafka mirror that failed" in text
        assert text.endswith("to move the group's offsets, use `cohort reset-offsets` (docs/replay.md)")


def test_a_batch_warning_lists_the_partitions_in_order() -> None:
    warning = batch_drift_warning("g", {TopicPartition("t", 1): (25, 20), TopicPartition("t", 0): (0, 20)})
    assert warning.startswith(
        "group 'g': t-0: Kafka's committed offset 0 is behind the ledger's 20; "
        "t-1: Kafka's committed offset 25 is ahead of the ledger's 20. Kafka's committed offsets were moved outside"
    ), warning
    assert "This batch reads from the ledger, as every batch does" in warning
