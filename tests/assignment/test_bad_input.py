"""The coordinator's bad-input corpus: every case with its expected error and a message
fragment naming the problem, and proof that the refused call lost or changed nothing.

Each case runs against a populated group (Stable, one member owning every partition, a committed range)
on the in-memory store and on SQLite; after the refusal the group's description, committed offsets,
ledger history, event log and the list of groups are exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from cohort.assignment.assignors import UnknownAssignorError, get_assignor
from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import InconsistentGroupProtocolError, InvalidRequestError, InvalidSessionTimeoutError
from cohort.assignment.protocol.group_state import GroupConfig, GroupState
from cohort.assignment.protocol.messages import JoinComplete, JoinRequest
from cohort.assignment.store.memory import MemoryGroupStore
from cohort.assignment.store.sql import SqlGroupStore
from cohort.assignment.types import Subscription
from cohort.common.names import InvalidNameError, validate_group_name, validate_instance_id, validate_topic_name
from cohort.common.types import OffsetRange, TopicPartition
from tests.assignment.scripted_members import Client

GROUP, TOPIC, PARTITIONS = "g", "t", 4


@dataclass
class World:
    """A populated group to throw bad input at."""

    coordinator: Coordinator
    member: Client

    def commit(self, *ranges: OffsetRange) -> object:
        """Commit as the group's (valid) member."""
        return self.member.commit(*ranges)

    def join(self, group: str = GROUP, **request: Any) -> object:
        """A static member's join (admitted at once, so only the bad field can refuse it)."""
        fields: dict[str, Any] = {"topics": [TOPIC], "instance_id": "slot/w-9", "assignors": ["range"]}
        fields.update(request)
        return self.coordinator.join(group, JoinRequest(**fields))


@dataclass(frozen=True)
class Case:
    """One bad input: the call, the error type it must raise and a fragment of the message naming the
    problem."""

    id: str
    call: Callable[[World], object]
    error: type[BaseException]
    fragment: str


# ---------------------------------------------------------------------------------------- the corpus

BAD_NAMES: list[tuple[str, object, str]] = [
    ("traversal", "../x", "illegal characters '/'"),
    ("slash", "a/b", "illegal characters '/'"),
    ("empty", "", "must not be empty"),
    ("dot", ".", "'.' is not allowed"),
    ("dotdot", "..", "'..' is not allowed"),
    ("250-chars", "x" * 250, "the limit is 249"),
    ("unicode", "tópico", "illegal characters 'ó'"),
    ("space", "has space", "illegal characters ' '"),
    ("nul", "nul\x00byte", "illegal characters '\\x00'"),
    ("backslash", "..\\x", "illegal characters '\\\\'"),
    ("not-a-string", 5, "must be a string, got int"),
]


def _name_cases() -> Iterator[Case]:
    for label, name, fragment in BAD_NAMES:
        n: Any = name
        yield Case(f"topic-name-{label}", lambda w, n=n: validate_topic_name(n), InvalidNameError, fragment)
        yield Case(f"group-name-{label}", lambda w, n=n: validate_group_name(n), InvalidNameError, fragment)
        yield Case(f"join-group-{label}", lambda w, n=n: w.join(group=n), InvalidNameError, fragment)
        yield Case(f"join-topic-{label}", lambda w, n=n: w.join(topics=[TOPIC, n]), InvalidNameError, fragment)
        yield Case(
            f"metadata-topic-{label}",
            lambda w, n=n: w.coordinator.report_topic_metadata(GROUP, {TOPIC: PARTITIONS, n: 3}),
            InvalidNameError,
            fragment,
        )
        yield Case(
            f"metadata-group-{label}",
            lambda w, n=n: w.coordinator.report_topic_metadata(n, {TOPIC: PARTITIONS}),
            InvalidNameError,
            fragment,
        )
        yield Case(
            f"commit-range-topic-{label}",
            lambda w, n=n: w.commit(OffsetRange(TOPIC, 1, 0, 5), OffsetRange(n, 0, 10, 11)),
            InvalidNameError,
            fragment,
        )
        yield Case(
            f"fetch-topic-{label}",
            lambda w, n=n: w.coordinator.fetch_offsets(GROUP, [TopicPartition(n, 0)]),
            InvalidNameError,
            fragment,
        )
    yield Case(
        "instance-id-traversal", lambda w: validate_instance_id("g/../x"), InvalidNameError, "'..' is not allowed"
    )
    yield Case("join-instance-traversal", lambda w: w.join(instance_id="g/../x"), InvalidNameError, "not allowed")
    yield Case("join-topics-as-one-string", lambda w: w.join(topics="t"), TypeError, "not a string")


