"""The `cohort` command line: operate groups (groups, describe, delete, simulate) and run the embedded broker."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from cohort.cli.options import COMMAND_CONFIG, JSON, STORE, group_name, sink_target
from cohort.cli.store_access import open_coordinator, require_group
from cohort.cli.tables import assignor_cell, print_describe, print_table

if TYPE_CHECKING:
    from cohort.cli.command_config import CommandConfig
    from cohort.common.types import TopicPartition

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cohort")
def main() -> None:
    """Cohort: Kafka consumer-group semantics for batch pipelines (Dagster or Airflow orchestrates, PySpark works)."""


@main.command()
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port on 127.0.0.1 (default: a free one).")
def broker(port: int | None) -> None:
    """Run the embedded Tansu broker in the foreground until Ctrl-C."""
    from cohort.devtools.embedded_broker import BrokerError, EmbeddedBroker

    if port is not None and _port_taken(port):
        raise click.ClickException(f"port {port} on 127.0.0.1 is in use: free it, or omit --port for a free one")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        running = EmbeddedBroker(port=port).start()
    except BrokerError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        click.echo(f"embedded broker on {running.bootstrap_servers} (log: {running.log_path}); Ctrl-C to stop")
        while not stop.wait(0.5):
            if not running.running:
                raise click.ClickException(f"the broker exited unexpectedly; see {running.log_path}")
    finally:
        running.stop()
        click.echo("broker stopped")


def _port_taken(port: int) -> bool:
    """Whether a server already listens on 127.0.0.1:`port` (the broker would fail there with a panic)."""
    import socket

    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


# ------------------------------------------------------------------------------------- operations

_KAFKA_TIMEOUT_S = 3.0
"""How long `describe --bootstrap-servers` waits for Kafka's answers before it gives up."""


def _end_offsets(
    bootstrap_servers: str, command_config: CommandConfig | None
) -> Callable[[Sequence[TopicPartition]], Mapping[TopicPartition, int]]:
    """Kafka's end offsets from `bootstrap_servers`, or one short error within a few seconds when Kafka does
    not answer or refuses the client (librdkafka's own log lines are silenced)."""
    from cohort.cli.kafka import kafka_errors, kafka_for

    kafka = kafka_for(bootstrap_servers, _KAFKA_TIMEOUT_S, command_config)

    def ends(partitions: Sequence[TopicPartition]) -> Mapping[TopicPartition, int]:
        try:
            with kafka_errors(_KAFKA_TIMEOUT_S):
                kafka.partition_counts()  # one metadata request: fails fast when no broker answers
                return kafka.end_offsets(partitions)
        finally:
            kafka.close()

    return ends


@main.command()
@STORE
@JSON
def groups(store_url: str | None, as_json: bool) -> None:
    """List groups: state, members, generation, assignor (an Empty group's last and configured ones)."""
    from cohort.cli.ops import group_rows

    with open_coordinator(store_url) as coordinator:
        rows = group_rows(coordinator)
    if as_json:
        click.echo(json.dumps(rows))
        return
    columns = ["GROUP", "STATE", "MEMBERS", "GENERATION", "ASSIGNOR", "CONFIGURED-ASSIGNORS"]
    print_table("Cohort groups", columns, [_group_cells(r) for r in rows])


def _group_cells(row: Mapping[str, Any]) -> list[object]:
    """A `groups` row as the table's cells: an Empty group's assignor is its last generation's, said so."""
    assignor = assignor_cell(row["assignor"], row["last_assignor"])
    configured = ", ".join(row["configured_assignors"]) or None
    return [row["group"], row["state"], row["members"], row["generation"], assignor, configured]


