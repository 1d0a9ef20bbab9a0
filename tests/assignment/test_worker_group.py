"""The orchestrator-free description of a group's worker slots: its checks, its slots' ids, the member of a slot."""

from pathlib import Path

import pytest

from cohort.assignment.assignors.registry import UnknownAssignorError
from cohort.assignment.worker_group import DEFAULT_STORE_URL, WorkerGroup
from cohort.common.names import InvalidNameError


def test_slots_have_static_instance_ids_and_back():
    group = WorkerGroup("orders-ingest", topics=("orders",), worker_slots=3)
    assert [group.instance_id(s) for s in group.slots()] == [f"orders-ingest/worker-{n}" for n in (1, 2, 3)]
    assert group.slot_of("orders-ingest/worker-3") == 3
    assert group.slot_of("orders-ingest/worker-4") is None  # beyond the slots
    assert group.slot_of("other/worker-1") is None and group.slot_of(None) is None
    with pytest.raises(ValueError, match=r"worker slots 1..3, got 0"):
        group.instance_id(0)
    assert group.store_url == DEFAULT_STORE_URL


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"group": "bad name"}, InvalidNameError, "bad name"),
        ({"topics": ("a/b",)}, InvalidNameError, "a/b"),
        ({"topics": ()}, ValueError, "subscribes to nothing"),
        ({"assignors": ()}, ValueError, "at least one assignor"),
        ({"assignors": ("sticky", "nope")}, UnknownAssignorError, "nope"),
        ({"worker_slots": 0}, ValueError, "worker_slots must be 1..1000"),
        ({"worker_slots": True}, ValueError, "worker_slots must be 1..1000"),
        ({"session_timeout_s": 1.0}, ValueError, "session_timeout_s=1.0 is outside"),
        ({"heartbeat_interval_s": 40.0}, ValueError, "heartbeat_interval_s must be > 0 and below session_timeout_s"),
        ({"rebalance_timeout_s": 0.0}, ValueError, "rebalance_timeout_s and join_timeout_s must be > 0"),
        ({"initial_rebalance_delay_s": -1.0}, ValueError, "initial_rebalance_delay_s must be >= 0"),
        ({"store_url": "no url with secret"}, ValueError, "not a SQLAlchemy URL"),
        ({"topic_pattern": "("}, ValueError, "topic_pattern"),
    ],
)
def test_each_bad_setting_is_refused_naming_it(settings, error, message):
    values = {"group": "g", "topics": ("t",), **settings}
    with pytest.raises(error, match=message.replace("(", r"\(").replace(".", r"\.")) as refused:
        WorkerGroup(**values)
    assert "secret" not in str(refused.value)


def test_a_slot_joins_as_its_static_member_with_the_group_settings(tmp_path: Path):
    group = WorkerGroup(
        "g",
        topics=("t",),
        worker_slots=2,
        initial_rebalance_delay_s=0.0,
        session_timeout_s=10.0,
        store_url=f"sqlite:///{tmp_path / 'cohort.db'}",
    )
    coordinator = group.open_coordinator()
    try:
        coordinator.report_topic_metadata("g", {"t": 4})
        member = group.member(coordinator, 2, run_id="run-1", topic_metadata=lambda: {"t": 4})
        assert len(member.join()) == 4
        described = coordinator.describe_group("g")
        assert [(m.instance_id, m.client_id) for m in described.members] == [("g/worker-2", "run-1")]
        assert coordinator.config.initial_rebalance_delay == 0.0
        assert member.settings.session_timeout == 10.0
        assert member.generation >= 1
        member.close(leave=True)
        assert coordinator.describe_group("g").members == ()
    finally:
        coordinator.close()