def _assignor_cases() -> Iterator[Case]:
    yield Case("get-unknown-assignor", lambda w: get_assignor("nope"), UnknownAssignorError, "unknown assignor 'nope'")
    yield Case(
        "join-only-unknown-assignors",
        lambda w: w.join(assignors=["nope", "nada"]),
        InconsistentGroupProtocolError,
        "supports ['nope', 'nada'] but the group's members all support only ['range']",
    )
    yield Case(
        "join-no-assignor", lambda w: w.join(group="fresh", assignors=[]), InconsistentGroupProtocolError, "no assignor"
    )
    yield Case(
        "sync-unknown-assignor-without-assignment",
        _sync_with_unknown_assignor,
        InvalidRequestError,
        "cannot run assignor 'nope'",
    )
    yield Case(
        "join-assignors-as-one-string",
        lambda w: w.join(group="fresh", assignors="range"),
        TypeError,
        "assignors",
    )
    yield Case(
        "join-empty-assignor-name",
        lambda w: w.join(group="fresh", assignors=[""]),
        InconsistentGroupProtocolError,
        "assignor",
    )


def _sync_with_unknown_assignor(w: World) -> object:
    """A lone member that only knows a custom assignor the coordinator lacks syncs without an assignment:
    refused, and its group stays in CompletingRebalance waiting for a usable assignment."""
    w.coordinator.report_topic_metadata("custom", {TOPIC: 2})
    joined = w.coordinator.join("custom", JoinRequest(topics=[TOPIC], instance_id="custom/w-0", assignors=["nope"]))
    assert isinstance(joined, JoinComplete) and joined.protocol == "nope"
    before = w.coordinator.describe_group("custom")
    try:
        return w.coordinator.sync("custom", joined.member_id, joined.generation, instance_id="custom/w-0")
    finally:
        after = w.coordinator.describe_group("custom")
        assert after == before and after.state is GroupState.COMPLETING_REBALANCE


def _timeout_cases() -> Iterator[Case]:
    bounds = "outside [6, 1800] s"
    for value in (5.9, 0, -1, 1800.5, float("inf"), float("nan")):
        yield Case(
            f"session-timeout-{value}",
            lambda w, v=value: w.join(session_timeout=v),
            InvalidSessionTimeoutError,
            bounds,
        )
    for value in ("10", None):
        yield Case(
            f"session-timeout-type-{value}",
            lambda w, v=value: w.join(session_timeout=v),
            (TypeError, InvalidSessionTimeoutError),  # type: ignore[arg-type]
            "session timeout",
        )
    for field_name in ("rebalance_timeout", "progress_timeout"):
        for value in (0, -5):
            yield Case(
                f"{field_name}-{value}",
                lambda w, f=field_name, v=value: w.join(**{f: v}),
                InvalidRequestError,
                "timeouts must be > 0",
            )
        yield Case(
            f"{field_name}-nan",
            lambda w, f=field_name: w.join(group="fresh", **{f: float("nan")}),
            InvalidRequestError,
            "timeouts must be > 0",
        )


