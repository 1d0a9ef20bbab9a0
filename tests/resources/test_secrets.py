"""Secrets scan: a SASL password given through `dg.EnvVar` never reaches what Dagster
keeps or shows: the event log (messages, event data, failure messages and stack traces), the stored run
config and tags (what the UI shows), the job and execution-plan snapshots, materialization and check
metadata, compute logs and every other file under the instance's directory, the process's own output,
and the str/repr of the resource and of the errors raised.

Real Dagster execution against a persistent instance in tmp, the real session broker, real Spark and a
real SQLite store. The embedded Tansu 0.6 broker cannot authenticate SASL/PLAIN clients (its
`--authentication` mode offers SCRAM only, and SCRAM users cannot be created on its in-memory store), so
the SASL_PLAINTEXT resource fails to connect: the worker run, the checks run and the topic sensor tick all
fail with Kafka errors, which is the path where an error message could leak a secret. A second resource
carries the same credentials with security_protocol PLAINTEXT (librdkafka then ignores the SASL settings),
so a complete batch runs with the password in every client configuration, Spark executors included, and
writes real materializations and check results.

The scan is shown not to be vacuous: marker strings logged through `context.log`, printed, put into run
tags, run config and output metadata are each found in the places they were written to.
"""

from __future__ import annotations

import json
import secrets
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pyspark.sql.types as T
import pytest

from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import CohortConfig, DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.pipelines.spec import PipelineSpec
from cohort.resources import KafkaResource, SparkResource
from cohort.resources.group import CohortGroupResource

SECRET_ENV = "COHORT_TEST_SASL_PASSWORD"
TRANSLATOR = DagsterCohortTranslator()
SCHEMA = T.StructType([T.StructField("id", T.LongType(), nullable=False), T.StructField("kind", T.StringType())])


@dataclass
class Scan:
    """Texts and raw bytes gathered from everywhere a secret could end up, each labelled with its place."""

    texts: list[tuple[str, str]] = field(default_factory=list)
    blobs: list[tuple[str, bytes]] = field(default_factory=list)

    def add(self, where: str, text: str) -> None:
        self.texts.append((where, text))

    def find(self, needle: str) -> set[str]:
        """The places holding `needle` (as text, or as UTF-8 bytes in a file)."""
        raw = needle.encode()
        return {w for w, t in self.texts if needle in t} | {w for w, b in self.blobs if raw in b}


def _metadata_text(metadata: dict[str, Any]) -> str:
    return json.dumps({k: getattr(v, "value", v) for k, v in metadata.items()}, default=str)


def scan_instance(instance: dg.DagsterInstance, roots: Iterable[Path]) -> Scan:
    """Everything the instance stores about its runs, through its APIs and as raw files under `roots`."""
    scan = Scan()
    for record in instance.get_run_records():
        run = record.dagster_run
        scan.add("run config", json.dumps(run.run_config, default=str))
        scan.add("run tags", json.dumps(run.tags))
        scan.add("run record", dg.serialize_value(run))
        if run.job_snapshot_id:
            scan.add("job snapshot", dg.serialize_value(instance.get_job_snapshot(run.job_snapshot_id)))
        if run.execution_plan_snapshot_id:
            plan = instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
            scan.add("execution plan snapshot", dg.serialize_value(plan))
        for entry in instance.all_logs(run.run_id):
            scan.add("event log", dg.serialize_value(entry))
            scan.add("event log messages", entry.message)
            event = entry.dagster_event
            if event is None:
                continue
            error = getattr(event.event_specific_data, "error", None)
            if error is not None:
                scan.add("failure messages and stack traces", error.to_string())
            if event.is_step_materialization:
                scan.add(
                    "materialization metadata", _metadata_text(event.step_materialization_data.materialization.metadata)
                )
            if event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
                scan.add("asset check metadata", _metadata_text(event.event_specific_data.metadata))
            if event.event_type == dg.DagsterEventType.STEP_OUTPUT:
                scan.add("output metadata", _metadata_text(event.event_specific_data.metadata))
    for key in instance.get_asset_keys():
        for found in instance.fetch_materializations(key, limit=1000).records:
            scan.add("materialization metadata", _metadata_text(found.asset_materialization.metadata))
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            label = "compute logs" if "compute_logs" in path.parts else f"file {path.name}"
            scan.blobs.append((label, path.read_bytes()))
    return scan


def _exception_text(exc: BaseException) -> str:
    """str, repr and the whole formatted chain (causes and stack) of an exception."""
    return "\n".join([str(exc), repr(exc), *traceback.format_exception(exc)])


def _probe_job(kafka: KafkaResource, secret: str, markers: dict[str, str]) -> dg.JobDefinition:
    """A job that shows the resolved secret reached the resource, then deliberately writes the markers
    (and the resource's repr and masked configuration) everywhere a run can write."""

    @dg.op(config_schema={"note": str}, required_resource_keys={"kafka"})
    def report_connection(context) -> Any:  # unannotated: Dagster refuses a string annotation
        resource: KafkaResource = context.resources.kafka
        context.log.info(f"{markers['log']} kafka={resource!r} shown={resource.describe_config()}")
        print(markers["stdout"], flush=True)
        metadata = {"marker": markers["metadata"], "kafka": dg.MetadataValue.json(resource.describe_config())}
        yield dg.AssetMaterialization(asset_key="cohort_secrets_probe", metadata=metadata)
        yield dg.Output(resource.client_config()["sasl.password"] == secret, metadata=metadata)

    @dg.job(name="cohort_secrets_probe", resource_defs={"kafka": kafka})
    def probe() -> None:
        report_connection()

    return probe


