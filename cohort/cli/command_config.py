"""`--command-config FILE`: the Kafka client settings of the `cohort` commands that talk to Kafka, given as Kafka's own
tools take them (`kafka-consumer-groups.sh --command-config client.properties`), and the secrets from the environment.

The file is a Java properties file (`key=value`, `key: value` or `key value`; `#` and `!` comment lines; a trailing
backslash continues a line; Java's escapes, `\\uXXXX` included) of librdkafka properties. The common settings have the
Java client's names: security.protocol, sasl.mechanism (or librdkafka's `sasl.mechanisms`), sasl.username,
sasl.password, ssl.ca.location, ssl.certificate.location, ssl.key.location, ssl.key.password, client.id. What only
Java's client reads (sasl.jaas.config, a truststore, a JKS keystore, Java classes) is refused with the librdkafka keys
to give instead. `bootstrap.servers` in the file is ignored: `--bootstrap-servers` names the cluster, as with Kafka's
tools. `debug` and `log_level` are refused: the commands keep librdkafka's own log lines off.

A secret may come from the environment instead of the file (`SECRET_ENV`): `COHORT_KAFKA_SASL_PASSWORD` sets
sasl.password and `COHORT_KAFKA_SSL_KEY_PASSWORD` sets ssl.key.password, with or without a file, over the file's value
(an empty variable counts as unset).

Every problem is a `CommandConfigError` whose message names the file and the line or the key and never a value of a
secret: a file that cannot be read or is not UTF-8, a line that is not a property or sets a key again, a Java-only
key, a key librdkafka does not know or a value it refuses (librdkafka itself is asked, through a client that names no
broker and so connects nowhere), a certificate, key or CRL file that does not exist.

Example:
    >>> parse_properties("security.protocol=SASL_SSL\\n# a comment\\nsasl.mechanism: SCRAM-SHA-512\\n")
    [(1, 'security.protocol', 'SASL_SSL'), (3, 'sasl.mechanism', 'SCRAM-SHA-512')]
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = [
    "CONFIG_ENV",
    "SECRET_ENV",
    "SECRET_KEYS",
    "CommandConfig",
    "CommandConfigError",
    "PropertiesError",
    "load_command_config",
    "parse_properties",
]

CONFIG_ENV: Final = "COHORT_COMMAND_CONFIG"
"""The environment variable that names the file when `--command-config` is not given."""

SECRET_ENV: Final[Mapping[str, str]] = {
    "sasl.password": "COHORT_KAFKA_SASL_PASSWORD",
    "ssl.key.password": "COHORT_KAFKA_SSL_KEY_PASSWORD",
}
"""librdkafka property -> the environment variable that sets it (over the file's value)."""

SECRET_KEYS: Final = frozenset(
    {"sasl.password", "ssl.key.password", "ssl.keystore.password", "sasl.oauthbearer.client.secret"}
)
"""The properties whose values no message shows."""

_SAME_AS: Final[Mapping[str, str]] = {"sasl.mechanisms": "sasl.mechanism", "metadata.broker.list": "bootstrap.servers"}
"""librdkafka's aliases: one setting under two names (the Java client's name and librdkafka's)."""

_IGNORED: Final = frozenset({"bootstrap.servers"})
"""Set by the command line (`--bootstrap-servers` wins, as with Kafka's tools)."""

_TRUSTSTORE = "a Java truststore, which librdkafka does not read: give ssl.ca.location (the CA certificate as PEM)"
_KEYSTORE = (
    "Java's keystore type: librdkafka reads a PKCS#12 keystore (ssl.keystore.location, ssl.keystore.password) or PEM "
    "files (ssl.certificate.location, ssl.key.location, ssl.key.password)"
)
_JAVA_CLASS = "a Java class, which librdkafka cannot load (librdkafka's OAUTHBEARER: the sasl.oauthbearer.* keys)"
_LOGGING = "librdkafka's logging, which the cohort commands keep off (its lines would go to stderr)"

_REFUSED: Final[Mapping[str, str]] = {
    "sasl.jaas.config": (
        "Java's JAAS login, which librdkafka does not read: give sasl.username and sasl.password (or "
        f"{SECRET_ENV['sasl.password']}) with sasl.mechanism"
    ),
    "ssl.truststore.location": _TRUSTSTORE,
    "ssl.truststore.password": _TRUSTSTORE,
    "ssl.truststore.type": _TRUSTSTORE,
    "ssl.truststore.certificates": "Java's PEM truststore: give ssl.ca.location (or ssl.ca.pem)",
    "ssl.keystore.type": _KEYSTORE,
    "ssl.keystore.key": "Java's PEM keystore: give ssl.key.location (or ssl.key.pem)",
    "ssl.keystore.certificate.chain": "Java's PEM keystore: give ssl.certificate.location (or ssl.certificate.pem)",
    "sasl.login.callback.handler.class": _JAVA_CLASS,
    "sasl.client.callback.handler.class": _JAVA_CLASS,
    "sasl.login.class": _JAVA_CLASS,
    "debug": _LOGGING,
    "log_level": _LOGGING,
    **dict.fromkeys(
        ("error_cb", "throttle_cb", "stats_cb", "oauth_cb", "logger", "on_commit", "on_delivery"),
        "a Python callable of confluent-kafka's, not a setting a file can give",
    ),
}
"""Keys refused, and why (the librdkafka keys to give instead)."""

_FILE_KEYS: Final = (
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.keystore.location",
    "ssl.crl.location",
    "sasl.kerberos.keytab",
)
"""Properties naming a file that must exist and be readable (`ssl.ca.location` may also be a directory or `probe`)."""

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A line of a properties file that is not a property: `line` (1-based) and what is wrong (never its text)."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(f"line {line}: {problem}")
        self.line = line
        self.problem = problem


class CommandConfigError(ValueError):
    """Why `--command-config` (or a secret's environment variable) cannot be used: one line, no secret."""


@dataclass(frozen=True)
class CommandConfig:
    """The librdkafka settings a command adds to `--bootstrap-servers`, secrets included: never print `settings`.

    `source` is the file they came from (None: the environment's secrets alone)."""

    source: str | None
    settings: Mapping[str, str] = field(repr=False)

    def client_settings(self) -> dict[str, str]:
        """The settings for a client (without the bootstrap servers, which the command line gives)."""
        return {k: v for k, v in self.settings.items() if _SAME_AS.get(k, k) not in _IGNORED}


# ------------------------------------------------------------------------------------------------- parsing


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(number of its first natural line, text) of each logical line that is not blank or a comment: a natural line
    ending in an odd number of backslashes continues on the next, whose leading whitespace is dropped."""
    lines: list[tuple[int, str]] = []
    natural = text.splitlines()
    i = 0
    while i < len(natural):
        start, line = i + 1, natural[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        parts = []
        while _continues(line):
            parts.append(line[:-1])
            if i >= len(natural):
                line = ""
                break
            line = natural[i].lstrip(_WHITESPACE)
            i += 1
        parts.append(line)
        lines.append((start, "".join(parts)))
    return lines


def _continues(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def _unescape(text: str, line: int) -> str:
    """Java's escapes: \\t \\n \\r \\f, \\uXXXX, and a backslash before any other character stands for it."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 >= len(text):
            out.append(c if c != "\\" else "")
            i += 1
            continue
        n = text[i + 1]
        if n == "u":
            digits = text[i + 2 : i + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise PropertiesError(line, "a malformed \\uXXXX escape")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(n, n))
            i += 2
    return "".join(out)


def _split(text: str, line: int) -> tuple[str, str]:
    """A logical line's (key, value): the key ends at its first unescaped `=`, `:` or whitespace."""
    i = 0
    while i < len(text) and text[i] not in "=:" + _WHITESPACE:
        i += 2 if text[i] == "\\" else 1
    raw_key, rest = text[:i], text[i:]
    stripped = rest.lstrip(_WHITESPACE)
    separated = bool(stripped) and stripped[0] in "=:"
    if separated:
        stripped = stripped[1:].lstrip(_WHITESPACE)
    if not raw_key:
        raise PropertiesError(line, "no key before the '=' (expected key=value)")
    if not separated and not stripped:
        raise PropertiesError(line, "no '=' and no value (expected key=value)")
    return _unescape(raw_key, line), _unescape(stripped, line)


def parse_properties(text: str) -> list[tuple[int, str, str]]:
    """(line number, key, value) of each property of a Java properties file's text, in order; a PropertiesError
    for a line that is not a property (a bare word, an empty key, a malformed escape)."""
    return [(number, *_split(line, number)) for number, line in _logical_lines(text)]


# ---------------------------------------------------------------------------------------------- the settings


def load_command_config(path: str | None, environ: Mapping[str, str] = os.environ) -> CommandConfig | None:
    """The settings of the file at `path` (None: no file) with the secrets of `environ` (`SECRET_ENV`) over them,
    checked by librdkafka; None when there is neither a file nor a secret. A CommandConfigError otherwise."""
    path = path or None  # an empty COHORT_COMMAND_CONFIG names no file
    secrets = {key: environ[name] for key, name in SECRET_ENV.items() if environ.get(name)}
    if path is None and not secrets:
        return None
    settings: dict[str, str] = {}
    lines: dict[str, int] = {}
    if path is not None:
        text = _read(path)
        try:
            properties = parse_properties(text)
        except PropertiesError as exc:
            raise CommandConfigError(f"{path}, {exc}") from None
        for number, key, value in properties:
            problem = _refused(key, lines)
            if problem:
                raise CommandConfigError(f"{path}, line {number}: {problem}")
            settings[key] = value
            lines[_SAME_AS.get(key, key)] = number
    settings.update(secrets)
    _check_files(settings, path, lines)
    _check_with_librdkafka(settings, path, lines)
    return CommandConfig(path, settings)


def _read(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CommandConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")  # a byte order mark is no part of the first key
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise CommandConfigError(f"{path}, line {line}: not UTF-8 text") from None


def _refused(key: str, lines: Mapping[str, int]) -> str | None:
    """Why a key cannot be taken, if it cannot (`lines`: the lines of the keys before it)."""
    if key in _REFUSED:
        return f"{key} is {_REFUSED[key]}"
    same = _SAME_AS.get(key, key)
    if same in lines:
        named = key if same == key else f"{key} ({same})"
        return f"{named} is set again (first on line {lines[same]})"
    return None


def _check_files(settings: Mapping[str, str], path: str | None, lines: Mapping[str, int]) -> None:
    for key in _FILE_KEYS:
        location = settings.get(key)
        if location is None or (key == "ssl.ca.location" and location == "probe"):
            continue
        directory_ok = key == "ssl.ca.location"
        problem = None
        if not os.path.exists(location):
            problem = "does not exist"
        elif os.path.isdir(location) and not directory_ok:
            problem = "is a directory"
        elif not os.access(location, os.R_OK):
            problem = "cannot be read"
        if problem:
            raise CommandConfigError(f"{_at(path, lines, key)}: {key} {location!r} {problem}")


def _at(path: str | None, lines: Mapping[str, int], key: str | None) -> str:
    """Where a problem is: `FILE, line N` for a key of the file, else `FILE`, or the environment without a file."""
    if path is None:
        return "the environment"
    line = lines.get(_SAME_AS.get(key, key)) if key is not None else None
    return f"{path}, line {line}" if line is not None else path


def _check_with_librdkafka(settings: Mapping[str, str], path: str | None, lines: Mapping[str, int]) -> None:
    """Let librdkafka judge the keys and values: a client naming no broker (it connects nowhere) is made and
    dropped. Its refusal names the key (`No such configuration property: "x"`, `Invalid value "y" for configuration
    property "x"`) or the problem (`sasl.username and sasl.password must be set`)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    checked = {k: v for k, v in settings.items() if _SAME_AS.get(k, k) not in _IGNORED}
    try:
        AdminClient({**checked, "log_level": 0})
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        reason = str(error.str()) if isinstance(error, KafkaError) else str(exc)
        raise CommandConfigError(_librdkafka_problem(reason, settings, path, lines)) from None
    except (TypeError, ValueError) as exc:  # confluent-kafka's own checks
        raise CommandConfigError(f"{_at(path, lines, None)}: {_scrub(str(exc), settings)}") from None


def _librdkafka_problem(reason: str, settings: Mapping[str, str], path: str | None, lines: Mapping[str, int]) -> str:
    """librdkafka's refusal, at the line of the key it names (if it names one)."""
    reason = _scrub(reason.removeprefix("Failed to create admin client: "), settings)
    quoted = re.search(r'configuration property "([^"]+)"', reason) or re.search(r'property: "([^"]+)"', reason)
    key = quoted.group(1) if quoted else None
    prefix = _at(path, lines, key)
    if reason.startswith("No such configuration property") and key:
        return f"{prefix}: unknown key {key!r} (not a librdkafka property: see librdkafka's CONFIGURATION.md)"
    if "sasl.password" in reason:
        reason += f" (the password may come from {SECRET_ENV['sasl.password']})"
    return f"{prefix}: {reason}"


def _scrub(text: str, settings: Mapping[str, str]) -> str:
    """`text` with the value of every secret setting masked."""
    for key in SECRET_KEYS:
        value = settings.get(key)
        if value:
            text = text.replace(value, "***")
    return text
