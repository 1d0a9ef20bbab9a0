"""The Schema Registry as the reading tasks and the driver see it: where it is, and the schemas it holds.

`RegistryConnection` is plain configuration (pickled into the reading tasks; the password is hidden from its
`repr`). `SchemaSource` wraps confluent-kafka's `SchemaRegistryClient` (its retries, its per-id cache) for one
task or one driver-side batch. Only the registry's own "not found" answers (HTTP 404 with error code 40401
subject, 40402 version or 40403 schema not found) are an answer: `None`, and a record whose writer schema id
the registry does not know goes to the quarantine. Anything else fails the batch before its commit, with one
line naming the registry URL and what it answered: refused credentials (RegistryError), and a registry that
could not serve the request (RegistryUnavailableError): unreachable or failing (5xx) after the client's
retries, or answering not as a registry does (a 404 without a registry error code: a wrong path in the URL, a
proxy's error page).
"""

from __future__ import annotations

import functools
import importlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "RegistryConnection",
    "RegistryError",
    "RegistrySchema",
    "RegistryUnavailableError",
    "SchemaSource",
    "check_registry_url",
    "is_not_found",
    "refusal",
]

_NOT_FOUND = (40401, 40402, 40403)
"""The registry's "not found" error codes: subject, version (of a subject that exists), schema (by id)."""
_INSTALL = "pip install 'cohort[registry]'"
_SNIPPET = 120
"""At most this many characters of an answer that is not the registry's (an HTML error page) in a message."""


class RegistryError(RuntimeError):
    """The registry refused a request that cannot succeed by retrying (credentials, a missing subject)."""


class RegistryUnavailableError(RegistryError):
    """The registry could not serve a request: unreachable or failing after the client's retries, or answering
    not as a Schema Registry does (a wrong path in its URL, a proxy's error page)."""


def check_registry_url(url: str) -> None:
    """ValueError unless `url` is http(s)://host[:port][/path]."""
    if not isinstance(url, str) or not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        raise ValueError(f"the Schema Registry URL must be http(s)://host[:port][/path], got {url!r}")


@dataclass(frozen=True)
class RegistryConnection:
    """Where the Schema Registry is and how to authenticate (HTTP basic auth; give the password from the
    environment, e.g. Dagster's `EnvVar`)."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout_s: float = 10.0
    max_retries: int = 3
    retry_wait_ms: int = 500

    def __post_init__(self) -> None:
        check_registry_url(self.url)
        if (self.username is None) != (self.password is None):
            raise ValueError("give both a Schema Registry username and password, or neither")
        if self.timeout_s <= 0 or self.max_retries < 0 or self.retry_wait_ms < 0:
            raise ValueError("Schema Registry timeout must be > 0, retries and their wait >= 0")

    def client_config(self) -> dict[str, Any]:
        """confluent-kafka's SchemaRegistryClient configuration (secrets included: never log it)."""
        config: dict[str, Any] = {
            "url": self.url,
            "timeout": self.timeout_s,
            "max.retries": self.max_retries,
            "retries.wait.ms": self.retry_wait_ms,
            "retries.max.wait.ms": max(self.retry_wait_ms * 4, 1),
        }
        if self.username is not None:
            config["basic.auth.user.info"] = f"{self.username}:{self.password}"
        return config


@dataclass(frozen=True)
class RegistrySchema:
    """One registered schema: its id, type (AVRO, PROTOBUF, JSON), text and references (subject, version)."""

    schema_id: int
    schema_type: str
    text: str
    references: tuple[tuple[str, str, int], ...] = ()
    """(name, subject, version) per reference, as the registry lists them."""


