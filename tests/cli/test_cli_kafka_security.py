"""`--command-config FILE` and the secrets' environment variables (cohort.cli.command_config), without a broker: the
Java properties syntax, how the file's settings and the environment's secrets combine, and every problem as one usage
error naming the file and the line or key, never a secret, before a command opens or creates anything.

The commands reaching a SASL_SSL listener with the file (after a real batch), a password from the environment, a
wrong password and an untrusted CA: tests/resources/test_kafka_sasl_ssl.py (Apache Kafka with a SASL_SSL listener).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cohort.cli.command_config import (
    CommandConfig,
    CommandConfigError,
    PropertiesError,
    load_command_config,
    parse_properties,
)
from cohort.cli.kafka import kafka_for

COHORT = str(Path(sys.executable).with_name("cohort"))
SECRET = "s3cret-Pa55"
"""A password some files hold: no output may show it."""

SECURED = """\
# the cluster's SASL_SSL listener
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.username=cohort
"""


# ------------------------------------------------------------------------------------------------- the syntax


def test_java_properties_syntax() -> None:
    text = (
        "# a comment\n"
        "   ! another one \\\n"
        "\n"
        "security.protocol = SASL_SSL\n"
        "sasl.mechanism:SCRAM-SHA-512\n"
        "sasl.username cohort\n"
        "client.id   =   my\\\n"
        "      -tool\n"
        "ssl.ca.location=/etc/ssl/my\\ ca.pem\n"
        "sasl.password=a\\=b\\:c\\\\d\\u00e9\\t\n"
        "  socket.timeout.ms=\n"
        "a\\ key\\=x=1\r\n"
    )
    assert parse_properties(text) == [
        (4, "security.protocol", "SASL_SSL"),
        (5, "sasl.mechanism", "SCRAM-SHA-512"),
        (6, "sasl.username", "cohort"),
        (7, "client.id", "my-tool"),
        (9, "ssl.ca.location", "/etc/ssl/my ca.pem"),
        (10, "sasl.password", "a=b:c\\d\u00e9\t"),
        (11, "socket.timeout.ms", ""),
        (12, "a key=x", "1"),
    ]


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("security.protocol=SASL_SSL\nhunter2\n", 2, "no '=' and no value (expected key=value)"),
        ("\n\n=SASL_SSL\n", 3, "no key before the '=' (expected key=value)"),
        ("a=1\nsasl.password=\\u12G4\n", 2, "a malformed \\uXXXX escape"),
    ],
    ids=["bare-word", "no-key", "bad-escape"],
)
def test_a_line_that_is_no_property_names_its_number_and_not_its_text(text: str, line: int, problem: str) -> None:
    with pytest.raises(PropertiesError) as caught:
        parse_properties(text)
    assert (caught.value.line, caught.value.problem) == (line, problem)
    assert "hunter2" not in str(caught.value)


# ---------------------------------------------------------------------------------- the file and the environment


def _file(tmp_path: Path, text: str, name: str = "client.properties") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_environment_supplies_or_overrides_the_secrets(tmp_path: Path) -> None:
    path = _file(tmp_path, SECURED + f"sasl.password={SECRET}\nbootstrap.servers=elsewhere:9092\n")
    from_file = load_command_config(path, {})
    assert from_file is not None and from_file.settings["sasl.password"] == SECRET
    assert SECRET not in repr(from_file)
    # the command line names the cluster: the file's bootstrap.servers is left out
    access = kafka_for("broker-1:9093", 3.0, from_file)
    assert access.config == {
        "security.protocol": "SASL_SSL",
        "client.id": "cohort",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "cohort",
        "sasl.password": SECRET,
        "bootstrap.servers": "broker-1:9093",
        "log_level": "0",
    }

    environ = {"COHORT_KAFKA_SASL_PASSWORD": "from-env", "COHORT_KAFKA_SSL_KEY_PASSWORD": "key-pass"}
    overridden = load_command_config(path, environ)
    assert overridden is not None
    assert (overridden.settings["sasl.password"], overridden.settings["ssl.key.password"]) == ("from-env", "key-pass")

    supplied = load_command_config(_file(tmp_path, SECURED, "no-password.properties"), environ)
    assert supplied is not None and supplied.settings["sasl.password"] == "from-env"

    # no file: the environment's secrets alone; neither: nothing (PLAINTEXT, as without the option)
    assert load_command_config(None, {"COHORT_KAFKA_SASL_PASSWORD": "x"}) == CommandConfig(None, {"sasl.password": "x"})
    assert load_command_config(None, {"COHORT_KAFKA_SASL_PASSWORD": ""}) is None
    assert kafka_for("broker-1:9092", 3.0, None).config["security.protocol"] == "PLAINTEXT"


BAD_FILES = [
    pytest.param(
        SECURED + "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="cohort" password="{SECRET}";\n',
        "line 5: sasl.jaas.config is Java's JAAS login, which librdkafka does not read: give sasl.username and "
        "sasl.password (or COHORT_KAFKA_SASL_PASSWORD) with sasl.mechanism",
        id="jaas",
    ),
    pytest.param(
        SECURED + f"sasl.password={SECRET}\nssl.truststore.location=/etc/kafka/truststore.jks\n",
        "line 6: ssl.truststore.location is a Java truststore, which librdkafka does not read: give "
        "ssl.ca.location (the CA certificate as PEM)",
        id="truststore",
    ),
    pytest.param(
        SECURED + f"sasl.password={SECRET}\nssl.keystore.type=JKS\n",
        "line 6: ssl.keystore.type is Java's keystore type: librdkafka reads a PKCS#12 keystore",
        id="keystore-type",
    ),
    pytest.param(
        SECURED + f"sasl.password={SECRET}\nrequest.timeout.millis=5000\n",
        "line 6: unknown key 'request.timeout.millis' (not a librdkafka property: see librdkafka's CONFIGURATION.md)",
        id="unknown-key",
    ),
    pytest.param(
        SECURED + f"sasl.password={SECRET}\nsasl.mechanisms=PLAIN\n",
        "line 6: sasl.mechanisms (sasl.mechanism) is set again (first on line 3)",
        id="set-twice",
    ),
    pytest.param(
        SECURED + f"sasl.password={SECRET}\ndebug=all\n",
        "line 6: debug is librdkafka's logging, which the cohort commands keep off",
        id="debug",
    ),
    pytest.param(
        f"security.protocol=SASL_SSLL\nsasl.password={SECRET}\n",
        'line 1: Invalid value "SASL_SSLL" for configuration property "security.protocol"',
        id="bad-value",
    ),
    pytest.param(
        SECURED + f"sasl.password={SECRET}\nssl.ca.location=/nonexistent/ca.pem\n",
        "line 6: ssl.ca.location '/nonexistent/ca.pem' does not exist",
        id="no-ca-file",
    ),
    pytest.param(
        SECURED + f"{SECRET}\n",
        "line 5: no '=' and no value (expected key=value)",
        id="bad-line",
    ),
    pytest.param(
        SECURED,
        ": sasl.username and sasl.password must be set (the password may come from COHORT_KAFKA_SASL_PASSWORD)",
        id="no-password",
    ),
]


@pytest.mark.parametrize(("text", "problem"), BAD_FILES)
def test_a_bad_file_is_refused_naming_the_file_and_the_line_or_key(tmp_path: Path, text: str, problem: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(CommandConfigError) as caught:
        load_command_config(path, {})
    message = str(caught.value)
    assert message.startswith(path) and problem in message, message
    assert "\n" not in message and SECRET not in message


def test_a_byte_order_mark_is_no_part_of_the_first_key(tmp_path: Path) -> None:
    path = tmp_path / "windows.properties"
    path.write_bytes(b"\xef\xbb\xbfsecurity.protocol=SSL\r\n")
    assert load_command_config(str(path), {}) == CommandConfig(str(path), {"security.protocol": "SSL"})


def test_a_file_that_cannot_be_read(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.properties")
    with pytest.raises(CommandConfigError, match=r"^cannot read .*nope\.properties: No such file or directory$"):
        load_command_config(missing, {})
    with pytest.raises(CommandConfigError, match=r"^cannot read .*: Is a directory$"):
        load_command_config(str(tmp_path), {})
    latin1 = tmp_path / "latin1.properties"
    latin1.write_bytes(b"security.protocol=SASL_SSL\nsasl.username=caf\xe9\n")
    with pytest.raises(CommandConfigError, match=r"latin1\.properties, line 2: not UTF-8 text$"):
        load_command_config(str(latin1), {})


# ---------------------------------------------------------------------------------------------------- the CLI


def _run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    environment.update(env or {})
    return subprocess.run([COHORT, *args], env=environment, cwd=cwd, capture_output=True, text=True, timeout=120)


def _usage_error(done: subprocess.CompletedProcess[str], expected: str) -> None:
    """Click's usage error: status 2, its usage lines and one `Error:` line; no traceback, no secret."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr.splitlines()[-1] == f"Error: Invalid value for '--command-config': {expected}"
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 4, done.stderr
    assert SECRET not in done.stderr