@main.command()
@click.argument("group", callback=group_name)
@STORE
@click.option(
    "--bootstrap-servers",
    envvar="COHORT_BOOTSTRAP_SERVERS",
    default=None,
    help="Kafka bootstrap servers for log-end offsets and lag (env COHORT_BOOTSTRAP_SERVERS).",
)
@COMMAND_CONFIG
@JSON
def describe(
    group: str,
    store_url: str | None,
    bootstrap_servers: str | None,
    command_config: CommandConfig | None,
    as_json: bool,
) -> None:
    """Describe GROUP per partition, like `kafka-consumer-groups --describe`."""
    from cohort.cli.ops import describe_rows, reset_rows

    with open_coordinator(store_url) as coordinator:
        require_group(coordinator, group)
        ends = _end_offsets(bootstrap_servers, command_config) if bootstrap_servers else None
        described = coordinator.describe_group(group)
        rows = describe_rows(coordinator, group, ends)
        resets = reset_rows(coordinator, group, rows)
    if as_json:
        payload = {
            "group": group,
            "state": described.state.value,
            "generation": described.generation,
            "assignor": described.assignor,
            "last_assignor": described.last_assignor,
            "configured_assignors": list(described.configured_assignors),
            "partitions": [r.as_dict() for r in rows],
            "resets": [r.as_dict() for r in resets],
        }
        click.echo(json.dumps(payload))
        return
    print_describe(described, rows, resets)


@main.command("reset-offsets")
@click.argument("group", callback=group_name)
@STORE
@click.option(
    "--bootstrap-servers",
    envvar="COHORT_BOOTSTRAP_SERVERS",
    required=True,
    help="Kafka bootstrap servers: the log's ends, times, and the mirror (env COHORT_BOOTSTRAP_SERVERS).",
)
@COMMAND_CONFIG
@click.option("--topic", "topics", multiple=True, help="TOPIC, or TOPIC:P,P,... for some partitions (repeatable).")
@click.option("--all-topics", is_flag=True, help="Every topic the group consumes.")
@click.option("--to-earliest", is_flag=True, help="To the first available offset.")
@click.option("--to-latest", is_flag=True, help="To the end of the log (skips what was not read).")
@click.option("--to-offset", type=click.IntRange(min=0), default=None, help="To this offset.")
@click.option("--to-datetime", default=None, help="To the first record at or after this ISO 8601 time (no zone: UTC).")
@click.option("--shift-by", type=int, default=None, help="By N offsets from the current one (negative: back).")
@click.option("--by-duration", default=None, help="To the records of this long ago (ISO 8601: PT15M, P1DT6H).")
@click.option("--reason", default="cohort reset-offsets", show_default=True, help="Why: recorded in the ledger.")
@click.option("--execute", is_flag=True, help="Apply the plan (without it: a dry run that prints the plan).")
@JSON
def reset_offsets(
    group: str,
    store_url: str | None,
    bootstrap_servers: str,
    command_config: CommandConfig | None,
    topics: tuple[str, ...],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    to_datetime: str | None,
    shift_by: int | None,
    by_duration: str | None,
    reason: str,
    execute: bool,
    as_json: bool,
) -> None:
    """Reset GROUP's committed offsets, like `kafka-consumer-groups --reset-offsets`.

    A dry run prints the plan unless --execute is given. Executed, each moved partition gets a reset entry
    in the ledger (who, when, why, old and new offset), Kafka's committed offsets follow, and the group's
    next batch reads from there: backward, it replays records (the sink replaces what it held for them);
    forward, it skips them. Refused while the group has live members.
    """
    from cohort.cli.resets import ResetOptions, reset_group

    options = ResetOptions(
        topics=topics,
        all_topics=all_topics,
        to_earliest=to_earliest,
        to_latest=to_latest,
        to_offset=to_offset,
        to_datetime=to_datetime,
        shift_by=shift_by,
        by_duration=by_duration,
    )
    with open_coordinator(store_url) as coordinator:
        require_group(coordinator, group)
        reset_group(
            coordinator,
            group,
            bootstrap_servers,
            options,
            reason=reason,
            execute=execute,
            as_json=as_json,
            command_config=command_config,
        )


