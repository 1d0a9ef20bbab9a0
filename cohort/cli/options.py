"""The options several `cohort` commands share (the store's URL, --json, a group's sink, Kafka's client settings), and
the check of a group name given on the command line; click only, so that `cohort --help` loads nothing else."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from cohort.cli.command_config import CommandConfig

__all__ = ["COMMAND_CONFIG", "JSON", "STORE", "group_name", "sink_target"]

STORE = click.option(
    "--store-url",
    envvar="COHORT_STORE_URL",
    default=None,
    help="SQLAlchemy URL of the coordinator's store (env COHORT_STORE_URL; default: cohort/cohort.db in the "
    "user's data directory, printed when used).",
)
"""--store-url: the coordinator's store (`store_access.open_coordinator` opens it)."""

JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of a table.")
"""--json: print JSON for scripts instead of a table."""


def _command_config(ctx: click.Context, param: click.Parameter, value: str | None) -> CommandConfig | None:
    """The file's settings with the secrets of the environment, checked before the command opens anything."""
    from cohort.cli.command_config import CommandConfigError, load_command_config

    try:
        return load_command_config(value)
    except CommandConfigError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


COMMAND_CONFIG = click.option(
    "--command-config",
    "command_config",
    envvar="COHORT_COMMAND_CONFIG",
    default=None,
    metavar="FILE",
    callback=_command_config,
    help="Kafka client settings, as Kafka's tools take them: a properties file of librdkafka keys "
    "(security.protocol, sasl.mechanism, sasl.username, ssl.ca.location, ...; env COHORT_COMMAND_CONFIG). "
    "Secrets may come from env COHORT_KAFKA_SASL_PASSWORD and COHORT_KAFKA_SSL_KEY_PASSWORD instead.",
)
"""--command-config: the librdkafka settings (security, SASL, TLS) of the commands that talk to Kafka
(`cohort.cli.command_config`); the callback gives a `CommandConfig` or None."""


def sink_target(command: Callable[..., None]) -> Callable[..., None]:
    """The options that name a group's sink (`audit`, `gc`): its root, quarantine, format and Iceberg table."""
    options = [
        click.option("--sink", "sink", required=True, help="The group's sink root (PipelineSpec.sink_path)."),
        click.option("--quarantine", default=None, help="The quarantine root (default: <sink>/_quarantine)."),
        click.option(
            "--table-format",
            type=click.Choice(["auto", "parquet", "delta", "iceberg"]),
            default="auto",
            show_default=True,
            help="The sink's format (auto: a Delta log or Iceberg metadata under --sink, else Parquet range "
            "directories).",
        ),
        click.option(
            "--iceberg-catalog",
            envvar="COHORT_ICEBERG_CATALOG",
            default=None,
            help="The Iceberg SQL catalog's SQLAlchemy URL (env COHORT_ICEBERG_CATALOG; default "
            "<sink>/_catalog.sqlite).",
        ),
        click.option(
            "--iceberg-table", default=None, help="The Iceberg table identifier (default cohort.<sink's name>)."
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def group_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse an illegal group name before the command opens the store (so no file is created for it)."""
    from cohort.common.names import InvalidNameError, validate_group_name

    if value is None:
        return None
    try:
        return validate_group_name(value)
    except InvalidNameError as exc:
        raise click.ClickException(str(exc)) from None
