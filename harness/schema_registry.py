"""A small Confluent-Schema-Registry-compatible HTTP server for tests, on a loopback port.

Records are decoded in Spark's Python worker processes, which confluent-kafka's in-process MockSchemaRegistryClient
cannot reach, so the tests need a registry served over real HTTP; no JVM registry is available here.

It implements the REST subset that confluent-kafka's SchemaRegistryClient and its Avro, Protobuf and JSON Schema
serializers and deserializers use (see `SchemaRegistryServer`). Known deviations from the real registry:

- schemas are stored and returned exactly as registered: no Avro/Protobuf canonicalisation, and `format=serialized`
  returns the stored string unchanged (confluent-kafka's Python Protobuf serializer already registers the base64
  serialized FileDescriptorProto, which the real registry would return as `.proto` text without the parameter);
- register Protobuf schemas as the base64 FileDescriptorProto (as the Python serializer does): `.proto` text given to
  register() is stored as text and would not be converted for a deserializer asking for `format=serialized`;
- identical schemas are recognised by schema type, references and, for AVRO and JSON, the compact JSON form of the
  schema text (whitespace-insensitive, key order kept); Protobuf text must match exactly;
- no compatibility checks (every new version is accepted), no deletes, no contexts, no guids, no metadata or rule
  sets (they are ignored), and the `deleted`, `normalize` and `subject` query parameters are ignored.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["RegistryError", "SchemaRegistryServer", "StoredReference", "StoredSchema", "SubjectVersion"]

SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_DEFAULT_COMPATIBILITY = "BACKWARD"

JsonValue = Any
Query = dict[str, list[str]]


class _RawText(str):
    """A response body sent as is rather than JSON-encoded (a non-JSON schema from `.../versions/{v}/schema`)."""


class RegistryError(Exception):
    """A failure the registry reports as `{"error_code": ..., "message": ...}` with an HTTP status."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(f"{status} {error_code}: {message}")
        self.status = status
        self.error_code = error_code
        self.message = message

    def body(self) -> dict[str, Any]:
        """The JSON body the real registry sends for this error."""
        return {"error_code": self.error_code, "message": self.message}


def _subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def _version_not_found(version: str) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def _schema_not_found(detail: str = "Schema not found") -> RegistryError:
    return RegistryError(404, 40403, detail)


@dataclass(frozen=True)
class StoredReference:
    """One entry of a schema's `references`: the import `name` resolved to `subject` at `version`."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        """The reference as the REST API spells it."""
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class StoredSchema:
    """A schema under its global id; one id may appear under many subjects."""

    schema_id: int
    schema_type: str
    schema: str
    references: tuple[StoredReference, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The schema fields of a response: `schemaType` is omitted for AVRO and `references` when empty, as the
        real registry does (the client defaults both)."""
        body: dict[str, Any] = {"schema": self.schema}
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = [ref.to_json() for ref in self.references]
        return body


@dataclass(frozen=True)
class SubjectVersion:
    """One version of a subject, pointing at a stored schema id."""

    subject: str
    version: int
    schema_id: int


@dataclass
class _State:
    """Everything the registry knows; survives stop()/start() and is guarded by the server's lock."""

    schemas: dict[int, StoredSchema] = field(default_factory=dict)
    ids_by_identity: dict[tuple[str, str, tuple[StoredReference, ...]], int] = field(default_factory=dict)
    subjects: dict[str, list[SubjectVersion]] = field(default_factory=dict)
    compatibility: str = _DEFAULT_COMPATIBILITY
    subject_compatibility: dict[str, str] = field(default_factory=dict)
    request_paths: list[str] = field(default_factory=list)


def _identity_text(schema_type: str, schema: str) -> str:
    """The text two registrations must share to be the same schema (compact JSON for AVRO and JSON)."""
    if schema_type in ("AVRO", "JSON"):
        try:
            return json.dumps(json.loads(schema), separators=(",", ":"), ensure_ascii=False)
        except ValueError as error:
            raise RegistryError(422, 42201, f"Invalid schema: {error}") from error
    return schema


