"""The operations CLI (`cohort groups/describe/delete/simulate`) against a real store and the real broker."""

import json

from click.testing import CliRunner

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.group_state import GroupConfig
from cohort.assignment.messages import JoinRequest
from cohort.cli.main import main
from cohort.common.types import OffsetRange


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def _one_member_group(url: str, group: str, topic: str, partitions: int) -> tuple[Coordinator, str]:
    coordinator = Coordinator.from_url(url, config=GroupConfig(initial_rebalance_delay=0))
    coordinator.report_topic_metadata(group, {topic: partitions})
    request = JoinRequest(instance_id=f"{group}/worker-1", client_id="run-1", topics=[topic], session_timeout=60)
    joined = coordinator.join(group, request)
    coordinator.sync(group, joined.member_id, joined.generation)
    return coordinator, joined.member_id


def test_groups_describe_and_delete(sqlite_url, kafka_config, topic_factory, produce_records):
    topic = topic_factory(2, suffix="cli")
    produce_records(topic, [(0, None, b"a")] * 5 + [(1, None, b"b")] * 3)
    coordinator, member = _one_member_group(sqlite_url, "cli-group", topic, 2)
    coordinator.commit_offsets(
        "cli-group",
        [OffsetRange(topic, 0, 0, 4, records=4)],
        member_id=member,
        generation=1,
        instance_id="cli-group/worker-1",
    )

    code, out = _cli("groups", "--store-url", sqlite_url, "--json")
    assert code == 0
    assert json.loads(out) == [
        {"group": "cli-group", "state": "Stable", "members": 1, "generation": 1, "assignor": "cooperative-sticky"}
    ]

    code, out = _cli(
        "describe",
        "cli-group",
        "--store-url",
        sqlite_url,
        "--bootstrap-servers",
        kafka_config["bootstrap.servers"],
        "--json",
    )
    assert code == 0
    described = json.loads(out)
    assert described["state"] == "Stable"
    assert described["partitions"] == [
        {
            "topic": topic,
            "partition": 0,
            "current_offset": 4,
            "log_end_offset": 5,
            "lag": 1,
            "owner": "cli-group/worker-1",
            "generation": 1,
        },
        {
            "topic": topic,
            "partition": 1,
            "current_offset": None,
            "log_end_offset": 3,
            "lag": 3,
            "owner": "cli-group/worker-1",
            "generation": 1,
        },
    ]
    code, out = _cli("describe", "cli-group", "--store-url", sqlite_url)
    assert code == 0 and "CURRENT-OFFSET" in out and "cli-group/worker-1" in out

    refused = CliRunner().invoke(main, ["delete", "cli-group", "--store-url", sqlite_url])
    assert refused.exit_code == 1
    assert "cannot delete group 'cli-group'" in refused.output

    coordinator.leave("cli-group", member, instance_id="cli-group/worker-1")
    code, out = _cli("delete", "cli-group", "--store-url", sqlite_url)
    assert code == 0
    assert json.loads(_cli("groups", "--store-url", sqlite_url, "--json")[1]) == []
    coordinator.close()


def test_describe_rejects_an_unsafe_group_name(sqlite_url):
    result = CliRunner().invoke(main, ["describe", "../etc", "--store-url", sqlite_url])
    assert result.exit_code == 1
    assert "illegal characters" in result.output


def test_simulate_synthetic_and_live(sqlite_url):
    code, out = _cli("simulate", "--members", "3", "--partitions", "orders:9", "--leave", "member-2", "--json")
    assert code == 0
    plan = json.loads(out)
    assert {m["from"] for m in plan["moved"]} == {"member-2"}  # sticky: only the leaver's partitions move
    assert len(plan["moved"]) == 3
    assert sorted(len(v) for v in plan["after"].values()) == [0, 4, 5] or sorted(
        len(v) for v in plan["after"].values()
    ) == [4, 5]

    code, out = _cli(
        "simulate",
        "--members",
        "2",
        "--partitions",
        "orders:6",
        "--join",
        "1",
        "--assignor",
        "cooperative-sticky",
        "--json",
    )
    plan = json.loads(out)
    assert plan["rounds"] == 2 and len(plan["moved"]) == 2 and all(m["to"] == "new-member-1" for m in plan["moved"])

    coordinator, _member = _one_member_group(sqlite_url, "live", "orders", 4)
    code, out = _cli("simulate", "--group", "live", "--store-url", sqlite_url, "--join", "1", "--json")
    plan = json.loads(out)
    assert code == 0 and len(plan["moved"]) == 2 and all(m["from"] == "live/worker-1" for m in plan["moved"])
    coordinator.close()

    result = CliRunner().invoke(main, ["simulate", "--members", "2", "--partitions", "t:2", "--assignor", "nope"])
    assert result.exit_code == 1 and "unknown assignor" in result.output