class SchemaSource:
    """Schemas by id or subject from one registry, cached for this object's life (one task, one batch).

    `shared=True` (the reading tasks) uses one client per connection in the process, so the tasks a Spark
    Python worker runs one after another share its connection pool and its cache of schemas by id (an id's
    schema never changes); the driver's look-ups of a subject's latest version use a client of their own,
    so each batch sees the registry's current latest version.
    """

    def __init__(self, connection: RegistryConnection, *, shared: bool = False) -> None:
        self.connection = connection
        self._shared = shared
        self._client: Any = None
        self._by_id: dict[int, RegistrySchema | None] = {}

    def _registry(self) -> Any:
        if self._client is None:
            self._client = _shared_client(self.connection) if self._shared else _new_client(self.connection)
        return self._client

    def by_id(self, schema_id: int, *, serialized: bool = False) -> RegistrySchema | None:
        """The schema registered under `schema_id`, None when the registry has no such id."""
        if schema_id not in self._by_id:
            fmt = "serialized" if serialized else None
            found = self._call(lambda client: client.get_schema(schema_id, fmt=fmt), f"schema id {schema_id}")
            self._by_id[schema_id] = None if found is None else _registered(schema_id, found)
        return self._by_id[schema_id]

    def latest(self, subject: str) -> RegistrySchema | None:
        """The latest version registered under `subject`, None when the subject does not exist."""
        found = self._call(lambda client: client.get_latest_version(subject), f"subject {subject!r}")
        return None if found is None else _registered(found.schema_id, found.schema)

    def version(self, subject: str, version: int) -> RegistrySchema:
        """One version of a subject (the references of Protobuf schemas name them)."""
        found = self._call(
            lambda client: client.get_version(subject, version, fmt="serialized"), f"{subject!r} v{version}"
        )
        if found is None:
            raise RegistryError(f"subject {subject!r} version {version} is not in the Schema Registry")
        return _registered(found.schema_id, found.schema)

    def referenced(self, schema: RegistrySchema) -> tuple[RegistrySchema, ...]:
        """The schemas `schema` references, theirs included, dependencies first (each once). RegistryError
        when a referenced version is missing, RegistryUnavailableError when the registry cannot be reached."""
        found: dict[tuple[str, int], RegistrySchema] = {}

        def visit(node: RegistrySchema, path: tuple[tuple[str, int], ...]) -> None:
            for _name, subject, version in node.references:
                key = (subject, version)
                if key in path:
                    raise RegistryError(f"schema references form a cycle through {subject!r} v{version}")
                if key not in found:
                    child = self.version(subject, version)
                    visit(child, (*path, key))
                    found[key] = child

        visit(schema, ())
        return tuple(found.values())

    def _call(self, request: Callable[[Any], Any], what: str) -> Any:
        """`request(client)`; None for the registry's own "not found", RegistryError for refused credentials,
        RegistryUnavailableError for any other failure (see the module doc)."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        client = self._registry()
        try:
            return request(client)
        except SchemaRegistryError as exc:
            if is_not_found(exc.http_status_code, exc.error_code):
                return None
            raise refusal(self.connection, what, exc.http_status_code, exc.error_code, exc.error_message) from None
        except _transport_errors() as exc:
            raise RegistryUnavailableError(
                f"the Schema Registry at {self.connection.url} is unreachable reading {what} after "
                f"{self.connection.max_retries} retries: {type(exc).__name__}: {one_line(str(exc))}"
            ) from None
        except (json.JSONDecodeError, KeyError) as exc:  # a 2xx answer that is not the registry's JSON
            raise RegistryUnavailableError(
                f"the Schema Registry at {self.connection.url} answered reading {what} with something that is not "
                f"a Schema Registry's answer ({type(exc).__name__}: {one_line(str(exc))}): check the registry URL"
            ) from None


def is_not_found(status: int | None, error_code: int | None) -> bool:
    """Whether an error answer is the registry's own "not found" (HTTP 404 and 40401, 40402 or 40403): a
    404 without one of those codes comes from a path the registry does not serve (a wrong URL, a proxy)."""
    return status == 404 and error_code in _NOT_FOUND


def one_line(text: str, limit: int = _SNIPPET) -> str:
    """`text` on one line (whitespace runs made one space), cut to `limit` characters."""
    flat = " ".join(str(text).replace("\\r", " ").replace("\\n", " ").split())  # a body's repr escapes them
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def refusal(
    connection: RegistryConnection, what: str, status: int | None, error_code: int | None, message: str | None
) -> RegistryError:
    """The error for a registry answer that is neither a schema nor the registry's "not found", in one line
    naming the registry URL, the HTTP status and what the registry (or whatever answered) said."""
    where = f"the Schema Registry at {connection.url}"
    text = str(message or "")
    if error_code in (None, -1):  # not the registry's JSON error body: an HTML page, a proxy's answer
        said = "an answer that is not the registry's: " + one_line(
            text.removeprefix("Unknown Schema Registry Error: ").removeprefix("b'").removesuffix("'") or "(empty)"
        )
    else:
        said = f"error code {error_code}: {one_line(text)}"
    if status in (401, 403):
        return RegistryError(f"{where} refused the credentials (HTTP {status}) when reading {what}")
    if status == 404:
        return RegistryUnavailableError(
            f"{where} answered HTTP 404 reading {what} without the registry's 'not found' error code ({said}): "
            "the URL's path is not the registry's; check the registry URL"
        )
    if status is not None and status >= 500:
        return RegistryUnavailableError(
            f"{where} failed reading {what}: HTTP {status} after {connection.max_retries} retries ({said})"
        )
    return RegistryUnavailableError(f"{where} refused reading {what}: HTTP {status} ({said})")


def _new_client(connection: RegistryConnection) -> Any:
    """A confluent-kafka SchemaRegistryClient (building one costs ~20 ms: its TLS context loads the CA bundle)."""
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient
    except ImportError as exc:  # the registry extra is not installed where this task runs
        raise RegistryError(f"the Schema Registry client is missing ({exc}): {_INSTALL}") from None
    return SchemaRegistryClient(connection.client_config())


@functools.lru_cache(maxsize=8)
def _shared_client(connection: RegistryConnection) -> Any:
    """One client per connection per process, for schemas by id (immutable, so caching them is always right)."""
    return _new_client(connection)


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Network-level failures of the registry client: its HTTP library's TransportError (httpx2, or httpx
    where that is what the client uses) and socket errors."""
    for name in ("httpx2", "httpx"):
        try:
            return (importlib.import_module(name).TransportError, OSError)
        except ImportError:
            continue
    return (OSError,)


def _registered(schema_id: int, schema: Any) -> RegistrySchema:
    references = tuple((r.name, r.subject, int(r.version)) for r in (schema.references or ()))
    return RegistrySchema(int(schema_id), str(schema.schema_type or "AVRO").upper(), schema.schema_str, references)
