"""Kafka's own tools as the judge of a Cohort group: Kafka's consumer-group tool (`ConsumerGroupCommand`, what
`kafka-consumer-groups.sh` runs) on the session's broker through `harness.kafka_broker.run_kafka_tool`, its
`--describe` table parsed, and `cohort describe --json` (the command in a subprocess) beside it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from typing import Any

import pytest

from tests.support.audit_command import COHORT

CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
"""The main class of `kafka-consumer-groups.sh`."""

Row = tuple[int | None, int | None, int | None]
"""(CURRENT-OFFSET, LOG-END-OFFSET, LAG) of one partition; None where the tool prints `-`."""


def require_kafka_tools() -> None:
    """Skip on the embedded Tansu broker (`COHORT_TEST_BROKER=embedded`): Kafka's tools judge a Kafka broker."""
    from tests.fixtures.kafka import broker_choice

    if broker_choice() == "embedded":
        pytest.skip("Kafka's own tools judge Apache Kafka, not the embedded broker")


def consumer_groups(bootstrap: str, *args: str) -> str:
    """Run Kafka's consumer-group tool with `args` and return its standard output; fail on any error it reports
    (it exits 0 after some of them, saying `Error: ...`)."""
    from harness.kafka_broker import run_kafka_tool

    done = run_kafka_tool(CONSUMER_GROUPS, ["--bootstrap-server", bootstrap, *args], timeout_s=180.0)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "Error:" not in done.stdout, f"{args}: exit {done.returncode}\n{said[-3000:]}"
    return done.stdout


def _number(cell: str) -> int | None:
    return None if cell == "-" else int(cell)


def kafka_table(text: str, group: str, columns: tuple[str, ...]) -> dict[tuple[str, int], dict[str, str]]:
    """The rows of one of the tool's tables (`--describe`, `--reset-offsets`) for `group`, by (topic, partition),
    as {column: cell}: cells are split on blanks (group and topic names hold none)."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    headers = [i for i, cells in enumerate(lines) if cells[:1] == ["GROUP"]]
    assert len(headers) == 1, f"no single table header in:\n{text}"
    header = lines[headers[0]]
    assert set(columns) <= set(header), f"{columns} not all in {header}"
    rows = {}
    for cells in lines[headers[0] + 1 :]:
        assert len(cells) == len(header) and cells[0] == group, f"unexpected line {cells} under {header}"
        row = dict(zip(header, cells, strict=True))
        rows[(row["TOPIC"], int(row["PARTITION"]))] = row
    return rows


def kafka_describe(bootstrap: str, group: str) -> dict[tuple[str, int], Row]:
    """`kafka-consumer-groups --describe --group GROUP` as {(topic, partition): (current, log end, lag)}. Kafka
    lists a group without members by its committed offsets: a partition with none is not listed."""
    text = consumer_groups(bootstrap, "--describe", "--group", group)
    columns = ("CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")
    table = kafka_table(text, group, columns)
    return {
        key: (_number(row[columns[0]]), _number(row[columns[1]]), _number(row[columns[2]]))
        for key, row in table.items()
    }


def kafka_reset(bootstrap: str, group: str, *target: str) -> dict[tuple[str, int], int]:
    """`kafka-consumer-groups --reset-offsets ... --execute` on `group` (`target`: `--topic T:0 --to-earliest`...);
    the tool's NEW-OFFSET per partition."""
    text = consumer_groups(bootstrap, "--reset-offsets", "--group", group, *target, "--execute")
    return {key: int(row["NEW-OFFSET"]) for key, row in kafka_table(text, group, ("NEW-OFFSET",)).items()}


def cohort_describe(store_url: str, bootstrap: str, group: str) -> dict[str, Any]:
    """`cohort describe GROUP --json` with Kafka's log ends (the command in a subprocess)."""
    done = subprocess.run(
        [COHORT, "describe", group, "--store-url", store_url, "--bootstrap-servers", bootstrap, "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    described: dict[str, Any] = json.loads(done.stdout)
    return described


def cohort_rows(described: Mapping[str, Any]) -> dict[tuple[str, int], Row]:
    """`cohort describe --json`'s partitions as {(topic, partition): (current, log end, lag)}."""
    return {
        (p["topic"], p["partition"]): (p["current_offset"], p["log_end_offset"], p["lag"])
        for p in described["partitions"]
    }


def judge(store_url: str, bootstrap: str, group: str) -> dict[tuple[str, int], Row]:
    """Kafka's tool and `cohort describe` on `group`, compared: every partition with a committed offset has Kafka's
    CURRENT-OFFSET, LOG-END-OFFSET and LAG equal to Cohort's, and Kafka lists no other partition (a partition the
    ledger never committed has no committed offset in Kafka either). Cohort's rows are returned."""
    ours = cohort_rows(cohort_describe(store_url, bootstrap, group))
    kafkas = kafka_describe(bootstrap, group)
    committed = {key: row for key, row in ours.items() if row[0] is not None}
    assert kafkas == committed, f"Kafka's tool: {sorted(kafkas.items())}\ncohort describe: {sorted(ours.items())}"
    return ours
