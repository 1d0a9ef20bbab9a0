"""The sink audit over a folded ledger (cohort compact): the directories of the folded ranges tile the fold."""

from __future__ import annotations

from cohort.common.types import TopicPartition
from cohort.pipelines.sink.audit import audit_sink_partition
from cohort.pipelines.sink.audit_ledger import AuditedRange

TP = TopicPartition("t", 0)
FOLD = AuditedRange(0, 30, 30, 0, "run-3", folded=True)
NEXT = AuditedRange(30, 40, 10, 0, "run-4")


def _audit(*dirs: tuple[int, int, int]) -> list[str]:
    found = audit_sink_partition(TP, [FOLD, NEXT], 40, {"sink": list(dirs), "quarantine": []})
    return [f.message for f in found]


def test_the_directories_a_fold_stands_for_account_for_it() -> None:
    assert _audit((0, 10, 10), (10, 20, 10), (20, 30, 10), (30, 40, 10)) == []
    assert _audit((0, 30, 30), (30, 40, 10)) == []  # a fold whose ranges were one directory


def test_rows_missing_from_a_fold_or_a_fold_with_no_directory_are_named() -> None:
    assert _audit((0, 10, 10), (10, 20, 4), (30, 40, 10)) == [
        "the 2 directories of folded range [0, 30) hold 14 rows, the ledger says 30; not repaired "
        "(replay the offsets to rewrite them)"
    ]
    assert _audit((30, 40, 10)) == ["folded range [0, 30) (30 rows) has no directory"]


def test_a_copy_inside_a_fold_is_still_seen() -> None:
    found = _audit((0, 10, 10), (5, 15, 10), (10, 20, 10), (20, 30, 10), (30, 40, 10))
    assert any("share offsets" in m for m in found)