def _limit_cases() -> Iterator[Case]:
    subs = {"m": Subscription([TOPIC])}
    for name in ("range", "roundrobin", "sticky", "cooperative-sticky"):
        yield Case(
            f"assignor-{name}-negative-count",
            lambda w, n=name: get_assignor(n).assign({TOPIC: -1}, subs),
            ValueError,
            "-1",
        )
    for count in (-1, 2.0, "3", None):
        yield Case(
            f"metadata-count-{count!r}",
            lambda w, c=count: w.coordinator.report_topic_metadata(GROUP, {TOPIC: c}),
            InvalidRequestError,
            f"bad partition count {count!r}",
        )
    yield Case(
        "metadata-count-bool",
        lambda w: w.coordinator.report_topic_metadata(GROUP, {TOPIC: True}),
        InvalidRequestError,
        "bad partition count True",
    )
    ranges: list[tuple[str, Callable[[], OffsetRange], str]] = [
        ("negative-partition", lambda: OffsetRange(TOPIC, -1, 0, 1), "partition must be >= 0"),
        ("negative-from", lambda: OffsetRange(TOPIC, 0, -1, 1), "invalid offset range [-1, 1)"),
        ("until-before-from", lambda: OffsetRange(TOPIC, 0, 5, 4), "invalid offset range [5, 4)"),
        ("negative-records", lambda: OffsetRange(TOPIC, 0, 0, 1, records=-1), "record counts must be >= 0"),
        ("negative-quarantined", lambda: OffsetRange(TOPIC, 0, 0, 1, quarantined=-3), "counts must be >= 0"),
        ("float-offsets", lambda: OffsetRange(TOPIC, 2, 0.5, 1.5), "offset"),  # type: ignore[arg-type]
        ("nan-offset", lambda: OffsetRange(TOPIC, 2, 0, float("nan")), "offset"),  # type: ignore[arg-type]
        ("offset-beyond-int64", lambda: OffsetRange(TOPIC, 2, 0, 2**63), "offset"),
    ]
    for label, build, fragment in ranges:
        yield Case(f"offset-range-{label}", lambda w, b=build: w.commit(b()), ValueError, fragment)
    configs: list[tuple[str, dict[str, Any], str]] = [
        ("negative-delay", {"initial_rebalance_delay": -1}, "initial_rebalance_delay must be >= 0"),
        ("zero-min-session", {"min_session_timeout": 0}, "0 < min_session_timeout"),
        ("negative-min-session", {"min_session_timeout": -6}, "0 < min_session_timeout"),
        ("max-below-min", {"min_session_timeout": 10, "max_session_timeout": 5}, "<= max_session_timeout"),
        ("zero-max-size", {"max_size": 0}, "max_size must be >= 1"),
        ("negative-max-size", {"max_size": -2}, "max_size must be >= 1"),
        ("nan-delay", {"initial_rebalance_delay": float("nan")}, "initial_rebalance_delay"),
    ]
    for label, kwargs, fragment in configs:
        yield Case(f"config-{label}", lambda w, k=kwargs: GroupConfig(**k), ValueError, fragment)
    yield Case("clock-backwards", lambda w: ManualClock(5.0).advance(-1), ValueError, "only moves forward")


CASES = [*_name_cases(), *_assignor_cases(), *_timeout_cases(), *_limit_cases()]


# ------------------------------------------------------------------------------------------ the test


@pytest.fixture(params=["memory", "sqlite"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    store = (
        MemoryGroupStore()
        if request.param == "memory"
        else SqlGroupStore.from_url(str(request.getfixturevalue("sqlite_url")))
    )
    coordinator = Coordinator(store, clock=ManualClock(1000.0), config=GroupConfig(initial_rebalance_delay=0))
    coordinator.report_topic_metadata(GROUP, {TOPIC: PARTITIONS})
    member = Client(coordinator, GROUP, "a", assignors=("range",))
    member.join()
    member.sync()
    member.commit(OffsetRange(TOPIC, 0, 0, 10, records=10))
    assert coordinator.describe_group(GROUP).state is GroupState.STABLE
    yield World(coordinator, member)
    coordinator.close()


def _state(world: World) -> tuple[object, ...]:
    """Everything a refused call must leave as it was."""
    c = world.coordinator
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    return (
        c.describe_group(GROUP),
        c.fetch_offsets(GROUP, partitions),
        [c.ledger_history(GROUP, TOPIC, p) for p in range(PARTITIONS)],
        c.group_events(GROUP),
        [g.name for g in c.list_groups()],
    )


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_bad_input_is_refused_clearly_and_changes_nothing(case: Case, world: World) -> None:
    before = _state(world)
    with pytest.raises(case.error) as refused:
        case.call(world)
    assert case.fragment in str(refused.value), f"{case.id}: message {str(refused.value)!r} lacks {case.fragment!r}"
    after = _state(world)
    if case.id.startswith("sync-unknown-assignor"):
        after = (*after[:4], [g for g in after[4] if g != "custom"])  # its own group, checked inside the call
    assert after == before, f"{case.id}: the refused call changed the group or its ledger"
    # ... and the group still works: its member commits the next range.
    world.commit(OffsetRange(TOPIC, 0, 10, 12, records=2))
    assert world.coordinator.fetch_offsets(GROUP, [TopicPartition(TOPIC, 0)]) == {TopicPartition(TOPIC, 0): 12}