def _parse_references(raw: object) -> tuple[StoredReference, ...]:
    """Validate the `references` of a request body (a list of {name, subject, version})."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise RegistryError(422, 42201, "Invalid schema: references must be a list")
    parsed = []
    for item in raw:
        if not isinstance(item, dict):
            raise RegistryError(422, 42201, "Invalid schema: a reference must be an object")
        name, subject, version = item.get("name"), item.get("subject"), item.get("version")
        if not isinstance(name, str) or not isinstance(subject, str) or not isinstance(version, int):
            raise RegistryError(422, 42201, f"Invalid schema: malformed reference {item!r}")
        parsed.append(StoredReference(name, subject, version))
    return tuple(parsed)


def _parse_version(text: str) -> int | None:
    """A version path segment: a positive number, or None for `latest` / `-1`."""
    if text in ("latest", "-1"):
        return None
    try:
        version = int(text)
    except ValueError:
        version = 0
    if version < 1:
        raise RegistryError(
            422, 42202, "The specified version is not a valid version id. Allowed values are between [1, 2^31-1]"
        )
    return version


def _page(items: list[Any], query: Query) -> list[Any]:
    """Apply the `offset` and `limit` query parameters (a negative limit means all)."""
    try:
        offset = max(int(query.get("offset", ["0"])[0]), 0)
        limit = int(query.get("limit", ["-1"])[0])
    except ValueError as error:
        raise RegistryError(400, 400, f"Invalid offset or limit: {error}") from error
    items = items[offset:]
    return items if limit < 0 else items[:limit]


def _route_key(segments: list[str]) -> str:
    """The route pattern of a path: subject, version and id segments become `*`."""
    if segments[:1] in (["subjects"], ["config"]):
        return "/".join(s if i in (0, 2, 4) else "*" for i, s in enumerate(segments))
    if segments[:2] == ["schemas", "ids"]:
        return "/".join(s if i != 2 else "*" for i, s in enumerate(segments))
    return "/".join(segments)


class _RegistryHTTPServer(ThreadingHTTPServer):
    """The listening socket; handler threads find the registry through `registry`."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], registry: SchemaRegistryServer) -> None:
        self.registry = registry
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet when a client hangs up mid-response; report anything else as usual."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """One request: check auth, route to the registry, answer JSON. HTTP/1.0, so every connection closes after
    its response and stop() leaves no kept-alive connection serving an outage."""

    server_version = "cohort-test-schema-registry/1"

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: no request log on stderr."""

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        registry = cast(_RegistryHTTPServer, self.server).registry
        parts = urlsplit(self.path)
        registry._count(parts.path)
        try:
            body = self._read_body()
            if not registry._authorized(self.headers.get("Authorization")):
                raise RegistryError(401, 401, "Unauthorized")
            # Split before unquoting: subjects such as google%2Fprotobuf%2Ftimestamp.proto hold encoded slashes.
            segments = [unquote(segment) for segment in parts.path.strip("/").split("/") if segment]
            status, payload = registry._route(method, segments, parse_qs(parts.query), body)
        except RegistryError as error:
            status, payload = error.status, error.body()
        except Exception as error:  # a bug in this server: answer 500 rather than drop the connection
            status, payload = 500, {"error_code": 50001, "message": f"Internal error: {error!r}"}
        self._send(status, payload)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, status: int, payload: JsonValue) -> None:
        data = (payload if isinstance(payload, _RawText) else json.dumps(payload)).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", _CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        if status == HTTPStatus.UNAUTHORIZED:
            self.send_header("WWW-Authenticate", 'Basic realm="SchemaRegistry"')
        self.end_headers()
        self.wfile.write(data)


Route = Callable[[list[str], Query, Any], JsonValue]


