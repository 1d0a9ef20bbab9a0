"""The operations CLI (`cohort groups/describe/delete/simulate/audit/broker`) against a real store and the real
broker, run as the user runs it: the `cohort` command in a subprocess."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cohort.assets.translator import DagsterCohortTranslator
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.group_state import GroupConfig
from cohort.assignment.protocol.messages import JoinRequest
from cohort.common.types import OffsetRange
from harness.dagster_group import config_for, definitions_for, json_records

COHORT = str(Path(sys.executable).with_name("cohort"))


def _environment(**overrides: str) -> dict[str, str]:
    """The test's environment without any COHORT_ setting, plus `overrides`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    env.update(overrides)
    return env


def _run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COHORT, *args], env=env or _environment(), cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _cli(*args: str) -> tuple[int, str]:
    """(exit status, stdout; with stderr when the command failed)."""
    done = _run(*args)
    return done.returncode, done.stdout if done.returncode == 0 else done.stdout + done.stderr


def _one_member_group(url: str, group: str, topic: str, partitions: int) -> tuple[Coordinator, str]:
    coordinator = Coordinator.from_url(url, config=GroupConfig(initial_rebalance_delay=0))
    coordinator.report_topic_metadata(group, {topic: partitions})
    request = JoinRequest(instance_id=f"{group}/worker-1", client_id="run-1", topics=[topic], session_timeout=60)
    joined = coordinator.join(group, request)
    coordinator.sync(group, joined.member_id, joined.generation)
    return coordinator, joined.member_id


# On Kafka and on the embedded broker `cohort describe` uses (`cohort broker`): Tansu's watermark deviation is where
# the log-end offsets it shows could differ (README).
@pytest.mark.parametrize("on", [pytest.param("kafka"), pytest.param("embedded", marks=pytest.mark.embedded_broker)])
def test_groups_describe_and_delete(on, sqlite_url, kafka_config, topic_factory, produce_records):
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
        {
            "group": "cli-group",
            "state": "Stable",
            "members": 1,
            "generation": 1,
            "assignor": "cooperative-sticky",
            "last_assignor": "cooperative-sticky",
            "configured_assignors": ["cooperative-sticky", "sticky", "range"],
        }
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

    code, out = _cli("delete", "cli-group", "--store-url", sqlite_url)
    assert code == 1
    assert "cannot delete group 'cli-group'" in out

    coordinator.leave("cli-group", member, instance_id="cli-group/worker-1")
    code, out = _cli("delete", "cli-group", "--store-url", sqlite_url)
    assert code == 0
    assert json.loads(_cli("groups", "--store-url", sqlite_url, "--json")[1]) == []
    coordinator.close()


def test_an_emptied_group_still_shows_the_assignor_it_runs_with(
    make_setup, topic_factory, produce_records, instance, spark
):
    """After a batch its worker slots have left the group, which is Empty: it has no current assignor (`assignor`
    is null, as Kafka shows an empty group), and `groups` and `describe` show the assignor of its last generation
    and the assignors it is configured with, in the table and in --json."""
    topic = topic_factory(2, suffix="emptied")
    produce_records(topic, json_records(10, 2))
    setup = make_setup((topic,), slots=2, settings={"initial_rebalance_delay_s": 0.0, "assignors": ["sticky", "range"]})
    config = config_for(setup)
    batch = definitions_for(setup).resolve_job_def(DagsterCohortTranslator().get_job_name(config.group))
    assert batch.execute_in_process(instance=instance).success
    store = ("--store-url", setup.store_url)

    code, out = _cli("groups", *store, "--json")
    assert code == 0, out
    [row] = [r for r in json.loads(out) if r["group"] == config.group]
    assert row["state"] == "Empty" and row["members"] == 0 and row["assignor"] is None
    assert row["last_assignor"] == "sticky" and row["configured_assignors"] == ["sticky", "range"]
    code, out = _cli("describe", config.group, *store, "--json")
    assert code == 0, out
    described = json.loads(out)
    assert (described["state"], described["assignor"]) == ("Empty", None)
    assert described["last_assignor"] == "sticky" and described["configured_assignors"] == ["sticky", "range"]
    assert {(p["partition"], p["current_offset"], p["owner"]) for p in described["partitions"]} == {
        (0, 5, None),
        (1, 5, None),
    }

    code, out = _cli("groups", *store)
    assert code == 0, out
    [line] = [line for line in out.splitlines() if config.group in line]
    cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
    generation = str(row["generation"])
    assert cells == [config.group, "Empty", "0", generation, "sticky (last generation)", "sticky, range"], out
    code, out = _cli("describe", config.group, *store)
    shown = " ".join(out.split())  # Rich wraps the title to the table's width
    assert code == 0, out
    title = (
        f"Group {config.group}: Empty, generation {described['generation']}, assignor sticky (last generation), "
        "0 member(s); configured assignors sticky, range"
    )
    assert title in shown, out


def test_describe_rejects_an_unsafe_group_name(sqlite_url):
    code, out = _cli("describe", "../etc", "--store-url", sqlite_url)
    assert code == 1
    assert "illegal characters" in out


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

    code, out = _cli("simulate", "--members", "2", "--partitions", "t:2", "--assignor", "nope")
    assert code == 1 and "unknown assignor" in out


# ------------------------------------------------------------------------------ operator-facing errors

