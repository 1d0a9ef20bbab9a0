"""The staging clean-up's decision (cohort.pipelines.sink.staging_gc): pure, over plain values."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.sink.layout import attempt_id
from cohort.pipelines.sink.staging_gc import (
    STAGING_GRACE_S,
    FoundAttempt,
    GroupFacts,
    RangeDir,
    StagedRange,
    decide_staging_gc,
)

ROOT, QUARANTINE = "/lake", "/lake/_quarantine"
TP = TopicPartition("t", 0)
NOW = 1_000_000.0
OLD = NOW - STAGING_GRACE_S - 1


@dataclass(frozen=True)
class Entry:
    """A ledger entry as `last_committed` reports it (the decision reads these five fields)."""

    from_offset: int
    until_offset: int
    records: int
    quarantined: int
    run_id: str | None


def prepared(low: int, high: int, tp: TopicPartition = TP) -> StagedRange:
    return StagedRange(tp.topic, tp.partition, low, high, attempt_marked=True)


def found(run: str, *ranges: StagedRange, modified: float | None = OLD, root: str = ROOT) -> FoundAttempt:
    output = "quarantine" if root == QUARANTINE else "sink"
    return FoundAttempt(root, output, attempt_id(run), modified, tuple(ranges))  # type: ignore[arg-type]


def one(attempt: FoundAttempt, facts: GroupFacts | None = None, **kwargs: float) -> tuple[bool, str]:
    (verdict,) = decide_staging_gc([attempt], facts or GroupFacts(), now=NOW, **kwargs)
    assert verdict.path == f"{attempt.root}/_staging/{attempt.attempt}"
    return verdict.delete, verdict.reason


def test_an_old_attempt_of_a_run_outside_the_group_with_nothing_committed_is_deleted() -> None:
    assert one(found("dead")) == (True, "dead")
    assert one(found("dead", StagedRange("t", 0))) == (True, "dead")  # staged, never prepared: never committed
    assert one(found("dead", StagedRange("t", 0, 0, 5))) == (True, "dead")  # a range marker alone: not prepared


def test_a_live_members_run_keeps_its_attempts_whatever_their_age_also_after_a_rejoin() -> None:
    """Keyed on the run id (the member's client id): a member that rejoined under a new member id is the same run."""
    facts = GroupFacts(live_runs=frozenset({"run-a", "run-b"}))
    assert one(found("run-a", modified=0.0), facts) == (False, "live")
    assert one(found("run-a", modified=None), facts) == (False, "live")
    assert one(found("run-c"), facts) == (True, "dead")


def test_a_live_member_without_a_client_id_keeps_everything() -> None:
    assert one(found("dead"), GroupFacts(anonymous_members=1)) == (False, "members-unknown")


def test_an_attempt_changed_within_the_grace_period_is_kept() -> None:
    assert one(found("not-joined-yet", modified=NOW - 60)) == (False, "young")
    assert one(found("standalone", modified=NOW - STAGING_GRACE_S + 1)) == (False, "young")
    assert one(found("standalone", modified=NOW - STAGING_GRACE_S)) == (True, "dead")
    assert one(found("standalone", modified=NOW - 60), grace_s=30.0) == (True, "dead")
    assert one(found("unknown", modified=None)) == (False, "age-unknown")


def test_the_last_committed_range_of_its_run_not_yet_in_place_is_kept_for_the_next_batch() -> None:
    facts = GroupFacts(last_committed={TP: Entry(0, 10, 8, 2, "died")}, recorded={TP: {(0, 10)}})
    assert one(found("died", prepared(0, 10)), facts) == (False, "to-publish")
    # the quarantine's staged range, judged by the quarantined count
    assert one(found("died", prepared(0, 10), root=QUARANTINE), facts) == (False, "to-publish")
    # a later range of the same run only: the committed one is elsewhere
    assert one(found("died", prepared(10, 12)), GroupFacts(last_committed=facts.last_committed, recorded={})) == (
        True,
        "dead",
    )


def test_a_published_last_range_frees_the_attempt_only_once_every_row_is_in_place() -> None:
    died = attempt_id("died")
    last = {TP: Entry(0, 10, 8, 0, "died")}

    def facts(rows: int | None, by: str = died) -> GroupFacts:
        dirs = {(ROOT, TP): (RangeDir(0, 10, frozenset({by}), rows),)}
        return GroupFacts(last_committed=last, recorded={TP: {(0, 10)}}, in_place=dirs)

    attempt = FoundAttempt(ROOT, "sink", died, OLD, (prepared(0, 10),))
    assert one(attempt, facts(8)) == (True, "dead")  # moved into place (a replay's link leaves the staged copy)
    assert one(attempt, facts(3)) == (False, "to-publish")  # a move copying file by file has not finished
    other = attempt_id("other")
    # the range's directory by another run: a replay this commit replaces, so it is not published
    assert one(attempt, facts(8, by=other)) == (False, "to-publish")
    # the quarantine's copy is judged by the quarantined count, against the quarantine's directories
    quarantined = FoundAttempt(QUARANTINE, "quarantine", died, OLD, (prepared(0, 10),))
    in_quarantine = {(QUARANTINE, TP): (RangeDir(0, 10, frozenset({died}), 2),)}
    last_q = {TP: Entry(0, 10, 8, 2, "died")}
    assert one(quarantined, GroupFacts(last_committed=last_q, recorded={TP: {(0, 10)}}, in_place=in_quarantine)) == (
        True,
        "dead",
    )
    in_sink = {(ROOT, TP): (RangeDir(0, 10, frozenset({died}), 2),)}  # the sink's directory is not the quarantine's
    assert one(quarantined, GroupFacts(last_committed=last_q, recorded={TP: {(0, 10)}}, in_place=in_sink)) == (
        False,
        "to-publish",
    )


def test_a_committed_range_whose_offsets_no_directory_holds_is_kept_for_the_audit_repair() -> None:
    """Not the last range (a reset came after it, say): the next batch will not publish it, `cohort audit
    --repair` can, unless the offsets are in place already."""
    last = {TP: Entry(10, 10, 0, 0, None)}
    attempt = found("died", prepared(0, 10))
    assert one(attempt, GroupFacts(last_committed=last, recorded={TP: {(0, 10)}})) == (False, "committed")
    assert one(attempt, GroupFacts(last_committed=last, recorded=None)) == (False, "committed")  # cannot say
    assert one(attempt, GroupFacts(last_committed=last, recorded={TP: set()})) == (True, "dead")  # never committed
    covering = {(ROOT, TP): (RangeDir(0, 4), RangeDir(4, 12))}
    assert one(attempt, GroupFacts(last_committed=last, recorded=None, in_place=covering)) == (True, "dead")
    holed = {(ROOT, TP): (RangeDir(0, 4), RangeDir(5, 12))}
    assert one(attempt, GroupFacts(last_committed=last, recorded=None, in_place=holed)) == (False, "committed")
    # the quarantine's directories do not hold the sink's offsets
    elsewhere = {(QUARANTINE, TP): (RangeDir(0, 10),)}
    assert one(attempt, GroupFacts(recorded={TP: {(0, 10)}}, in_place=elsewhere)) == (False, "committed")


def test_an_attempt_killed_before_its_commit_goes_once_another_run_committed_and_published_the_offsets() -> None:
    last = {TP: Entry(0, 10, 10, 0, "rescue")}
    attempt = found("killed", prepared(0, 10))
    waiting = GroupFacts(last_committed=last, recorded={TP: {(0, 10)}})
    assert one(attempt, waiting) == (False, "committed")  # the rescue's own output is not in place yet
    placed = GroupFacts(
        last_committed=last,
        recorded={TP: {(0, 10)}},
        in_place={(ROOT, TP): (RangeDir(0, 10, frozenset({attempt_id("rescue")}), 10),)},
    )
    assert one(attempt, placed) == (True, "dead")


def test_a_table_sinks_staging_is_never_published_from() -> None:
    facts = GroupFacts(last_committed={TP: Entry(0, 10, 8, 2, "died")}, recorded={TP: {(0, 10)}})
    table = FoundAttempt(ROOT, "table", attempt_id("died"), OLD, (prepared(0, 10),))
    assert one(table, facts) == (True, "dead")


def test_any_prepared_range_that_waits_keeps_the_whole_attempt() -> None:
    other = TopicPartition("t", 1)
    facts = GroupFacts(
        last_committed={TP: Entry(0, 10, 10, 0, "died"), other: Entry(0, 5, 5, 0, "died")},
        recorded={TP: {(0, 10)}, other: {(0, 5)}},
        in_place={(ROOT, TP): (RangeDir(0, 10, frozenset({attempt_id("died")}), 10),)},
    )
    assert one(found("died", prepared(0, 10), prepared(0, 5, other)), facts) == (False, "to-publish")


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="not an attempt id"):
        decide_staging_gc([FoundAttempt(ROOT, "sink", "attempt1", OLD)], GroupFacts(), now=NOW)
    with pytest.raises(ValueError, match="grace period"):
        decide_staging_gc([], GroupFacts(), now=NOW, grace_s=-1.0)