def _step_errors(result: dg.ExecuteInProcessResult) -> str:
    return "\n".join(e.step_failure_data.error.to_string() for e in result.all_events if e.is_step_failure)


def test_sasl_password_from_env_var_appears_nowhere(
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    produce_records: Any,
) -> None:
    secret = f"sasl-secret-{secrets.token_hex(16)}"
    monkeypatch.setenv(SECRET_ENV, secret)
    markers = {k: f"cohort-marker-{k}-{secrets.token_hex(8)}" for k in ("log", "stdout", "tag", "config", "metadata")}
    topic = topic_factory(2)
    produce_records(topic, [(i % 2, f"k{i}".encode(), json.dumps({"id": i}).encode()) for i in range(10)])
    credentials: dict[str, Any] = {
        "bootstrap_servers": kafka_config["bootstrap.servers"],
        "sasl_mechanism": "PLAIN",
        "sasl_username": "cohort",
        "sasl_password": dg.EnvVar(SECRET_ENV),
        "request_timeout_s": 2.0,
    }
    sasl = KafkaResource(security_protocol="SASL_PLAINTEXT", **credentials)
    plain = KafkaResource(security_protocol="PLAINTEXT", **credentials)
    config = CohortConfig(
        CohortGroupResource(
            group=f"secrets-{secrets.token_hex(4)}",
            topics=[topic],
            worker_slots=1,
            store_url=f"sqlite:///{tmp_path / 'cohort.db'}",
            **{"initial_rebalance_delay_s": 0.0},
        ),
        known_topics=(topic,),
        pipeline=PipelineSpec(sink_path=str(tmp_path / "lake"), value_schema=SCHEMA),
        schedule=None,
    )
    spark = SparkResource(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    failing = build_cohort_definitions([config], kafka=sasl, spark=spark)
    working = build_cohort_definitions([config], kafka=plain, spark=spark)
    worker_job, checks_job = TRANSLATOR.get_job_name(config.group), TRANSLATOR.get_checks_job_name(config.group)
    home = tmp_path / "dagster"
    home.mkdir()
    raised: list[BaseException] = []

    with dg.DagsterInstance.local_temp(tempdir=str(home)) as instance:
        # SASL against a broker that cannot authenticate: the worker, the checks and a sensor tick fail
        failed = failing.resolve_job_def(worker_job).execute_in_process(
            run_config=worker_run_config(config, 1), instance=instance, raise_on_error=False
        )
        assert not failed.success
        assert "could not read topic metadata" in _step_errors(failed)
        failed_checks = failing.resolve_job_def(checks_job).execute_in_process(instance=instance, raise_on_error=False)
        assert not failed_checks.success
        assert "KafkaException" in _step_errors(failed_checks)
        sensor = failing.resolve_sensor_def("cohort_topic_sensor")
        with (
            dg.build_sensor_context(instance=instance, resources=failing.resources) as context,
            pytest.raises(Exception, match="could not read topic metadata") as tick,
        ):
            sensor.evaluate_tick(context)
        raised.append(tick.value)

        # the same credentials over PLAINTEXT: a whole batch with the password in every client's config
        worked = working.resolve_job_def(worker_job).execute_in_process(
            run_config=worker_run_config(config, 1), instance=instance, tags={"cohort/probe": markers["tag"]}
        )
        assert len(worked.get_asset_materialization_events()) == 4  # two partitions: topic and landed assets
        audited = working.resolve_job_def(checks_job).execute_in_process(instance=instance)
        assert [e.passed for e in audited.get_asset_check_evaluations()] == [True, True, True]  # offsets, lag, sink
        probe = _probe_job(plain, secret, markers).execute_in_process(
            run_config={"ops": {"report_connection": {"config": {"note": markers["config"]}}}}, instance=instance
        )
        assert probe.output_for_node("report_connection") is True  # the secret did reach the resource

        output = capfd.readouterr()
        scan = scan_instance(instance, [tmp_path])
    scan.add("process output", output.out + output.err)
    scan.add("raised exceptions", "\n".join(_exception_text(e) for e in raised))
    scan.add("resource repr", "\n".join([repr(sasl), str(sasl), repr(plain), json.dumps(sasl.describe_config())]))

    assert scan.find(secret) == set()

    # not vacuous: what was deliberately written is found where it was written
    assert {"event log", "event log messages"} <= scan.find(markers["log"])
    assert {"run tags", "run record", "file runs.db"} <= scan.find(markers["tag"])
    assert "run config" in scan.find(markers["config"])
    assert {"materialization metadata", "output metadata"} <= scan.find(markers["metadata"])
    assert {"compute logs", "process output"} <= scan.find(markers["stdout"])
    assert "failure messages and stack traces" in scan.find("could not read topic metadata")
    assert "raised exceptions" in scan.find("could not read topic metadata")
    assert "process output" in scan.find("SASL PLAIN mechanism handshake failed")  # librdkafka tried the secret
    assert "job snapshot" in scan.find(SECRET_ENV)  # resource config is stored as a reference to the variable
    assert "resource repr" in scan.find(kafka_config["bootstrap.servers"])
    assert "asset check metadata" in scan.find("every partition agrees")
