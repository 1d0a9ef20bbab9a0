"""The table-sink reconcile decisions (pure): adopt, roll back, fence, or stop, per partition."""

from __future__ import annotations

from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.tables.reconcile import LedgerPosition, reconcile_partition
from cohort.pipelines.tables.store import BatchRecord, Owner, PartitionMark

TP = TopicPartition("orders", 0)
OWNER = Owner("g", 5)


def decide(ledger: LedgerPosition, sink: PartitionMark, quarantine: PartitionMark = PartitionMark(), **kw):  # noqa: B008
    return reconcile_partition(
        TP, kw.pop("owner", OWNER), ledger, sink, quarantine, sink_exists=True, quarantine_exists=True, **kw
    )


def test_in_step_needs_nothing() -> None:
    d = decide(LedgerPosition(100), PartitionMark(100, 5), PartitionMark(100, 5))
    assert (d.adopt, d.fence_sink, d.fence_quarantine, d.roll_back_from, d.problem) == ((), False, False, None, None)


def test_a_new_generation_fences_both_tables() -> None:
    d = decide(LedgerPosition(100), PartitionMark(100, 4), PartitionMark(90, 3))
    assert d.fence_sink and d.fence_quarantine and d.problem is None


def test_a_zombie_is_stopped_by_a_newer_generation_in_either_table() -> None:
    d = decide(LedgerPosition(100), PartitionMark(100, 6))
    assert d.problem and "generation 6" in d.problem and "fenced" in d.problem
    d = decide(LedgerPosition(100), PartitionMark(100, 5), PartitionMark(100, 7))
    assert d.problem and "quarantine table" in d.problem


def test_a_sink_commit_the_ledger_never_saw_is_adopted_with_its_gap() -> None:
    ranges = (
        OffsetRange("orders", 0, 100, 120, gap_reason="retention"),
        OffsetRange("orders", 0, 120, 200, records=70, quarantined=10),
        OffsetRange("orders", 1, 0, 5, records=5),
    )
    d = decide(LedgerPosition(100), PartitionMark(200, 5), PartitionMark(200, 5), sink_batch=BatchRecord("r1", ranges))
    assert d.adopt == ranges[:2] and d.adopt_run == "r1" and d.problem is None and d.roll_back_from is None


def test_the_first_commit_of_a_partition_is_adopted_from_wherever_it_starts() -> None:
    ranges = (OffsetRange("orders", 0, 40, 50, records=10),)
    d = decide(LedgerPosition(None), PartitionMark(50, 5), sink_batch=BatchRecord("r", ranges))
    assert d.adopt == ranges


def test_a_sink_commit_that_does_not_start_at_the_ledger_head_stops_the_batch() -> None:
    ranges = (OffsetRange("orders", 0, 150, 200, records=50),)
    d = decide(LedgerPosition(100), PartitionMark(200, 5), sink_batch=BatchRecord("r", ranges))
    assert d.problem and "up to 200" in d.problem and "ends at 100" in d.problem and not d.adopt
    d = decide(LedgerPosition(100), PartitionMark(200, 5), sink_batch=None)  # the table lost its record
    assert d.problem and not d.adopt


def test_a_ledger_ahead_of_the_sink_table_stops_the_batch() -> None:
    d = decide(LedgerPosition(300), PartitionMark(200, 5))
    assert d.problem and "lost commits" in d.problem


def test_an_orphan_quarantine_commit_is_rolled_back_to_the_sink_head() -> None:
    d = decide(LedgerPosition(100), PartitionMark(100, 5), PartitionMark(160, 5))
    assert d.roll_back_from == 100 and not d.adopt
    d = decide(LedgerPosition(None), PartitionMark(), PartitionMark(30, 5))  # the very first batch died
    assert d.roll_back_from == 0
    d = decide(LedgerPosition(80), PartitionMark(), PartitionMark(80, 5))  # no sink table yet: in step
    assert d.roll_back_from is None


def test_after_a_reset_the_tables_are_ahead_by_design() -> None:
    d = decide(LedgerPosition(20, after_reset=True), PartitionMark(200, 5), PartitionMark(200, 5))
    assert (d.adopt, d.roll_back_from, d.problem) == ((), None, None)


def test_a_standalone_ledger_neither_fences_nor_is_fenced() -> None:
    d = decide(LedgerPosition(100), PartitionMark(100, 9), owner=Owner("g", None))
    assert not d.fence_sink and d.problem is None


def test_tables_that_do_not_exist_are_not_fenced() -> None:
    d = reconcile_partition(
        TP, OWNER, LedgerPosition(None), PartitionMark(), PartitionMark(), sink_exists=False, quarantine_exists=False
    )
    assert not (d.fence_sink or d.fence_quarantine or d.problem or d.adopt)


def test_a_sink_head_is_ahead_only_beyond_the_ledger_and_not_after_a_reset() -> None:
    from cohort.pipelines.tables.reconcile import ahead_of_ledger

    assert ahead_of_ledger(LedgerPosition(100), PartitionMark(200, 5)) == 200
    assert ahead_of_ledger(LedgerPosition(None), PartitionMark(50, 5)) == 50
    assert ahead_of_ledger(LedgerPosition(200), PartitionMark(200, 5)) is None
    assert ahead_of_ledger(LedgerPosition(300), PartitionMark(200, 5)) is None
    assert ahead_of_ledger(LedgerPosition(20, after_reset=True), PartitionMark(200, 5)) is None
    assert ahead_of_ledger(LedgerPosition(None), PartitionMark()) is None
