"""Opening the SQL store's engine: URLs shown without credentials, database errors mapped to the store's typed
errors, the schema created or required (cohort.assignment.store.sql)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cohort.assignment.errors import (
    InvalidStoreUrlError,
    StoreNotFoundError,
    StoreTransactionError,
    StoreUnavailableError,
)
from cohort.assignment.store.schema import (
    create_store_engine,
)

__all__ = ["as_store_error", "error_cause", "open_engine", "shown_url"]


def shown_url(url: str | sa.URL) -> str:
    """`url` as messages show it: its password hidden."""
    try:
        parsed = sa.make_url(url)
        return str(url) if isinstance(url, str) and parsed.password is None else parsed.render_as_string()
    except (sa.exc.ArgumentError, ValueError):  # not a URL: hide what looks like a password all the same
        return re.sub(r"(://[^/:@]*:)[^@/]*@", r"\1***@", str(url))


@contextmanager
def as_store_error(
    engine: Engine, what: str, passing: type[BaseException] | tuple[type[BaseException], ...] = ()
) -> Iterator[None]:
    """Turn a database error inside the block (other than `passing`) into a one-line `StoreError`: a lost or
    refused connection `StoreUnavailableError`, any other `StoreTransactionError`."""
    try:
        yield
    except passing:
        raise
    except sa.exc.OperationalError as exc:
        raise StoreUnavailableError(f"the store {shown_url(engine.url)} failed {what}: {error_cause(exc)}") from exc
    except sa.exc.DBAPIError as exc:
        raise StoreTransactionError(f"the store {shown_url(engine.url)} failed {what}: {error_cause(exc)}") from exc


def error_cause(exc: sa.exc.DBAPIError) -> str:
    """The database's own message, on one line."""
    text = " ".join(str(exc.orig if exc.orig is not None else exc).split())
    return text if len(text) <= 300 else f"{text[:297]}..."


def open_engine(url: str | sa.URL, create: bool, engine_kwargs: dict[str, Any]) -> Engine:
    """The engine on `url`, with the URL's problems as `InvalidStoreUrlError` (parsing, dialect, driver)
    and, without `create`, a SQLite file that does not exist as `StoreNotFoundError` (before anything is
    created)."""
    shown = shown_url(url)
    try:
        parsed = sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        raise InvalidStoreUrlError(
            f"the store URL {shown!r} is not a SQLAlchemy URL; give one such as sqlite:////var/lib/cohort/cohort.db "
            "or postgresql+psycopg://user@host:5432/cohort"
        ) from None
    database = parsed.database or ""
    sqlite_file = database not in ("", ":memory:") and not database.startswith("file:")
    on_disk = parsed.get_backend_name() == "sqlite" and sqlite_file
    if not create and on_disk and not Path(database).is_file():
        raise StoreNotFoundError(f"the store {shown} does not exist: there is no file {Path(database).absolute()}")
    try:
        return create_store_engine(parsed, **engine_kwargs)
    except sa.exc.NoSuchModuleError:
        raise InvalidStoreUrlError(
            f"the store URL {shown} names a database SQLAlchemy does not know ({parsed.drivername!r}); "
            "the store runs on sqlite:/// and postgresql+psycopg://"
        ) from None
    except ImportError as exc:
        raise InvalidStoreUrlError(
            f"the store URL {shown} needs a database driver that is not installed ({exc}); install it, or name "
            "an installed one (postgresql+psycopg:// uses psycopg 3, which Cohort installs)"
        ) from None
    except (sa.exc.ArgumentError, ValueError, TypeError) as exc:
        raise InvalidStoreUrlError(f"the store URL {shown} cannot be used: {exc}") from None
    except OSError as exc:  # the SQLite file's directory cannot be created
        raise StoreUnavailableError(f"cannot open the store {shown}: {exc}") from None
