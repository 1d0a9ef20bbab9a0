"""The sink audit's decisions (cohort.pipelines.sink.audit) on plain values: which divergences it names and which
it calls safe to repair."""

from __future__ import annotations

from cohort.common.types import TopicPartition
from cohort.pipelines.sink.audit import MIRROR, PUBLISH, AuditedRange, audit_sink_partition, effective_pieces

TP = TopicPartition("orders", 0)
FIRST = AuditedRange(0, 10, records=9, quarantined=1, run_id="run-a")
SECOND = AuditedRange(10, 25, records=15, quarantined=0, run_id="run-b")


def audit(commits, head, sink, quarantine=(), kafka=None, compare=False):
    outputs = {"sink": list(sink), "quarantine": list(quarantine)}
    return audit_sink_partition(TP, commits, head, outputs, kafka, compare_kafka=compare)


def test_a_sink_that_matches_the_ledger_and_kafka_has_no_finding() -> None:
    assert audit([FIRST, SECOND], 25, [(0, 10, 9), (10, 25, 15)], [(0, 10, 1)], kafka=25, compare=True) == []


def test_a_missing_directory_is_named_and_publishing_it_from_staging_is_the_repair() -> None:
    (finding,) = audit([FIRST, SECOND], 25, [(0, 10, 9)], [(0, 10, 1)])
    assert finding.where == "sink" and finding.repair == PUBLISH
    assert finding.piece is not None and finding.piece.commit == SECOND
    assert "committed range [10, 25) of run run-b (15 rows) has no directory" in finding.message


def test_output_no_commit_accounts_for_is_named_and_not_repaired() -> None:
    findings = audit([FIRST], 10, [(0, 10, 9), (10, 20, 4)], [(0, 10, 1), (3, 7, 2)])
    messages = {(f.where, f.message.split(":")[0]) for f in findings}
    assert messages == {
        ("sink", "directory [10, 20) lies beyond the ledger's committed offset 10"),
        ("quarantine", "directories [0, 10) and [3, 7) share offsets [3, 7)"),
        ("quarantine", "directory [3, 7) matches no committed range"),
    }
    assert all(f.repair is None for f in findings)


def test_overlaps_are_found_between_directories_that_are_not_neighbours() -> None:
    commits = [AuditedRange(0, 100, 100, 0, "a")]
    findings = audit(commits, 100, [(0, 100, 100), (10, 20, 10), (30, 40, 10)])
    shared = sorted(f.message.split(":")[0] for f in findings if "share offsets" in f.message)
    assert shared == [
        "directories [0, 100) and [10, 20) share offsets [10, 20)",
        "directories [0, 100) and [30, 40) share offsets [30, 40)",
    ]


def test_a_replay_replaces_the_offsets_it_rereads_and_keeps_the_rest_as_pieces() -> None:
    replay = AuditedRange(5, 25, records=20, quarantined=0, run_id="run-c")  # after a reset back to 5
    pieces = effective_pieces([FIRST, SECOND, replay])
    assert [(p.from_offset, p.until_offset, p.commit.run_id, p.whole) for p in pieces] == [
        (0, 5, "run-a", False),
        (5, 25, "run-c", True),
    ]
    # what publishing the replay leaves: the cut piece of run-a (its rows unknown to the ledger) and the replay
    assert audit([FIRST, SECOND, replay], 25, [(0, 5, 4), (5, 25, 20)], [(0, 5, 1)]) == []
    stale = audit([FIRST, SECOND, replay], 25, [(0, 5, 4), (5, 25, 20), (10, 25, 15)])  # the replaced directory
    assert sorted(f.message.split(":")[0] for f in stale) == [
        "directories [5, 25) and [10, 25) share offsets [10, 25)",
        "directory [10, 25) matches no committed range",
    ]


def test_gaps_hold_no_output_and_row_counts_are_checked_on_whole_ranges() -> None:
    gap = AuditedRange(10, 12, 0, 0, "run-b", gap=True)
    after = AuditedRange(12, 20, 8, 0, "run-b")
    assert audit([FIRST, gap, after], 20, [(0, 10, 9), (12, 20, 8)], [(0, 10, 1)]) == []
    (wrong,) = audit([FIRST, gap, after], 20, [(0, 10, 9), (12, 20, 7)], [(0, 10, 1)])
    assert "directory [12, 20) holds 7 rows, the ledger says 8 (run run-b)" in wrong.message and wrong.repair is None


def test_kafka_behind_or_ahead_of_the_ledger_is_re_mirrored_and_said_to_be_overwritten_not_adopted() -> None:
    sink = [(0, 10, 9), (10, 25, 15)]
    (behind,) = audit([FIRST, SECOND], 25, sink, [(0, 10, 1)], kafka=10, compare=True)
    assert behind.where == "kafka" and behind.repair == MIRROR and "behind the ledger's 25" in behind.message
    assert "the next batch starts at 25 (it does not read [10, 25) again)" in behind.message
    (missing,) = audit([FIRST, SECOND], 25, sink, [(0, 10, 1)], kafka=None, compare=True)
    assert missing.repair == MIRROR and "Kafka has no committed offset, the ledger's is 25" in missing.message
    # ahead: Kafka's own reset tool moved it forward (or a reset back's mirror failed); the ledger still decides
    (ahead,) = audit([FIRST, SECOND], 25, sink, [(0, 10, 1)], kafka=30, compare=True)
    assert ahead.repair == MIRROR and "ahead of the ledger's 25" in ahead.message
    assert "the next batch starts at 25 (it does not skip [25, 30))" in ahead.message
    for finding in (behind, missing, ahead):
        assert "kafka-consumer-groups --reset-offsets" in finding.message
        assert "use `cohort reset-offsets`" in finding.message
    assert audit([FIRST, SECOND], 25, sink, [(0, 10, 1)], kafka=3) == []  # Kafka not compared
