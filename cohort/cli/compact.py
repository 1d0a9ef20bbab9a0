"""`cohort compact`: fold a group's old ledger ranges and drop its old events (dry run unless --execute)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import click

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import FoldConflictError
from cohort.assignment.ledger.resets import parse_datetime, parse_duration
from cohort.assignment.ledger.retention_run import RetentionPlan, apply_retention_plan, plan_retention

__all__ = ["compact_group", "parse_cutoff"]


def parse_cutoff(text: str, now: float) -> float:
    """`--before`: an ISO 8601 date-time (no zone: UTC) or a duration back from now (`P30D`, `PT12H`)."""
    value = text.strip()
    try:
        if value.upper().startswith("P"):
            return now - parse_duration(value).total_seconds()
        return parse_datetime(value).timestamp()
    except ValueError as exc:
        raise click.BadParameter(f"{exc} (or a duration back from now such as P30D)", param_hint="--before") from None


def compact_group(
    coordinator: Coordinator, group: str, before: float, *, keep_events: int, execute: bool, as_json: bool
) -> RetentionPlan:
    """Plan (and with `execute` apply) the group's retention, then print what it does."""
    plan = plan_retention(coordinator, group, before, keep_events=keep_events)
    dropped: int | None = None
    if execute:
        try:
            dropped = apply_retention_plan(coordinator, plan)
        except FoldConflictError as exc:
            raise click.ClickException(exc.message) from None
    _report(plan, executed=execute, dropped=dropped, as_json=as_json)
    return plan


def _report(plan: RetentionPlan, *, executed: bool, dropped: int | None, as_json: bool) -> None:
    cutoff = datetime.fromtimestamp(plan.before, UTC).isoformat(timespec="seconds")
    rows = [
        {
            "topic": p.tp.topic,
            "partition": p.tp.partition,
            "folds": len(p.folds),
            "ranges_folded": sum(f.folded for f in p.folds),
            "rows_removed": p.removed,
            "folded_through": max((f.entry.until_offset for f in p.folds), default=None),
        }
        for p in plan.partitions
    ]
    if as_json:
        payload = {
            "group": plan.group,
            "before": cutoff,
            "executed": executed,
            "partitions": rows,
            "rows_removed": plan.removed,
            "events_dropped": dropped,
        }
        click.echo(json.dumps(payload))
        return
    from cohort.cli.tables import print_table

    print_table(
        f"Retention of group {plan.group}: ledger ranges committed before {cutoff}",
        ["TOPIC", "PARTITION", "FOLDS", "RANGES", "REMOVED", "THROUGH"],
        [
            [r["topic"], r["partition"], r["folds"], r["ranges_folded"], r["rows_removed"], r["folded_through"]]
            for r in rows
        ],
    )
    if not plan.removed and not executed:
        click.echo("Nothing to fold. Events older than the cut-off would be dropped with --execute.")
    elif not executed:
        click.echo(f"Dry run: nothing changed. Add --execute to fold {plan.removed} ledger rows.")
    else:
        click.echo(f"Folded {plan.removed} ledger rows; dropped {dropped} group events older than {cutoff}.")


def now() -> float:
    """The wall clock, for the default cut-off."""
    return time.time()