READ_ONLY = [
    ("groups",),
    ("describe", "orders"),
    ("simulate", "--group", "orders", "--join", "1"),
    ("audit", "orders", "--sink", "lake"),
]
COMMANDS = [*READ_ONLY, ("delete", "orders")]
BAD_STORES = [
    (
        "postgresql+psycopg://cohort:s3cret@127.0.0.1:1/cohort",  # nothing listens on port 1
        "Error: cannot open the store postgresql+psycopg://cohort:***@127.0.0.1:1/cohort: connection failed",
    ),
    ("not a url", "Error: the store URL 'not a url' is not a SQLAlchemy URL"),
    ("foo://x", "Error: the store URL foo://x names a database SQLAlchemy does not know ('foo')"),
    ("postgresql+psycopg2://u@127.0.0.1/db", "Error: the store URL postgresql+psycopg2://u@127.0.0.1/db needs a "),
    ("sqlite:///missing/dir/cohort.db", "Error: the store sqlite:///missing/dir/cohort.db does not exist: there is"),
]


def _short(done: subprocess.CompletedProcess[str], expected: str, *, status: int = 1) -> None:
    """A short error naming the problem: one `Error:` line (click's usage lines aside), no traceback."""
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    assert expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout and len(done.stderr.splitlines()) <= 4, done.stderr
    assert "s3cret" not in done.stderr + done.stdout


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    ("url", "expected"), BAD_STORES, ids=["unreachable", "unparseable", "dialect", "driver", "missing"]
)
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.slow
def test_every_command_names_a_bad_store_in_one_line(tmp_path, command, url, expected):
    done = _run(*command, "--store-url", url, cwd=tmp_path)
    _short(done, expected)
    assert _tree(tmp_path) == []  # nothing created, not even for `delete`


@pytest.mark.parametrize("command", READ_ONLY, ids=lambda c: c[0])
def test_read_only_commands_create_no_store_no_directory_no_file(tmp_path, command):
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    env = _environment(HOME=str(home), XDG_DATA_HOME="")
    for store in (None, "sqlite:///cohort.db", "sqlite:///.cohort/cohort.db", f"sqlite:///{tmp_path / 'x' / 'c.db'}"):
        args = [*command] if store is None else [*command, "--store-url", store]
        _short(_run(*args, env=env, cwd=project), "does not exist: there is no file")
        assert _tree(tmp_path) == ["home", "project"], store
    default = home / ".local" / "share" / "cohort" / "cohort.db"
    done = _run(*command, env=env, cwd=project)
    assert f"store: sqlite:///{default} (the default; give --store-url or set COHORT_STORE_URL)" in done.stderr


def test_one_default_store_whatever_the_working_directory(tmp_path):
    """Without --store-url or COHORT_STORE_URL every process of the user finds the same store: a SQLite
    file in the user's data directory, named on stderr; the resources default to the same file."""
    home, data = tmp_path / "home", tmp_path / "data"
    (tmp_path / "a" / "b").mkdir(parents=True)
    default = data / "cohort" / "cohort.db"
    env = _environment(HOME=str(home), XDG_DATA_HOME=str(data))
    resource_default = subprocess.run(
        [sys.executable, "-c", "from cohort.resources.group import DEFAULT_STORE_URL; print(DEFAULT_STORE_URL)"],
        env=env,
        cwd=tmp_path / "a",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert resource_default == f"sqlite:///{default}"
    coordinator, _member = _one_member_group(resource_default, "shared", "orders", 2)
    for cwd in (tmp_path, tmp_path / "a", tmp_path / "a" / "b"):
        done = _run("groups", "--json", env=env, cwd=cwd)
        assert done.returncode == 0, done.stderr
        assert [g["group"] for g in json.loads(done.stdout)] == ["shared"]  # the notice goes to stderr
        assert str(default) in done.stderr
    coordinator.close()
    elsewhere = f"sqlite:///{tmp_path / 'other.db'}"
    Coordinator.from_url(elsewhere).close()
    done = _run("groups", "--json", env={**env, "COHORT_STORE_URL": elsewhere}, cwd=tmp_path)
    assert (done.returncode, json.loads(done.stdout), done.stderr) == (0, [], "")  # the variable comes first


def test_an_unknown_group_does_not_exist(sqlite_url):
    coordinator, _member = _one_member_group(sqlite_url, "known", "orders", 1)
    for command in (("describe", "nope"), ("delete", "nope"), ("simulate", "--group", "nope", "--join", "1")):
        _short(_run(*command, "--store-url", sqlite_url), "Error: group 'nope' does not exist")
    coordinator.close()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when the probe is


def test_describe_with_kafka_down_fails_fast_and_quietly(sqlite_url):
    coordinator, _member = _one_member_group(sqlite_url, "g", "orders", 4)
    started = time.monotonic()
    done = _run("describe", "g", "--store-url", sqlite_url, "--bootstrap-servers", f"127.0.0.1:{_closed_port()}")
    elapsed = time.monotonic() - started
    _short(done, "Error: could not read topic metadata from 127.0.0.1:")
    assert "FAIL|" not in done.stderr  # librdkafka's own retry log lines
    assert elapsed < 15, elapsed
    _short(
        _run("describe", "g", "--store-url", sqlite_url, "--bootstrap-servers", "localhost"),
        "Invalid value for '--bootstrap-servers': bootstrap_servers must be host:port",
        status=2,
    )
    coordinator.close()


def test_broker_refuses_a_port_in_use():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        _short(_run("broker", "--port", str(port)), f"Error: port {port} on 127.0.0.1 is in use")
