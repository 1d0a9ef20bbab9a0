"""Cohort on a secured Apache Kafka 4.4: a SASL_SSL listener with SCRAM-SHA-512 and a certificate from a CA of the
test's own (harness.kafka_security), one node started for this module beside its PLAINTEXT loopback listener.

The worker runs through Dagster in process with `KafkaResource(security_protocol="SASL_SSL",
sasl_mechanism="SCRAM-SHA-512", sasl_username=..., sasl_password=dg.EnvVar(...), ssl_ca_location=...)`, real Spark
(local[2]) and a real SQLite store. The resource names only the SASL_SSL listener, so every record that lands was
read through it by Spark's reading tasks; the batch runner is wrapped to check that the configuration those tasks
get holds the security settings. A wrong password and a CA the client does not trust each fail the batch within a
bounded time, with one line naming the cause, and commit nothing (the ledger, Kafka's committed offsets and the
sink as the previous batch left them). The password appears nowhere: captured logs and process output, Dagster's
event log, run records and metadata, files under the test's folder, the store's tables.

The `cohort` commands reach the same listener with `--command-config client.properties` (cohort/cli/command_config.py),
run as the user runs them, in a subprocess, after one batch landed through the listener (the module's `landed`
group): `describe`, `audit` and a dry-run `reset-offsets` read Kafka through SASL_SSL, the password in the file or
in `COHORT_KAFKA_SASL_PASSWORD`; a wrong password and an untrusted CA each end the command within seconds with one
line naming the cause. Their output never holds a password.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa

from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import CohortConfig, DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.devtools.topics import create_topic, produce
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec
from cohort.resources import KafkaResource, SparkResource
from cohort.resources.group import CohortGroupResource
from cohort.resources.kafka import redact
from cohort.runtime.kafka_access import KafkaAccess
from harness.dagster_group import VALUE_SCHEMA, json_records
from harness.kafka_security import CertificateAuthority, SecuredKafka
from tests.fixtures.kafka import broker_choice
from tests.resources.test_secrets import scan_instance

# The module starts its own broker and the Dagster tests their own instance (not the `broker` and `instance`
# fixtures): marked as those fixtures would mark them.
pytestmark = pytest.mark.kafka

PASSWORD_ENV = "COHORT_TEST_SCRAM_PASSWORD"
WRONG_ENV = "COHORT_TEST_SCRAM_WRONG_PASSWORD"
COHORT = str(Path(sys.executable).with_name("cohort"))
TRANSLATOR = DagsterCohortTranslator()
PARTITIONS = 2
BOUND_S = 60.0
"""A failing batch must end within this (the resource's requests are bounded by request_timeout_s, 10 s)."""

_groups = itertools.count()


@pytest.fixture(scope="module")
def secured(request: pytest.FixtureRequest) -> Iterator[SecuredKafka]:
    """Apache Kafka with a SASL_SSL (SCRAM-SHA-512) listener and the user `cohort`; its folder is kept when a test
    of the module failed."""
    if broker_choice() != "kafka":
        pytest.skip("the secured broker is Apache Kafka started from the pinned jars: not with an external or Tansu")
    kafka = SecuredKafka().start()
    failed_before = request.session.testsfailed
    try:
        yield kafka
    finally:
        failed = request.session.testsfailed > failed_before
        folders = (kafka.broker.log_dir if kafka.broker else None, kafka.folder)
        kafka.stop(keep_log_dir=failed)
        if failed:
            print(f"secured Kafka's folders kept: {folders}")


@dataclass
class Group:
    """One test's group on the secured broker: its topic, store, sink, Dagster home, and what each batch saw."""

    secured: SecuredKafka
    root: Path
    name: str
    topic: str
    batch_configs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def store_url(self) -> str:
        return f"sqlite:///{self.root / 'cohort.db'}"

    @property
    def sink(self) -> Path:
        return self.root / "lake"

    @property
    def partitions(self) -> list[TopicPartition]:
        return [TopicPartition(self.topic, p) for p in range(PARTITIONS)]

    def config(self) -> CohortConfig:
        return CohortConfig(
            CohortGroupResource(
                group=self.name,
                topics=[self.topic],
                worker_slots=1,
                store_url=self.store_url,
                initial_rebalance_delay_s=0.0,
            ),
            known_topics=(self.topic,),
            pipeline=PipelineSpec(sink_path=str(self.sink), value_format="json", value_schema=VALUE_SCHEMA),
            schedule=None,
        )

    def kafka(self, password_env: str = PASSWORD_ENV, ca_location: Path | None = None) -> KafkaResource:
        """The settings a user gives for a SASL_SSL cluster, the password through `dg.EnvVar`."""
        return KafkaResource(
            bootstrap_servers=self.secured.bootstrap_servers,
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username=self.secured.username,
            sasl_password=dg.EnvVar(password_env),
            ssl_ca_location=str(ca_location or self.secured.ca_location),
        )

    def _runner(self, *args: Any, **kwargs: Any) -> Any:
        """`run_batch`, noting the security settings of the configuration the reading tasks get (masked, and
        whether the password is the user's)."""
        kafka_config = args[2]
        security = {k: v for k, v in kafka_config.items() if k.startswith(("security.", "sasl.", "ssl."))}
        self.batch_configs.append(
            {**redact(security), "password is the user's": kafka_config.get("sasl.password") == self.secured.password}
        )
        return run_batch(*args, **kwargs)

    def run(self, instance: dg.DagsterInstance, kafka: KafkaResource) -> tuple[dg.ExecuteInProcessResult, float]:
        """One batch of the group's only worker slot through Dagster; (result, seconds it took)."""
        config = self.config()
        spark = SparkResource(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
        defs = build_cohort_definitions([config], kafka=kafka, spark=spark, runner=self._runner)
        job = defs.resolve_job_def(TRANSLATOR.get_job_name(config.group))
        started = time.monotonic()
        result = job.execute_in_process(
            run_config=worker_run_config(config, 1), instance=instance, raise_on_error=False
        )
        return result, time.monotonic() - started

    def ledger(self) -> dict[TopicPartition, int | None]:
        coordinator = Coordinator.from_url(self.store_url)
        try:
            return coordinator.fetch_offsets(self.name, self.partitions)
        finally:
            coordinator.close()

    def kafka_committed(self) -> dict[TopicPartition, int | None]:
        """Kafka's committed offsets of the group, read through the PLAINTEXT loopback listener."""
        access = KafkaAccess({"bootstrap.servers": self.secured.plaintext_bootstrap_servers}, request_timeout_s=10)
        try:
            return access.committed_offsets(self.name, self.partitions)
        finally:
            access.close()

    def store_text(self) -> str:
        """Every row of every table of the group's SQLite store, as text."""
        engine = sa.create_engine(self.store_url)
        try:
            with engine.connect() as conn:
                tables = sa.inspect(conn).get_table_names()
                rows = [f"{t}: {row!r}" for t in tables for row in conn.execute(sa.text(f'select * from "{t}"'))]
        finally:
            engine.dispose()
        assert tables, "the store has no table"
        return "\n".join(rows)


def _fresh_group(secured: SecuredKafka, root: Path, label: str) -> Group:
    """A fresh topic of two partitions with 20 JSON records (produced through the PLAINTEXT listener) and a group
    name."""
    n = next(_groups)
    topic = f"sasl-{n}-{label[:40]}".replace("[", "-").replace("]", "")
    plain = {"bootstrap.servers": secured.plaintext_bootstrap_servers}
    create_topic(plain, topic, PARTITIONS)
    produce(plain, topic, json_records(20, PARTITIONS))
    return Group(secured, root, f"sasl-g{n}", topic)


@pytest.fixture
def group(
    request: pytest.FixtureRequest, secured: SecuredKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Group:
    """A fresh group (`_fresh_group`) under the test's folder, and the user's password in PASSWORD_ENV."""
    monkeypatch.setenv(PASSWORD_ENV, secured.password)
    return _fresh_group(secured, tmp_path, request.node.name)


def _instance(root: Path) -> dg.DagsterInstance:
    home = root / "dagster"
    home.mkdir(exist_ok=True)
    return dg.DagsterInstance.local_temp(tempdir=str(home))


def _step_failures(result: dg.ExecuteInProcessResult) -> list[str]:
    """Each failed step's innermost error message (what the op raised, under Dagster's wrapper)."""
    failures = []
    for event in result.all_events:
        if event.is_step_failure:
            error = event.step_failure_data.error
            while error.cause is not None:
                error = error.cause
            failures.append(error.message.strip())
    return failures


def _landed(result: dg.ExecuteInProcessResult, group: Group) -> dict[str, tuple[str, str, int]]:
    """partition -> (from, until, records) of the topic asset's materializations."""
    key = TRANSLATOR.get_asset_key(group.name, group.topic)
    found = {}
    for event in result.get_asset_materialization_events():
        m = event.materialization
        if m.asset_key == key:
            meta = {k: v.value for k, v in m.metadata.items()}
            found[str(m.partition)] = (meta["cohort/from_offset"], meta["cohort/until_offset"], meta["cohort/records"])
    return found


def _assert_secret_absent(
    instance: dg.DagsterInstance, group: Group, output: str, logs: str, needles: dict[str, str]
) -> None:
    """None of `needles` (label -> secret) in what Dagster keeps, the files under the test's folder, the store's
    tables, the captured logs and the process output."""
    scan = scan_instance(instance, [group.root])
    scan.add("process output", output)
    scan.add("captured logs", logs)
    scan.add("store tables", group.store_text())
    leaks = {label: sorted(scan.find(secret)) for label, secret in needles.items()}
    assert leaks == {label: [] for label in needles}
    # not vacuous: the scan reads the event log and the store
    assert "event log" in scan.find(group.name) and "store tables" in scan.find(group.name)


@pytest.mark.dagster
def test_a_batch_lands_through_sasl_ssl_with_the_password_from_an_env_var(
    group: Group, spark: Any, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with _instance(group.root) as instance:
        result, _elapsed = group.run(instance, group.kafka())
        assert result.success, _step_failures(result)

        assert _landed(result, group) == {"0": ("0", "10", 10), "1": ("0", "10", 10)}
        assert spark.read.parquet(str(group.sink)).count() == 20
        ends = dict.fromkeys(group.partitions, 10)
        assert group.ledger() == ends
        assert group.kafka_committed() == ends  # the mirror committed through SASL_SSL too
        # what Spark's reading tasks were given: the resource's security settings, the user's password
        assert group.batch_configs == [
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "cohort",
                "sasl.password": "***",
                "ssl.ca.location": str(group.secured.ca_location),
                "password is the user's": True,
            }
        ]
        output = capfd.readouterr()
        _assert_secret_absent(
            instance, group, output.out + output.err, caplog.text, {"password": group.secured.password}
        )


@dataclass(frozen=True)
class Refusal:
    """A resource the broker cannot let in, and the line that must name why."""

    name: str
    cause: str
    kafka: Callable[[Group, Path], KafkaResource]


REFUSALS = [
    Refusal(
        "wrong-password",
        "SASL authentication error: Authentication failed during authentication due to invalid credentials with "
        "SASL mechanism SCRAM-SHA-512",
        lambda group, _other_ca: group.kafka(password_env=WRONG_ENV),
    ),
    Refusal(
        "untrusted-certificate",
        "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed",
        lambda group, other_ca: group.kafka(ca_location=other_ca),
    ),
]

CI_KEEPS_ONE = [pytest.param(r, marks=pytest.mark.slow) if r.name == "untrusted-certificate" else r for r in REFUSALS]
"""The batch's refusals: CI keeps the wrong password (the CLI's test keeps both); the certificate is slow."""


@pytest.mark.dagster
@pytest.mark.parametrize("refusal", CI_KEEPS_ONE, ids=[r.name for r in REFUSALS])
def test_a_refused_connection_fails_the_batch_quickly_naming_the_cause_and_commits_nothing(
    refusal: Refusal,
    group: Group,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    wrong = f"wrong-{secrets.token_hex(12)}"
    monkeypatch.setenv(WRONG_ENV, wrong)
    other_ca = CertificateAuthority.create("A CA the broker's certificate does not chain to")
    other_ca_location = other_ca.write_pem(group.root / "other-ca.pem")
    with _instance(group.root) as instance:
        first, _ = group.run(instance, group.kafka())
        assert first.success, _step_failures(first)
        before = (group.ledger(), group.kafka_committed(), spark.read.parquet(str(group.sink)).count())
        assert before == (dict.fromkeys(group.partitions, 10), dict.fromkeys(group.partitions, 10), 20)
        produce({"bootstrap.servers": group.secured.plaintext_bootstrap_servers}, group.topic, json_records(6, 2))

        failed, elapsed = group.run(instance, refusal.kafka(group, other_ca_location))

        assert not failed.success
        assert elapsed < BOUND_S, elapsed
        (message,) = _step_failures(failed)
        assert "\n" not in message, message  # one line
        expected = (
            f"KafkaException: could not read topic metadata from {group.secured.bootstrap_servers}: {refusal.cause}"
        )
        assert message.startswith(("cimpl." + expected, "confluent_kafka." + expected)), message
        assert _landed(failed, group) == {}
        after = (group.ledger(), group.kafka_committed(), spark.read.parquet(str(group.sink)).count())
        assert after == before  # nothing committed, mirrored or published
        assert len(group.batch_configs) == 1  # the refused run never reached the batch

        output = capfd.readouterr()
        _assert_secret_absent(
            instance,
            group,
            output.out + output.err,
            caplog.text,
            {"password": group.secured.password, "wrong password": wrong},
        )


# ------------------------------------------------------------------------------------------------ the CLI

CLI_BOUND_S = 30.0
"""A refused command must end within this: `describe` waits up to 3 s per request; the rest is the process's start
on a loaded host."""


@pytest.fixture(scope="module")
def landed(secured: SecuredKafka, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Group:
    """A group whose first batch landed through the SASL_SSL listener (10 records per partition; its worker slot
    left, so the group is Empty), shared by the CLI's tests, which only read it."""
    group = _fresh_group(secured, tmp_path_factory.mktemp("sasl-cli"), "cli")
    with pytest.MonkeyPatch.context() as env, _instance(group.root) as instance:
        env.setenv(PASSWORD_ENV, secured.password)
        result, _ = group.run(instance, group.kafka())
        assert result.success, _step_failures(result)
    assert group.ledger() == dict.fromkeys(group.partitions, 10)
    return group


def _client_properties(path: Path, secured: SecuredKafka, *, password: str | None, ca: Path | None = None) -> Path:
    """A `--command-config` file for the SASL_SSL listener, as a user writes it (the password only if given)."""
    lines = [
        "# the test broker's SASL_SSL listener",
        "security.protocol=SASL_SSL",
        "sasl.mechanism=SCRAM-SHA-512",
        f"sasl.username={secured.username}",
        f"ssl.ca.location={ca or secured.ca_location}",
    ]
    if password is not None:
        lines.append(f"sasl.password={password}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _cohort(*args: str, env: Mapping[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    """The `cohort` command in a subprocess, without the test's COHORT_ variables (plus `env`); (result, seconds)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    environment.update(env or {})
    started = time.monotonic()
    done = subprocess.run([COHORT, *args], env=environment, capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - started


def _secured_args(group: Group, properties: Path) -> list[str]:
    """The options that point a command at the group's store and, through `properties`, the SASL_SSL listener."""
    listener = group.secured.bootstrap_servers
    return ["--store-url", group.store_url, "--bootstrap-servers", listener, "--command-config", str(properties)]


@pytest.mark.dagster
def test_the_cli_reads_kafka_through_sasl_ssl_with_a_command_config(landed: Group, tmp_path: Path) -> None:
    """`describe`, `audit` and a dry-run `reset-offsets` after the batch: Kafka's end offsets, its committed offsets
    and its first offsets, each read through the SASL_SSL listener."""
    properties = _client_properties(tmp_path / "client.properties", landed.secured, password=landed.secured.password)
    args = _secured_args(landed, properties)
    outputs = []

    described, _ = _cohort("describe", landed.name, *args, "--json")
    outputs.append(described.stdout + described.stderr)
    assert described.returncode == 0, described.stderr
    rows = json.loads(described.stdout)["partitions"]
    assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"]) for r in rows] == [
        (0, 10, 10, 0),
        (1, 10, 10, 0),
    ]

    audited, _ = _cohort("audit", landed.name, "--sink", str(landed.sink), *args, "--json")
    outputs.append(audited.stdout + audited.stderr)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    audit = json.loads(audited.stdout)
    assert audit["ok"] and [(p["partition"], p["ledger"], p["kafka"]) for p in audit["partitions"]] == [
        (0, 10, 10),
        (1, 10, 10),
    ]

    planned, _ = _cohort("reset-offsets", landed.name, *args, "--all-topics", "--to-earliest", "--json")
    outputs.append(planned.stdout + planned.stderr)
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert not plan["executed"]
    assert [(p["partition"], p["current_offset"], p["new_offset"]) for p in plan["partitions"]] == [
        (0, 10, 0),
        (1, 10, 0),
    ]
    assert landed.ledger() == dict.fromkeys(landed.partitions, 10)  # a dry run
    assert all(landed.secured.password not in output for output in outputs)


@pytest.mark.dagster
def test_the_cli_takes_the_password_from_the_environment(landed: Group, tmp_path: Path) -> None:
    """`COHORT_KAFKA_SASL_PASSWORD` supplies sasl.password when the file has none; without it, the file is a usage
    error saying where the password may come from, before anything connects."""
    properties = _client_properties(tmp_path / "client.properties", landed.secured, password=None)
    args = _secured_args(landed, properties)
    password = {"COHORT_KAFKA_SASL_PASSWORD": landed.secured.password}

    described, _ = _cohort("describe", landed.name, *args, "--json", env=password)
    assert described.returncode == 0, described.stderr
    assert [r["log_end_offset"] for r in json.loads(described.stdout)["partitions"]] == [10, 10]
    assert landed.secured.password not in described.stdout + described.stderr

    missing, _ = _cohort("describe", landed.name, *args, "--json")
    assert missing.returncode == 2, missing
    assert missing.stderr.splitlines()[-1] == (
        f"Error: Invalid value for '--command-config': {properties}: sasl.username and sasl.password must be set "
        "(the password may come from COHORT_KAFKA_SASL_PASSWORD)"
    )


@pytest.mark.dagster
@pytest.mark.parametrize("refusal", REFUSALS, ids=[r.name for r in REFUSALS])
def test_a_refused_cli_command_says_why_in_one_line_within_seconds(
    refusal: Refusal, landed: Group, tmp_path: Path
) -> None:
    """A wrong password (COHORT_KAFKA_SASL_PASSWORD over the file's right one) or a CA the client does not trust:
    one line naming the cause, after the 3 s request timeout, nothing on stdout, no password anywhere."""
    wrong = f"wrong-{secrets.token_hex(12)}"
    secured = landed.secured
    if refusal.name == "wrong-password":
        properties = _client_properties(tmp_path / "client.properties", secured, password=secured.password)
        env = {"COHORT_KAFKA_SASL_PASSWORD": wrong}
    else:
        other_ca = CertificateAuthority.create("A CA the broker's certificate does not chain to")
        ca = other_ca.write_pem(tmp_path / "other-ca.pem")
        properties = _client_properties(tmp_path / "client.properties", secured, password=None, ca=ca)
        env = {"COHORT_KAFKA_SASL_PASSWORD": secured.password}

    refused, elapsed = _cohort("describe", landed.name, *_secured_args(landed, properties), "--json", env=env)

    assert refused.returncode == 1, refused
    assert refused.stdout == ""
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith(f"Error: could not read topic metadata from {secured.bootstrap_servers}: {refusal.cause}")
    assert line.endswith("(waited up to 3 s per request)"), line
    assert elapsed < CLI_BOUND_S, elapsed
    assert secured.password not in refused.stderr and wrong not in refused.stderr
