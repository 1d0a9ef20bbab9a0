"""`cohort reset-offsets`: from the command's options to a reset, and its plan printed.

Reading the options (`ResetOptions.target`, `ResetOptions.selection`) gives plain values; `reset_group` checks
the partitions against Kafka and applies the reset through `cohort.runtime.offset_reset.apply_reset`, the path a
replay run started from an orchestrator takes too: the plan, the ledger's reset entries, the mirror to Kafka's
committed offsets. A dry run reads only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.ledger.resets import PartitionReset, ResetTarget, parse_datetime, parse_duration
from cohort.common.names import InvalidNameError, validate_topic_name
from cohort.common.types import TopicPartition

if TYPE_CHECKING:
    from cohort.cli.command_config import CommandConfig

__all__ = ["ResetOptions", "reset_group"]

_KAFKA_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ResetOptions:
    """The command's choice of partitions and target, as given."""

    topics: Sequence[str] = ()
    all_topics: bool = False
    to_earliest: bool = False
    to_latest: bool = False
    to_offset: int | None = None
    to_datetime: str | None = None
    shift_by: int | None = None
    by_duration: str | None = None

    def target(self, now: datetime) -> ResetTarget:
        """The one target the options name (a usage error otherwise)."""
        given = {
            "--to-earliest": self.to_earliest or None,
            "--to-latest": self.to_latest or None,
            "--to-offset": self.to_offset,
            "--to-datetime": self.to_datetime,
            "--shift-by": self.shift_by,
            "--by-duration": self.by_duration,
        }
        chosen = [name for name, value in given.items() if value is not None]
        if len(chosen) != 1:
            raise click.UsageError(f"give exactly one of {', '.join(given)} (got {', '.join(chosen) or 'none'})")
        try:
            if self.to_earliest:
                return ResetTarget.earliest()
            if self.to_latest:
                return ResetTarget.latest()
            if self.to_offset is not None:
                return ResetTarget.to_offset(self.to_offset)
            if self.shift_by is not None:
                return ResetTarget.shift(self.shift_by)
            if self.to_datetime is not None:
                return ResetTarget.to_datetime(parse_datetime(self.to_datetime))
            assert self.by_duration is not None
            return ResetTarget.by_duration(parse_duration(self.by_duration), now)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=f"'{chosen[0]}'") from None

    def selection(self) -> dict[str, tuple[int, ...] | None]:
        """topic -> the partitions asked for (None: all of them); empty with --all-topics."""
        if bool(self.topics) == self.all_topics:
            raise click.UsageError("give --topic (repeatable) or --all-topics")
        chosen: dict[str, tuple[int, ...] | None] = {}
        for item in self.topics:
            topic, _, listed = item.partition(":")
            try:
                validate_topic_name(topic)
            except InvalidNameError as exc:
                raise click.BadParameter(str(exc), param_hint="'--topic'") from None
            if not listed:
                chosen[topic] = None
                continue
            try:
                numbers = tuple(sorted({int(p) for p in listed.split(",")}))
            except ValueError:
                raise click.BadParameter(
                    f"{item!r}: partitions are numbers separated by commas, as in {topic}:0,1,2", param_hint="'--topic'"
                ) from None
            if any(p < 0 for p in numbers):
                raise click.BadParameter(f"{item!r}: partitions are >= 0", param_hint="'--topic'")
            chosen[topic] = numbers
        return chosen


def _partitions(selection: Mapping[str, tuple[int, ...] | None], counts: Mapping[str, int]) -> list[TopicPartition]:
    """The partitions a selection names, checked against the topics' partition counts."""
    found: list[TopicPartition] = []
    for topic, numbers in sorted(selection.items()):
        if topic not in counts:
            raise click.ClickException(f"topic {topic!r} does not exist in Kafka")
        count = counts[topic]
        missing = [p for p in numbers or () if p >= count]
        if missing:
            raise click.ClickException(f"topic {topic!r} has partitions 0..{count - 1}; it has no partition {missing}")
        found.extend(TopicPartition(topic, p) for p in (numbers if numbers is not None else range(count)))
    return found


def reset_group(
    coordinator: Coordinator,
    group: str,
    bootstrap_servers: str,
    options: ResetOptions,
    *,
    reason: str,
    execute: bool,
    as_json: bool,
    now: datetime | None = None,
    command_config: CommandConfig | None = None,
) -> list[PartitionReset]:
    """Plan the reset (and apply it with `execute`), print the plan, return it. `command_config`: the client
    settings of `--command-config` (security, SASL, TLS)."""
    from cohort.assignment.errors import CoordinatorError
    from cohort.cli.kafka import kafka_errors, kafka_for
    from cohort.pipelines.kafka.mirror import KafkaOffsetMirror
    from cohort.runtime.offset_reset import OperatorLedger, apply_reset

    target = options.target(now or datetime.now(UTC))
    selection = options.selection()
    kafka = kafka_for(bootstrap_servers, _KAFKA_TIMEOUT_S, command_config)
    mirror = KafkaOffsetMirror(dict(kafka.config), attempts=3, timeout_s=_KAFKA_TIMEOUT_S)
    try:
        with kafka_errors(_KAFKA_TIMEOUT_S):
            if options.all_topics:
                counts = dict(coordinator.describe_group(group).partitions_per_topic)
                if not counts:
                    raise click.ClickException(f"group {group!r} knows no topics yet: name them with --topic")
                selection = dict.fromkeys(counts)
                counts = kafka.partition_counts(sorted(counts))
            else:
                counts = kafka.partition_counts(sorted(selection))
            partitions = _partitions(selection, counts)
            ledger = OperatorLedger(coordinator, group)
            try:
                done = apply_reset(
                    ledger,
                    target,
                    partitions,
                    dict(kafka.config),
                    mirror,
                    reason=reason,
                    execute=execute,
                    timeout_s=_KAFKA_TIMEOUT_S,
                )
            except CoordinatorError as exc:
                raise click.ClickException(f"cannot reset offsets of group {group!r}: {exc.message}") from None
    finally:
        kafka.close()
    _report(group, target, done.plans, executed=execute, as_json=as_json)
    if done.mirror_error:
        click.echo(f"warning: {done.mirror_error}; the group's next batch mirrors its offsets", err=True)
    return list(done.plans)


def _report(group: str, target: ResetTarget, plans: Sequence[PartitionReset], *, executed: bool, as_json: bool) -> None:
    from cohort.cli.tables import print_reset_plan

    replayed, skipped = sum(p.replayed for p in plans), sum(p.skipped for p in plans)
    if as_json:
        payload = {
            "group": group,
            "target": target.describe(),
            "executed": executed,
            "partitions": [
                {
                    "topic": p.tp.topic,
                    "partition": p.tp.partition,
                    "current_offset": p.current,
                    "new_offset": p.new,
                    "replayed": p.replayed,
                    "skipped": p.skipped,
                    "clamped": p.clamped,
                }
                for p in plans
            ],
            "replayed": replayed,
            "skipped": skipped,
        }
        click.echo(json.dumps(payload))
        return
    print_reset_plan(group, plans, executed=executed)
    if not any(p.changes for p in plans):
        click.echo("Every partition is already there: nothing to reset.")
    elif not executed:
        click.echo("Dry run: nothing changed. Add --execute to apply this plan.")
    else:
        parts = []
        if replayed:
            parts.append(f"the group's next batch replays {replayed} records")
        if skipped:
            parts.append(f"{skipped} records are skipped")
        click.echo(f"Offsets reset ({target.describe()}): {'; '.join(parts)}.")