class SchemaRegistryServer:
    """A registry on 127.0.0.1 (ThreadingHTTPServer in a daemon thread).

    REST endpoints: GET / ; GET /schemas/types ; GET /schemas/ids/{id}[/subjects|/versions] ; GET /subjects ;
    POST /subjects/{subject} (lookup) ; GET|POST /subjects/{subject}/versions ;
    GET /subjects/{subject}/versions/{version}[/schema|/referencedby] ; GET|PUT /config[/{subject}].
    """

    def __init__(self, *, port: int = 0, username: str | None = None, password: str | None = None) -> None:
        if (username is None) != (password is None):
            raise ValueError("give both username and password, or neither")
        self._port = port
        self._username = username
        self._password = password
        self._lock = threading.Lock()
        self._state = _State()
        self._server: _RegistryHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL; the port is fixed by the first start() when none was given."""
        if self._port == 0:
            raise RuntimeError("the registry has no port yet: start() it first (or pass port=...)")
        return f"http://127.0.0.1:{self._port}"

    @property
    def running(self) -> bool:
        """Whether the socket is open."""
        return self._server is not None

    def start(self) -> SchemaRegistryServer:
        """Bind (again) to the same port and serve in a daemon thread; a no-op when already running."""
        if self._server is not None:
            return self
        server = _RegistryHTTPServer(("127.0.0.1", self._port), self)
        self._port = int(server.server_address[1])
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"schema-registry-{self._port}"
        )
        thread.daemon = True
        thread.start()
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        """Close the socket (clients then get connection refused, like an outage); the state is kept."""
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> SchemaRegistryServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- public helpers -------------------------------------------------------------------------------------------

    def client_config(self) -> dict[str, str]:
        """Configuration for confluent-kafka's SchemaRegistryClient, with credentials when auth is on."""
        config = {"url": self.url}
        if self._username is not None:
            config["basic.auth.user.info"] = f"{self._username}:{self._password}"
        return config

    def request_count(self, path_prefix: str = "") -> int:
        """How many requests (authorized or not) hit a path starting with `path_prefix` (raw path, no query)."""
        with self._lock:
            return sum(1 for path in self._state.request_paths if path.startswith(path_prefix))

    def register(
        self, subject: str, schema: str, schema_type: str = "AVRO", references: list[dict[str, Any]] | None = None
    ) -> int:
        """Register `schema` under `subject` without HTTP, exactly as POST /subjects/{subject}/versions would;
        returns the schema id (raises RegistryError on an invalid schema or reference)."""
        return self._register(subject, schema, schema_type.upper(), _parse_references(references)).schema_id

    # -- request plumbing (called from handler threads) ------------------------------------------------------------

    def _count(self, path: str) -> None:
        with self._lock:
            self._state.request_paths.append(path)

    def _authorized(self, header: str | None) -> bool:
        if self._username is None or self._password is None:
            return True
        credentials = _decode_basic(header) if header else None
        if credentials is None:
            return False
        user_ok = hmac.compare_digest(credentials[0].encode(), self._username.encode())
        password_ok = hmac.compare_digest(credentials[1].encode(), self._password.encode())
        return user_ok and password_ok

    def _route(self, method: str, segments: list[str], query: Query, raw_body: bytes) -> tuple[int, JsonValue]:
        """Dispatch one request; returns (status, JSON payload) or raises RegistryError."""
        body: Any = None
        if method in ("POST", "PUT"):
            try:
                body = json.loads(raw_body or b"null")
            except ValueError as error:
                raise RegistryError(400, 400, f"Unparseable request body: {error}") from error
        route = self._find_route(method, segments)
        return 200, route(segments, query, body)

    def _find_route(self, method: str, segments: list[str]) -> Route:
        routes: dict[str, dict[str, Route]] = {
            "": {"GET": lambda *_: {}},
            "schemas/types": {"GET": lambda *_: list(SCHEMA_TYPES)},
            "schemas/ids/*": {"GET": self._get_schema_by_id},
            "schemas/ids/*/subjects": {"GET": self._get_subjects_by_id},
            "schemas/ids/*/versions": {"GET": self._get_versions_by_id},
            "subjects": {"GET": self._get_subjects},
            "subjects/*": {"POST": self._lookup},
            "subjects/*/versions": {"GET": self._get_versions, "POST": self._post_version},
            "subjects/*/versions/*": {"GET": self._get_version},
            "subjects/*/versions/*/schema": {"GET": self._get_version_schema},
            "subjects/*/versions/*/referencedby": {"GET": self._get_referenced_by},
            "config": {"GET": self._get_config, "PUT": self._put_config},
            "config/*": {"GET": self._get_config, "PUT": self._put_config},
        }
        methods = routes.get(_route_key(segments))
        if methods is None:
            raise RegistryError(404, 404, "HTTP 404 Not Found")
        route = methods.get(method)
        if route is None:
            raise RegistryError(405, 405, "HTTP 405 Method Not Allowed")
        return route

    # -- the registry itself --------------------------------------------------------------------------------------

    def _register(
        self, subject: str, schema: str, schema_type: str, references: tuple[StoredReference, ...]
    ) -> SubjectVersion:
        """Add `schema` to `subject` (same id for the same schema everywhere; no new version if already there)."""
        if schema_type not in SCHEMA_TYPES:
            raise RegistryError(422, 42201, f"Invalid schema: unknown schema type {schema_type}")
        if not schema:
            raise RegistryError(422, 42201, "Empty schema")
        identity = (schema_type, _identity_text(schema_type, schema), references)
        with self._lock:
            for ref in references:
                versions = self._state.subjects.get(ref.subject, [])
                if not 1 <= ref.version <= len(versions):
                    raise RegistryError(
                        422, 42201, f"Invalid schema: reference {ref.name} -> {ref.subject} v{ref.version} not found"
                    )
            schema_id = self._state.ids_by_identity.get(identity)
            if schema_id is None:
                schema_id = len(self._state.schemas) + 1
                self._state.schemas[schema_id] = StoredSchema(schema_id, schema_type, schema, references)
                self._state.ids_by_identity[identity] = schema_id
            versions = self._state.subjects.setdefault(subject, [])
            for existing in versions:
                if existing.schema_id == schema_id:
                    return existing
            entry = SubjectVersion(subject, len(versions) + 1, schema_id)
            versions.append(entry)
            return entry

    def _subject_versions(self, subject: str) -> list[SubjectVersion]:
        versions = self._state.subjects.get(subject)
        if not versions:
            raise _subject_not_found(subject)
        return versions

    def _version_entry(self, subject: str, version_text: str) -> SubjectVersion:
        version = _parse_version(version_text)
        versions = self._subject_versions(subject)
        if version is None:
            return versions[-1]
        if version > len(versions):
            raise _version_not_found(version_text)
        return versions[version - 1]

    def _version_json(self, entry: SubjectVersion) -> dict[str, Any]:
        return {
            "subject": entry.subject,
            "version": entry.version,
            "id": entry.schema_id,
            **self._state.schemas[entry.schema_id].to_json(),
        }

    def _stored(self, id_text: str) -> StoredSchema:
        try:
            stored = self._state.schemas.get(int(id_text))
        except ValueError:
            stored = None
        if stored is None:
            raise _schema_not_found()
        return stored

    @staticmethod
    def _schema_request(body: Any) -> tuple[str, str, tuple[StoredReference, ...]]:
        if not isinstance(body, dict):
            raise RegistryError(422, 42201, "Invalid schema: the request body must be a JSON object")
        schema = body.get("schema")
        if not isinstance(schema, str):
            raise RegistryError(422, 42201, "Empty schema")
        schema_type = body.get("schemaType") or "AVRO"
        if not isinstance(schema_type, str):
            raise RegistryError(422, 42201, "Invalid schema: schemaType must be a string")
        return schema, schema_type.upper(), _parse_references(body.get("references"))

    def _get_schema_by_id(self, segments: list[str], query: Query, body: Any) -> JsonValue:
        with self._lock:
            return self._stored(segments[2]).to_json()

    def _get_subjects_by_id(self, segments: list[str], query: Query, body: Any) -> JsonValue:
        with self._lock:
            stored = self._stored(segments[2])
            return _page(
                sorted(
                    subject
                    for subject, versions in self._state.subjects.items()
                    if any(v.schema_id == stored.schema_id for v in versions)
                ),
                query,
            )

    def _get_versions_by_id(self, segments: list[str], query: Query, body: Any) -> JsonValue:
        with self._lock:
            stored = self._stored(segments[2])
            pairs = [
                {"subject": v.subject, "version": v.version}
                for subject in sorted(self._state.subjects)
                for v in self._state.subjects[subject]
                if v.schema_id == stored.schema_id
            ]
            return _page(pairs, query)

    def _get_subjects(self, segments: list[str], query: Query, body: Any) -> JsonValue:
        prefix = query.get("subjectPrefix", [""])[0]
        with self._lock:
            return _page(sorted(s for s in self._state.subjects if s.startswith(prefix)), query)

    def _lookup(self, segments: list[str], query: Query, body: Any) -> JsonValue:
        subject = segments[1]
        schema, schema_type, references = self._schema_request(body)
        identity = (schema_type, _identity_text(schema_type, schema), references)
        with self._lock:
            versions = self._subject_versions(subject)
            schema_id = self._state.ids_by_identity.get(identity)
            for entry in versions:
                if entry.schema_id == schema_id:
                    return self._version_json(entry)
        raise _schema_not_found()

    def _get_versions(self, segments: list[str], query: Query, body: Any) -> JsonValue:
        with self._lock:
            return _page([v.version for v in self._subject_versions(segments[1])], query)

    def _post_version(self, segments: list[str], query: Query, body: Any) -> JsonValue:
        schema, schema_type, references = self._schema_request(body)
        entry = self._register(segments[1], schema, schema_type, references)
        with self._lock:
            return self._version_json(entry)

    def _get_version(self, segments: list[str], query: Query, body: Any) -> JsonValue:
        with self._lock:
            return self._version_json(self._version_entry(segments[1], segments[3]))

    def _get_version_schema(self, segments: list[str], query: Query, body: Any) -> JsonValue:
        with self._lock:
            entry = self._version_entry(segments[1], segments[3])
            text = self._state.schemas[entry.schema_id].schema
        try:
            return json.loads(text)
        except ValueError:
            return _RawText(text)

    def _get_referenced_by(self, segments: list[str], query: Query, body: Any) -> JsonValue:
        with self._lock:
            entry = self._version_entry(segments[1], segments[3])
            ids = [
                stored.schema_id
                for stored in self._state.schemas.values()
                if any(r.subject == entry.subject and r.version == entry.version for r in stored.references)
            ]
            return _page(ids, query)

    def _get_config(self, segments: list[str], query: Query, body: Any) -> JsonValue:
        with self._lock:
            if len(segments) == 1:
                return {"compatibilityLevel": self._state.compatibility}
            level = self._state.subject_compatibility.get(segments[1])
            if level is None:
                if query.get("defaultToGlobal", ["false"])[0].lower() != "true":
                    raise RegistryError(
                        404, 40408, f"Subject '{segments[1]}' does not have subject-level compatibility configured"
                    )
                level = self._state.compatibility
            return {"compatibilityLevel": level}

    def _put_config(self, segments: list[str], query: Query, body: Any) -> JsonValue:
        if not isinstance(body, dict) or not isinstance(body.get("compatibility"), str):
            raise RegistryError(422, 42203, "Invalid compatibility level")
        level = str(body["compatibility"]).upper()
        with self._lock:
            if len(segments) == 1:
                self._state.compatibility = level
            else:
                self._state.subject_compatibility[segments[1]] = level
        return {"compatibility": level}


def _decode_basic(header: str) -> tuple[str, str] | None:
    """The (user, password) of a Basic Authorization header, or None when malformed."""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(token, validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None
