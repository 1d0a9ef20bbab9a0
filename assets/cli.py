"""The `cohort` command line: run the embedded broker, the demo, and operate groups."""

from __future__ import annotations

import signal
import threading

import click

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cohort")
def main() -> None:
    """Cohort: Kafka consumer-group semantics for Dagster + PySpark batch pipelines."""


@main.command()
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port on 127.0.0.1 (default: a free one).")
def broker(port: int | None) -> None:
    """Run the embedded Tansu broker in the foreground until Ctrl-C."""
    from resources.embedded_broker import BrokerError, EmbeddedBroker

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


@main.command()
def demo() -> None:
    """Run the end-to-end demo on embedded defaults (same as `make demo`)."""
    from assets.demo import main as demo_main

    raise SystemExit(demo_main())