COMMANDS = [
    pytest.param(["describe", "g"], id="describe"),
    pytest.param(["reset-offsets", "g", "--all-topics", "--to-earliest"], id="reset-offsets"),
    pytest.param(["audit", "g", "--sink", "lake"], id="audit"),
]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_kafka_command_refuses_a_bad_file_before_it_opens_anything(tmp_path: Path, command: list[str]) -> None:
    """A Java client's file (its JAAS line holds the password) and a missing file: one usage error naming the file
    and the line; the store, which does not exist, is not created, nor anything else."""
    _file(tmp_path, SECURED + f'sasl.jaas.config=... username="cohort" password="{SECRET}";\n')
    store = f"sqlite:///{tmp_path / 'cohort.db'}"
    kafka = ["--store-url", store, "--bootstrap-servers", "127.0.0.1:9093"]
    before = sorted(tmp_path.iterdir())

    done = _run(*command, *kafka, "--command-config", "client.properties", "--json", cwd=tmp_path)
    _usage_error(
        done,
        "client.properties, line 5: sasl.jaas.config is Java's JAAS login, which librdkafka does not read: give "
        "sasl.username and sasl.password (or COHORT_KAFKA_SASL_PASSWORD) with sasl.mechanism",
    )
    done = _run(*command, *kafka, "--command-config", "missing.properties", cwd=tmp_path)
    _usage_error(done, "cannot read missing.properties: No such file or directory")
    assert sorted(tmp_path.iterdir()) == before


def test_the_file_may_be_named_by_the_environment(tmp_path: Path) -> None:
    _file(tmp_path, SECURED + f"sasl.password={SECRET}\nssl.truststore.location=/etc/kafka/truststore.jks\n")
    done = _run(
        "describe",
        "g",
        "--store-url",
        f"sqlite:///{tmp_path / 'cohort.db'}",
        "--bootstrap-servers",
        "127.0.0.1:9093",
        cwd=tmp_path,
        env={"COHORT_COMMAND_CONFIG": "client.properties"},
    )
    _usage_error(
        done,
        "client.properties, line 6: ssl.truststore.location is a Java truststore, which librdkafka does not read: "
        "give ssl.ca.location (the CA certificate as PEM)",
    )
    assert not (tmp_path / "cohort.db").exists()
