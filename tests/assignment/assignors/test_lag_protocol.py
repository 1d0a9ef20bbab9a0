"""The backlog reaches `lag-sticky` through the protocol: the leader's log offsets at the sync, the ledger's
committed offsets read in the sync's transaction, on the SQLite store a worker uses."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from cohort.assignment import Coordinator, GroupConfig, JoinComplete, ManualClock, SyncComplete
from cohort.assignment.errors import InvalidRequestError, MemberIdRequiredError
from cohort.assignment.member import GroupMember
from cohort.assignment.protocol.backlog import backlog_from_offsets
from cohort.assignment.protocol.messages import JoinRequest
from cohort.assignment.settings import MemberSettings
from cohort.common.types import OffsetRange, TopicPartition

TP = TopicPartition
ENDS = {TP("t", 0): (0, 1000), TP("t", 1): (0, 1000), TP("t", 2): (0, 1000), TP("t", 3): (0, 3000)}
"""t-0..t-2 are committed to 900 below (100 records left each); t-3 never was: its whole log is left."""


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Coordinator]:
    coordinator = Coordinator.from_url(
        f"sqlite:///{tmp_path / 'cohort.db'}", clock=ManualClock(), config=GroupConfig(initial_rebalance_delay=0)
    )
    coordinator.report_topic_metadata("g", {"t": 4})
    ledger = coordinator.standalone_ledger("g")
    ledger.commit([OffsetRange("t", p, 0, 900, records=900) for p in range(3)])
    yield coordinator
    coordinator.close()


def join(coordinator: Coordinator, name: str, member_id: str | None = None) -> JoinComplete | str:
    """One join call: the JoinComplete, or the member id to call again with."""
    request = JoinRequest(member_id=member_id, topics=["t"], assignors=["lag-sticky"], session_timeout=30)
    try:
        answer = coordinator.join("g", request)
    except MemberIdRequiredError as needed:
        return needed.member_id
    return answer if isinstance(answer, JoinComplete) else answer.member_id


def two_members(coordinator: Coordinator) -> tuple[JoinComplete, JoinComplete]:
    """A joins and leads generation 1; B joins, A rejoins: both in generation 2, A leading."""
    a_id = join(coordinator, "a")
    assert isinstance(a_id, str)
    first = join(coordinator, "a", a_id)
    assert isinstance(first, JoinComplete) and first.is_leader
    b_id = join(coordinator, "b")
    assert isinstance(b_id, str)
    pending = join(coordinator, "b", b_id)
    assert pending == b_id  # the join phase waits for A
    leader = join(coordinator, "a", a_id)
    follower = join(coordinator, "b", b_id)
    assert isinstance(leader, JoinComplete) and isinstance(follower, JoinComplete) and leader.is_leader
    return leader, follower


def test_the_leaders_log_offsets_and_the_ledger_make_the_backlog_the_assignor_balances(
    coordinator: Coordinator,
) -> None:
    assert backlog_from_offsets(ENDS, coordinator.fetch_offsets("g", sorted(ENDS))) == {
        TP("t", 0): 100,
        TP("t", 1): 100,
        TP("t", 2): 100,
        TP("t", 3): 3000,
    }
    leader, follower = two_members(coordinator)
    mine = coordinator.sync("g", leader.member_id, leader.generation, log_offsets=ENDS)
    theirs = coordinator.sync("g", follower.member_id, follower.generation, log_offsets=ENDS)  # ignored: follower
    assert isinstance(mine, SyncComplete) and isinstance(theirs, SyncComplete)
    shares = sorted([list(mine.assignment), list(theirs.assignment)], key=len)
    assert shares == [[TP("t", 3)], [TP("t", 0), TP("t", 1), TP("t", 2)]]  # 3000 records against 300


def test_without_log_offsets_the_same_group_balances_partition_counts(coordinator: Coordinator) -> None:
    leader, follower = two_members(coordinator)
    mine = coordinator.sync("g", leader.member_id, leader.generation)
    theirs = coordinator.sync("g", follower.member_id, follower.generation)
    assert isinstance(mine, SyncComplete) and isinstance(theirs, SyncComplete)
    assert (len(mine.assignment), len(theirs.assignment)) == (2, 2)


@pytest.mark.parametrize("bad", [(5, 1), (-1, 3), ("0", 10), (0,)])
def test_bad_log_offsets_from_the_leader_are_refused_and_nothing_is_stored(
    coordinator: Coordinator, bad: tuple[object, ...]
) -> None:
    leader, _ = two_members(coordinator)
    with pytest.raises(InvalidRequestError, match="log offsets of t-3"):
        coordinator.sync("g", leader.member_id, leader.generation, log_offsets={**ENDS, TP("t", 3): bad})  # type: ignore[dict-item]
    assert coordinator.describe_group("g").state == "CompletingRebalance"


def test_a_leading_member_reads_the_log_offsets_of_every_subscribed_partition(coordinator: Coordinator) -> None:
    asked: list[Sequence[TopicPartition]] = []

    def log_offsets(partitions: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        asked.append(list(partitions))
        return {tp: ENDS[tp] for tp in partitions}

    settings = MemberSettings(topics=("t",), assignors=("lag-sticky",), session_timeout=30)
    member = GroupMember(coordinator, "g", settings, log_offsets=log_offsets, poll_interval=0, background_rejoin=False)
    try:
        assert sorted(member.join()) == sorted(ENDS)
        assert asked == [sorted(ENDS)]
    finally:
        member.close()


def test_a_member_that_cannot_read_the_log_still_gets_an_assignment(coordinator: Coordinator) -> None:
    def unreachable(partitions: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        raise OSError("Kafka is down")

    settings = MemberSettings(topics=("t",), assignors=("lag-sticky",), session_timeout=30)
    member = GroupMember(coordinator, "g", settings, log_offsets=unreachable, poll_interval=0, background_rejoin=False)
    try:
        assert len(member.join()) == 4
    finally:
        member.close()


def test_cohort_simulate_takes_a_backlog_file_and_shows_each_members_backlog(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from cohort.cli.main import main

    backlog = tmp_path / "backlog.json"
    backlog.write_text(json.dumps({"t:0": 5000, "t:1": 10, "t:2": 10, "t:3": 4000}))
    args = ["simulate", "--members", "2", "--partitions", "t:4", "--assignor", "lag-sticky", "--json"]
    done = CliRunner().invoke(main, [*args, "--backlog", str(backlog)])
    assert done.exit_code == 0, done.output
    shown = json.loads(done.output)
    assert sorted(v["after"] for v in shown["backlog"].values()) == [4020, 5000]
    backlog.write_text('{"t:0": -1}')
    refused = CliRunner().invoke(main, [*args, "--backlog", str(backlog)])
    assert refused.exit_code != 0 and "TOPIC:PARTITION" in refused.output
