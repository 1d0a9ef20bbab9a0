"""What `cohort simulate` reads and prints beside its plan (cohort.cli.ops.simulate_change): a synthetic group's
partition counts, a backlog file, and the plan as JSON or as tables."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from cohort.cli.tables import print_table

if TYPE_CHECKING:
    from cohort.cli.ops import WhatIf
    from cohort.common.types import TopicPartition

__all__ = ["parse_counts", "print_plan", "read_backlog"]


def read_backlog(path: str) -> dict[TopicPartition, int]:
    """A JSON object of "TOPIC:PARTITION" -> records left; a bad file is a usage error naming the problem."""
    from pathlib import Path

    from cohort.common.types import TopicPartition

    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}", param_hint="--backlog") from None
    if not isinstance(raw, dict):
        raise click.BadParameter('expected a JSON object {"TOPIC:PARTITION": records}', param_hint="--backlog")
    backlog: dict[TopicPartition, int] = {}
    for key, records in raw.items():
        topic, _, number = str(key).rpartition(":")
        if (
            not topic
            or not number.isdigit()
            or isinstance(records, bool)
            or not isinstance(records, int)
            or records < 0
        ):
            raise click.BadParameter(
                f"expected TOPIC:PARTITION -> records >= 0, got {key!r}: {records!r}", param_hint="--backlog"
            )
        backlog[TopicPartition(topic, int(number))] = records
    return backlog


def parse_counts(items: tuple[str, ...]) -> dict[str, int]:
    """--partitions TOPIC:COUNT values as partition counts per topic (COUNT >= 1)."""
    counts: dict[str, int] = {}
    for item in items:
        topic, _, count = item.rpartition(":")
        if not topic or not count.isdigit() or int(count) < 1:
            raise click.BadParameter(f"expected TOPIC:COUNT with COUNT >= 1, got {item!r}", param_hint="--partitions")
        counts[topic] = int(count)
    return counts


def print_plan(plan: WhatIf, *, as_json: bool) -> None:
    """The plan as one JSON object, or as two tables: partitions (and backlog) per member before and after, and
    the moves."""
    if as_json:
        click.echo(
            json.dumps(
                {
                    "assignor": plan.assignor,
                    "rounds": plan.rounds,
                    "moved": [{"topic": t, "partition": p, "from": a, "to": b} for t, p, a, b in plan.moved],
                    "after": {m: [str(tp) for tp in tps] for m, tps in plan.after.items()},
                    "backlog": {m: {"before": b, "after": a} for m, (b, a) in plan.records.items()},
                }
            )
        )
        return
    every = sorted(set(plan.before) | set(plan.after))
    rows = [[m, len(plan.before.get(m, ())), len(plan.after.get(m, ()))] for m in every]
    headers = ["MEMBER", "BEFORE", "AFTER"]
    if plan.records:
        headers += ["BACKLOG BEFORE", "BACKLOG AFTER"]
        rows = [[*row, *plan.records.get(str(row[0]), (0, 0))] for row in rows]
    print_table(f"Assignor {plan.assignor}: {len(plan.moved)} partition(s) move", headers, rows)
    print_table("Moves", ["TOPIC", "PARTITION", "FROM", "TO"], [list(m) for m in plan.moved])