@main.command()
@click.argument("group", callback=group_name)
@STORE
@sink_target
@click.option(
    "--bootstrap-servers",
    envvar="COHORT_BOOTSTRAP_SERVERS",
    default=None,
    help="Kafka bootstrap servers, to compare Kafka's committed offsets too (env COHORT_BOOTSTRAP_SERVERS).",
)
@COMMAND_CONFIG
@click.option("--repair", is_flag=True, help="Apply the safe repairs (needs the group without members).")
@JSON
def audit(
    group: str,
    store_url: str | None,
    sink: str,
    quarantine: str | None,
    bootstrap_servers: str | None,
    command_config: CommandConfig | None,
    table_format: str,
    iceberg_catalog: str | None,
    iceberg_table: str | None,
    repair: bool,
    as_json: bool,
) -> None:
    """Compare GROUP's ledger, Kafka's committed offsets and the sink per partition; exit 1 on any divergence.

    Each divergence is named. --repair re-mirrors offsets to Kafka where they differ from the ledger's (a mirror
    that failed, or Kafka's own reset tool used on the group: `cohort reset-offsets` moves a group) and publishes a
    committed range whose directory is missing from its run's staged output; for a Delta or Iceberg sink it
    adopts a table commit the ledger never saw, rolls back a quarantine commit whose sink commit never landed and
    deletes data files no commit references. It refuses the rest (output no commit accounts for, rows lost from
    the sink), which need an operator.
    """
    from cohort.cli.audit import SinkTarget, audit_group

    target = SinkTarget(sink, quarantine, table_format, iceberg_catalog, iceberg_table)
    with open_coordinator(store_url) as coordinator:
        require_group(coordinator, group)
        clean = audit_group(
            coordinator, group, target, bootstrap_servers, repair=repair, as_json=as_json, command_config=command_config
        )
    if not clean:
        raise SystemExit(1)


@main.command()
@click.argument("group", callback=group_name)
@STORE
@click.option(
    "--before",
    default="P30D",
    show_default=True,
    help="Fold ranges committed before this ISO 8601 time (no zone: UTC) or this long ago (P30D, PT12H).",
)
@click.option(
    "--keep-events",
    type=click.IntRange(min=0),
    default=1000,
    show_default=True,
    help="Group events kept whatever their age (the newest ones).",
)
@click.option("--execute", is_flag=True, help="Apply the plan (without it: a dry run that prints the plan).")
@JSON
def compact(group: str, store_url: str | None, before: str, keep_events: int, execute: bool, as_json: bool) -> None:
    """Fold GROUP's old ledger ranges into one summary range per partition and drop its old events.

    Each run of contiguous committed ranges older than --before, already shown in every audit trail (Dagster's
    materializations, Airflow's asset events), becomes one range of kind "fold" with their counts added and
    their digests combined; resets, skipped gaps and each partition's newest range stay as they are. The audit,
    `describe` and replays from after the folded offsets keep working (docs/operations.md). Dry run unless
    --execute.
    """
    from cohort.cli.compact import compact_group, now, parse_cutoff

    cutoff = parse_cutoff(before, now())
    with open_coordinator(store_url) as coordinator:
        require_group(coordinator, group)
        compact_group(coordinator, group, cutoff, keep_events=keep_events, execute=execute, as_json=as_json)


