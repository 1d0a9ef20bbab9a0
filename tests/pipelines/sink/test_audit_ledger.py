"""The audits' reading of a partition's ledger (cohort.pipelines.sink.audit_ledger) and what a reset leaves to the
sink audit (cohort.pipelines.sink.audit), on plain values: ledger entries as the coordinator records them."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from cohort.assignment.protocol.messages import RESET, LedgerEntry
from cohort.common.types import TopicPartition
from cohort.pipelines.sink.audit import Piece, audit_sink_partition, effective_pieces
from cohort.pipelines.sink.audit_ledger import AuditedRange, fold_ledger, ledger_entries

TP = TopicPartition("orders", 0)
AT = 1_795_000_000.0  # 2026-11-18T11:06:40+00:00


def entry(from_offset: int, until_offset: int, records: int = 0, **kwargs: Any) -> LedgerEntry:
    values: dict[str, Any] = {
        "group": "g",
        "topic": TP.topic,
        "partition": TP.partition,
        "from_offset": from_offset,
        "until_offset": until_offset,
        "records": records,
        "quarantined": 0,
        "gap_reason": None,
        "run_id": "run-a",
        "member_id": None,
        "instance_id": None,
        "generation": -1,
        "committed_at": AT,
    }
    return LedgerEntry(**{**values, **kwargs})


def reset(old: int, new: int, note: str | None = "ann@host: bad VAT rule", run_id: str | None = None) -> LedgerEntry:
    return entry(old, new, kind=RESET, note=note, run_id=run_id)


def test_a_reset_back_leaves_a_pending_replay_described_from_its_ledger_entry() -> None:
    fold = fold_ledger(TP, [entry(0, 998, 998), reset(998, 698)])
    assert (fold.head, fold.after_reset, len(fold.commits)) == (698, True, 1)
    assert fold.pending is not None
    assert fold.pending.describe() == (
        "reset to 698 at 2026-11-18T11:06:40+00:00 by ann@host (bad VAT rule); the next batch replays [698, 998)"
    )
    # the sink still holds [0, 998): no divergence while the replay is pending
    assert audit_sink_partition(TP, fold.commits, fold.head, {"sink": [(0, 998, 998)]}) == []


def test_a_partial_replay_says_what_is_left_and_a_finished_one_nothing() -> None:
    first, back = entry(0, 998, 998), reset(998, 698)
    partial = fold_ledger(TP, [first, back, entry(698, 800, 102, run_id="replay")])
    assert partial.pending is not None and not partial.after_reset
    assert partial.pending.describe().endswith("[698, 800) replayed since; the next batch replays [800, 998)")
    dirs = [(0, 698, -1), (698, 800, 102), (800, 998, -1)]  # what publishing the replay leaves
    assert audit_sink_partition(TP, partial.commits, partial.head, {"sink": dirs}) == []
    done = fold_ledger(TP, [first, back, entry(698, 998, 300, run_id="replay")])
    assert done.pending is None and done.head == 998


def test_a_reset_forward_or_by_a_member_run_is_described_by_who_made_it() -> None:
    assert fold_ledger(TP, [entry(0, 10, 10), reset(10, 50)]).pending is None  # a skip: nothing to replay
    by_run = fold_ledger(TP, [entry(0, 10, 10), reset(10, 0, note=None, run_id="dagster-run-1")]).pending
    assert by_run is not None and " by run dagster-run-1;" in by_run.describe()


def test_output_beyond_the_furthest_committed_offset_is_still_named_after_a_reset() -> None:
    fold = fold_ledger(TP, [entry(0, 998, 998), reset(998, 698)])
    (finding,) = audit_sink_partition(TP, fold.commits, fold.head, {"sink": [(0, 998, 998), (998, 1000, 2)]})
    assert finding.message.startswith("directory [998, 1000) lies beyond offset 998, the furthest the ledger committed")


class PagedLedger:
    """A ledger that pages (as `Coordinator.ledger_after`), counting its reads."""

    def __init__(self, entries: list[LedgerEntry]) -> None:
        self.entries = [replace(e, entry_id=i + 1) for i, e in enumerate(entries)]
        self.reads: list[int] = []

    def ledger_after(self, group: str, topic: str, partition: int, after_id: int, *, limit: int) -> list[LedgerEntry]:
        page = [e for e in self.entries if e.entry_id is not None and e.entry_id > after_id][:limit]
        self.reads.append(len(page))
        return page


def test_the_ledger_is_read_page_by_page() -> None:
    ledger = PagedLedger([entry(i, i + 1, 1) for i in range(25)])
    read = list(ledger_entries(ledger, "g", TP, page=10))
    assert [e.from_offset for e in read] == list(range(25)) and ledger.reads == [10, 10, 5]


def _pieces_one_by_one(commits: list[AuditedRange]) -> list[Piece]:
    """The plain fold: every commit against every piece (what the bisection must agree with)."""
    pieces: list[Piece] = []
    for c in commits:
        if c.from_offset == c.until_offset:
            continue
        kept = []
        for p in pieces:
            if p.until_offset <= c.from_offset or c.until_offset <= p.from_offset:
                kept.append(p)
                continue
            if p.from_offset < c.from_offset:
                kept.append(Piece(p.from_offset, c.from_offset, p.commit))
            if c.until_offset < p.until_offset:
                kept.append(Piece(c.until_offset, p.until_offset, p.commit))
        if not c.gap:
            kept.append(Piece(c.from_offset, c.until_offset, c))
        pieces = sorted(kept, key=lambda p: p.from_offset)
    return pieces


def test_effective_pieces_by_bisection_agree_with_the_plain_fold() -> None:
    rng = random.Random(7)
    for _ in range(300):
        commits, head = [], 0
        for i in range(rng.randint(1, 30)):
            if head and rng.random() < 0.2:
                head = rng.randint(0, head)  # a reset back: the next commit replays
            until = head + rng.randint(0, 20)
            commits.append(AuditedRange(head, until, until - head, 0, f"r{i}", gap=rng.random() < 0.1))
            head = until
        assert effective_pieces(commits) == _pieces_one_by_one(commits)
