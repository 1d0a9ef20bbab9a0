"""The `cohort` command line: operate groups (groups, describe, delete, simulate) and run the embedded broker."""

from __future__ import annotations

import json
import signal
import threading
from typing import Any

import click

from cohort.cli.tables import print_describe, print_table

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cohort")
def main() -> None:
    """Cohort: Kafka consumer-group semantics for Dagster + PySpark batch pipelines."""


@main.command()
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port on 127.0.0.1 (default: a free one).")
def broker(port: int | None) -> None:
    """Run the embedded Tansu broker in the foreground until Ctrl-C."""
    from cohort.devtools.embedded_broker import BrokerError, EmbeddedBroker

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


# ------------------------------------------------------------------------------------- operations

_STORE = click.option(
    "--store-url",
    envvar="COHORT_STORE_URL",
    default=None,
    help="SQLAlchemy URL of the coordinator's store (env COHORT_STORE_URL; default sqlite:///.cohort/cohort.db).",
)
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of a table.")


def _group_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse an illegal group name before the command opens the store (so no file is created for it)."""
    from cohort.common.names import InvalidNameError, validate_group_name

    if value is None:
        return None
    try:
        return validate_group_name(value)
    except InvalidNameError as exc:
        raise click.ClickException(str(exc)) from None


def _coordinator(store_url: str | None) -> Any:
    from cohort.assignment.coordinator import Coordinator
    from cohort.resources.group import DEFAULT_STORE_URL

    return Coordinator.from_url(store_url or DEFAULT_STORE_URL)


@main.command()
@_STORE
@_JSON
def groups(store_url: str | None, as_json: bool) -> None:
    """List groups: state, members, generation, assignor."""
    from cohort.cli.ops import group_rows

    coordinator = _coordinator(store_url)
    try:
        rows = group_rows(coordinator)
    finally:
        coordinator.close()
    if as_json:
        click.echo(json.dumps(rows))
        return
    columns = ["GROUP", "STATE", "MEMBERS", "GENERATION", "ASSIGNOR"]
    print_table("Cohort groups", columns, [[r[k.lower()] for k in columns] for r in rows])


@main.command()
@click.argument("group", callback=_group_name)
@_STORE
@click.option(
    "--bootstrap-servers",
    envvar="COHORT_BOOTSTRAP_SERVERS",
    default=None,
    help="Kafka bootstrap servers for log-end offsets and lag (env COHORT_BOOTSTRAP_SERVERS).",
)
@_JSON
def describe(group: str, store_url: str | None, bootstrap_servers: str | None, as_json: bool) -> None:
    """Describe GROUP per partition, like `kafka-consumer-groups --describe`."""
    from cohort.cli.ops import describe_rows
    from cohort.common.names import InvalidNameError

    coordinator = _coordinator(store_url)
    try:
        ends = None
        if bootstrap_servers:
            from cohort.resources.kafka import KafkaResource

            ends = KafkaResource(bootstrap_servers=bootstrap_servers).end_offsets
        described = coordinator.describe_group(group)
        rows = describe_rows(coordinator, group, ends)
    except InvalidNameError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        coordinator.close()
    if as_json:
        payload = {
            "group": group,
            "state": described.state.value,
            "generation": described.generation,
            "assignor": described.assignor,
            "partitions": [r.as_dict() for r in rows],
        }
        click.echo(json.dumps(payload))
        return
    print_describe(described, rows)


@main.command()
@click.argument("group", callback=_group_name)
@_STORE
def delete(group: str, store_url: str | None) -> None:
    """Delete GROUP and its offset ledger; refused while members are live."""
    from cohort.assignment.errors import CoordinatorError
    from cohort.common.names import InvalidNameError

    coordinator = _coordinator(store_url)
    try:
        coordinator.delete_group(group)
    except (CoordinatorError, InvalidNameError) as exc:
        raise click.ClickException(f"cannot delete group {group!r}: {exc}") from exc
    finally:
        coordinator.close()
    click.echo(f"group {group!r} deleted")


@main.command()
@click.option(
    "--group", "group", default=None, callback=_group_name, help="Start from this live group's members and assignment."
)
@_STORE
@click.option("--members", type=click.IntRange(1, 100_000), default=None, help="A synthetic group of N members.")
@click.option("--partitions", "partitions", multiple=True, help="TOPIC:COUNT for a synthetic group (repeatable).")
@click.option("--assignor", default="sticky", show_default=True, help="range, roundrobin, sticky, cooperative-sticky.")
@click.option("--leave", multiple=True, help="A member that leaves (id, instance id or member-N).")
@click.option("--join", "joins", type=click.IntRange(0, 10_000), default=0, help="How many members join.")
@_JSON
def simulate(
    group: str | None,
    store_url: str | None,
    members: int | None,
    partitions: tuple[str, ...],
    assignor: str,
    leave: tuple[str, ...],
    joins: int,
    as_json: bool,
) -> None:
    """What-if: which partitions move if members leave or join, under the chosen assignor."""
    from cohort.cli.ops import live_group_state, simulate_change

    current = subscriptions = None
    try:
        if group is not None:
            coordinator = _coordinator(store_url)
            try:
                counts, names, current, subscriptions = live_group_state(coordinator, group)
            finally:
                coordinator.close()
        else:
            if not members or not partitions:
                raise click.UsageError("give --group, or --members N with --partitions TOPIC:COUNT")
            counts = _parse_counts(partitions)
            names = [f"member-{i}" for i in range(1, members + 1)]
        added = [f"new-member-{i}" for i in range(1, joins + 1)]
        plan = simulate_change(
            counts, names, assignor=assignor, current=current, subscriptions=subscriptions, leave=leave, join=added
        )
    except ValueError as exc:  # unknown assignor or member, bad counts
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(
            json.dumps(
                {
                    "assignor": plan.assignor,
                    "rounds": plan.rounds,
                    "moved": [{"topic": t, "partition": p, "from": a, "to": b} for t, p, a, b in plan.moved],
                    "after": {m: [str(tp) for tp in tps] for m, tps in plan.after.items()},
                }
            )
        )
        return
    every = sorted(set(plan.before) | set(plan.after))
    rows = [[m, len(plan.before.get(m, ())), len(plan.after.get(m, ()))] for m in every]
    print_table(f"Assignor {plan.assignor}: {len(plan.moved)} partition(s) move", ["MEMBER", "BEFORE", "AFTER"], rows)
    print_table("Moves", ["TOPIC", "PARTITION", "FROM", "TO"], [list(m) for m in plan.moved])


def _parse_counts(items: tuple[str, ...]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        topic, _, count = item.rpartition(":")
        if not topic or not count.isdigit() or int(count) < 1:
            raise click.BadParameter(f"expected TOPIC:COUNT with COUNT >= 1, got {item!r}", param_hint="--partitions")
        counts[topic] = int(count)
    return counts
