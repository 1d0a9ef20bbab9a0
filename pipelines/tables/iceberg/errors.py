"""The Iceberg store's errors as one short line: pyiceberg's first line, its drawn schema mismatch cut to the
mismatching fields, and the catalog's database errors without the catalog URL (it may hold a password)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

__all__ = ["catalog_errors", "first_line", "schema_mismatch"]


def first_line(error: object) -> str:
    """The first line of an error's message (its type's name when it has none)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def schema_mismatch(error: ValueError) -> str:
    """pyiceberg's schema mismatch (a drawn table of every field) cut to the mismatching fields."""
    rows = [line for line in str(error).splitlines() if "\u274c" in line]
    if not rows:
        return first_line(error)
    cells = [[c.strip() for c in row.replace("\u274c", "").split("\u2502") if c.strip()] for row in rows]
    return "; ".join(" in the table, ".join(c) + " in the file" for c in cells)


@contextmanager
def catalog_errors(table: str, catalog_url: str) -> Iterator[None]:
    """Database errors as one short line naming the `table`, never the catalog URL (it may hold a password)."""
    try:
        yield
    except SQLAlchemyError as error:
        reason = first_line(getattr(error, "orig", None) or error)
        for secret in (catalog_url, _password(catalog_url)):
            if secret:
                reason = reason.replace(secret, "***")
        raise RuntimeError(f"{table}: the Iceberg catalog failed: {reason}") from None


def _password(url: str) -> str | None:
    """The password in a SQLAlchemy URL, None when it has none or is not one."""
    try:
        return make_url(url).password
    except ArgumentError:
        return None