@main.command()
@click.argument("group", callback=group_name)
@STORE
@sink_target
@click.option(
    "--grace",
    default="PT1H",
    show_default=True,
    help="How long a staging area must have been left unchanged (an ISO 8601 duration: PT1H, P1D).",
)
@click.option("--execute", is_flag=True, help="Delete (without it: a dry run that prints what would go).")
@JSON
def gc(
    group: str,
    store_url: str | None,
    sink: str,
    quarantine: str | None,
    table_format: str,
    iceberg_catalog: str | None,
    iceberg_table: str | None,
    grace: str,
    execute: bool,
    as_json: bool,
) -> None:
    """Delete the staging areas killed batches left under GROUP's sink; dry run unless --execute.

    An area goes once its run is not a live member of the group, nothing in it changed for --grace and no
    committed range waits in it to be published (docs/sink.md). For a Delta or Iceberg sink, the data files no
    version of the table references go too (older than 24 hours, as `cohort audit` finds them), except a live
    run's. Runs while the group has members: schedule it.
    """
    import time

    from cohort.cli.audit import SinkTarget
    from cohort.cli.gc import gc_group, parse_grace

    grace_s = parse_grace(grace)
    target = SinkTarget(sink, quarantine, table_format, iceberg_catalog, iceberg_table)
    with open_coordinator(store_url) as coordinator:
        require_group(coordinator, group)
        gc_group(coordinator, group, target, now=time.time(), grace_s=grace_s, execute=execute, as_json=as_json)


@main.command()
@click.argument("group", callback=group_name)
@STORE
def delete(group: str, store_url: str | None) -> None:
    """Delete GROUP and its offset ledger; refused while members are live."""
    from cohort.assignment.errors import CoordinatorError, GroupIdNotFoundError

    with open_coordinator(store_url) as coordinator:
        try:
            coordinator.delete_group(group)
        except GroupIdNotFoundError:
            raise click.ClickException(f"group {group!r} does not exist") from None
        except CoordinatorError as exc:
            raise click.ClickException(f"cannot delete group {group!r}: {exc}") from None
    click.echo(f"group {group!r} deleted")


@main.command()
@click.option(
    "--group", "group", default=None, callback=group_name, help="Start from this live group's members and assignment."
)
@STORE
@click.option("--members", type=click.IntRange(1, 100_000), default=None, help="A synthetic group of N members.")
@click.option("--partitions", "partitions", multiple=True, help="TOPIC:COUNT for a synthetic group (repeatable).")
@click.option(
    "--assignor", default="sticky", show_default=True, help="range, roundrobin, sticky, cooperative-sticky, lag-sticky."
)
@click.option(
    "--backlog",
    "backlog_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help='JSON file of records left per partition, {"TOPIC:PARTITION": N}, for lag-sticky (and the backlog columns).',
)
@click.option("--leave", multiple=True, help="A member that leaves (id, instance id or member-N).")
@click.option("--join", "joins", type=click.IntRange(0, 10_000), default=0, help="How many members join.")
@JSON
def simulate(
    group: str | None,
    store_url: str | None,
    members: int | None,
    partitions: tuple[str, ...],
    assignor: str,
    backlog_file: str | None,
    leave: tuple[str, ...],
    joins: int,
    as_json: bool,
) -> None:
    """What-if: which partitions move if members leave or join, under the chosen assignor."""
    from cohort.cli.ops import live_group_state, simulate_change
    from cohort.cli.simulate import parse_counts, print_plan, read_backlog

    current = subscriptions = None
    backlog = read_backlog(backlog_file) if backlog_file else None
    try:
        if group is not None:
            with open_coordinator(store_url) as coordinator:
                require_group(coordinator, group)
                counts, names, current, subscriptions = live_group_state(coordinator, group)
        else:
            if not members or not partitions:
                raise click.UsageError("give --group, or --members N with --partitions TOPIC:COUNT")
            counts = parse_counts(partitions)
            names = [f"member-{i}" for i in range(1, members + 1)]
        added = [f"new-member-{i}" for i in range(1, joins + 1)]
        plan = simulate_change(
            counts,
            names,
            assignor=assignor,
            current=current,
            subscriptions=subscriptions,
            leave=leave,
            join=added,
            backlog=backlog,
        )
    except ValueError as exc:  # unknown assignor or member, bad counts
        raise click.ClickException(str(exc)) from exc
    print_plan(plan, as_json=as_json)
