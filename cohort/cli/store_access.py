"""The coordinator a `cohort` command works with: on an existing store only (no command creates one), the default
store named on stderr when used, and the store's and the group's problems as one short error."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from cohort.assignment.coordinator import Coordinator

__all__ = ["open_coordinator", "require_group", "store_url"]


def store_url(given: str | None) -> str:
    """The store to open: --store-url or COHORT_STORE_URL, else the default, which is named on stderr (the
    JSON on stdout stays parseable)."""
    if given:
        return given
    from cohort.assignment.worker_group import DEFAULT_STORE_URL

    click.echo(f"store: {DEFAULT_STORE_URL} (the default; give --store-url or set COHORT_STORE_URL)", err=True)
    return DEFAULT_STORE_URL


@contextmanager
def open_coordinator(given_url: str | None) -> Iterator[Coordinator]:
    """A coordinator on an existing store, closed after use. No command creates a store: one that does not
    exist, cannot be reached or cannot be used is a short error, as is a database error while it runs."""
    import sqlalchemy as sa

    from cohort.assignment.coordinator import Coordinator
    from cohort.assignment.errors import StoreError
    from cohort.assignment.store.sql import SqlGroupStore

    try:
        coordinator = Coordinator(SqlGroupStore.from_url(store_url(given_url), create=False))
    except StoreError as exc:
        raise click.ClickException(exc.message) from None
    try:
        yield coordinator
    except sa.exc.SQLAlchemyError as exc:
        cause = getattr(exc, "orig", None) or exc
        raise click.ClickException(f"the store failed: {' '.join(str(cause).split())}") from None
    finally:
        coordinator.close()


def require_group(coordinator: Coordinator, group: str) -> None:
    """Refuse a group the store does not hold."""
    if coordinator.store.load(group) is None:
        raise click.ClickException(f"group {group!r} does not exist")
