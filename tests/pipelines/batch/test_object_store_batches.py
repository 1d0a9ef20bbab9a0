"""The Parquet sink on an object store through `run_batch` (real broker, real Spark, the S3 server): each committed
range lands as one object that readers (pyarrow.dataset, DuckDB, Spark through S3A) see whole or not at all; a batch
that dies in its publish is finished by the next batch; a replay replaces its offsets without ever showing one twice;
and a bad configuration (wrong endpoint, wrong keys, missing bucket, no write permission) fails the batch before
anything is read or committed, in one line that names the cause and never the secret.

Before the object-store publish, a batch on an `s3://` root committed its ranges and then failed its publish
(pyarrow cannot move a directory on S3), so every test here that lands data fails on that code.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.storage.preflight import ObjectStoreError
from cohort.pipelines.tasks.writer import ArrowFs
from harness.s3_server import S3Credentials
from tests.fixtures.s3 import S3Bucket
from tests.support.object_store import arrow_offsets, duckdb_offsets, spark_environ, spark_offsets
from tests.support.orders import ORDER_SCHEMA, order


def _spec(root: str, **settings: Any) -> PipelineSpec:
    return PipelineSpec(sink_path=root, value_schema=ORDER_SCHEMA, **settings)


def test_a_batch_lands_each_range_as_one_object_that_readers_see_once(
    spark: Any, kafka_config: dict[str, Any], topic_factory: Any, produce_records: Any, ledger: Any, s3_env: S3Bucket
) -> None:
    topic = topic_factory(2)
    values = [order(i) for i in range(60)]
    values[7] = b"{not json"
    produce_records(topic, [(i % 2, None, v) for i, v in enumerate(values)])
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = _spec(s3_env.root, max_records_per_task=10)  # three reading tasks per partition: three staged files
    with spark_environ(spark):
        result = run_batch(spark, spec, kafka_config, tps, ledger, run_id="first")
    assert (result.records, result.quarantined) == (59, 1)
    expected = sorted((topic, i % 2, i // 2) for i in range(60) if i != 7)
    assert arrow_offsets(s3_env.root) == expected
    assert duckdb_offsets(s3_env.root) == expected
    assert spark_offsets(s3_env.root) == expected
    assert arrow_offsets(spec.quarantine_root) == [(topic, 1, 3)]
    for p in (0, 1):
        prefix = f"lake/topic={topic}/partition={p}/{topic}-{p}-0-30.parquet/"
        data = [k for k in s3_env.object_keys(prefix) if not k.rsplit("/", 1)[1].startswith("_")]
        assert data == [f"{prefix}part-0-30.parquet"]
    staging = [k for k in s3_env.object_keys("lake/_staging/") if not k.endswith("/")]  # not pyarrow's folder marks
    assert staging == [], "the batch deleted its staging"


def test_a_batch_dying_between_two_copies_is_finished_by_the_next_batch(
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    produce_records: Any,
    ledger: Any,
    s3_env: S3Bucket,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The batch's first range is copied into place, then it dies: readers see that range whole and nothing of the
    other; the next batch (another run) publishes the other from the dead run's staging before it reads."""
    topic = topic_factory(2)
    produce_records(topic, [(i % 2, None, order(i)) for i in range(40)])
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    copy = ArrowFs.copy_file

    def copy_then_die(self: ArrowFs, source: str, target: str) -> None:
        copy(self, source, target)
        raise SystemExit("killed after the first copy into place")

    monkeypatch.setattr(ArrowFs, "copy_file", copy_then_die)
    with spark_environ(spark), pytest.raises(SystemExit):
        run_batch(spark, _spec(s3_env.root), kafka_config, tps, ledger, run_id="died")
    assert ledger.committed_offsets(tps) == dict.fromkeys(tps, 20)
    assert arrow_offsets(s3_env.root) == [(topic, 0, o) for o in range(20)]  # one range whole, the other not at all

    monkeypatch.setattr(ArrowFs, "copy_file", copy)
    with spark_environ(spark):
        result = run_batch(spark, _spec(s3_env.root), kafka_config, tps, ledger, run_id="next")
    assert result.committed == () and all(p.warning is None for p in result.partitions)
    assert arrow_offsets(s3_env.root) == sorted((topic, i % 2, i // 2) for i in range(40))


def test_a_replay_on_s3_replaces_its_offsets_and_never_shows_one_twice(
    spark: Any,
    kafka_config: dict[str, Any],
    topic: str,
    produce_records: Any,
    coordinator: Any,
    ledger: Any,
    group: str,
    s3_env: S3Bucket,
) -> None:
    tp = TopicPartition(topic, 0)
    produce_records(topic, [(0, None, order(i)) for i in range(100)])
    with spark_environ(spark):
        for run in ("first", "second", "third"):  # [0, 40), [40, 80), [80, 100)
            run_batch(spark, _spec(s3_env.root, max_records_per_partition=40), kafka_config, [tp], ledger, run_id=run)
        coordinator.reset_offsets(group, {tp: 30}, actor="test", reason="replay on S3")
        looks: list[list[int]] = []
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                with contextlib.suppress(OSError, ValueError):  # listed, then deleted before it was read: retried
                    looks.append([o for _t, _p, o in arrow_offsets(s3_env.root)])

        reader = threading.Thread(target=poll, daemon=True)
        reader.start()
        try:
            result = run_batch(spark, _spec(s3_env.root), kafka_config, [tp], ledger, run_id="replay")
        finally:
            stop.set()
            reader.join()
    (part,) = result.partitions
    assert (part.from_offset, part.until_offset, part.records) == (30, 100, 70)
    assert looks and all(len(look) == len(set(look)) for look in looks), "a reader saw an offset twice"
    assert [o for _t, _p, o in arrow_offsets(s3_env.root)] == list(range(100))
    assert [o for _t, _p, o in spark_offsets(s3_env.root)] == list(range(100))
    partition = f"lake/topic={topic}/partition=0/"
    dirs = sorted({k.removeprefix(partition).split("/", 1)[0] for k in s3_env.object_keys(partition)} - {""})
    assert dirs == [f"{topic}-0-0-30.parquet", f"{topic}-0-30-100.parquet"]


def _bad(s3_env: S3Bucket, case: str) -> tuple[dict[str, str], str, str]:
    """The environment, root and expected cause of one bad configuration."""
    server, good = s3_env.server, s3_env.server.environ()
    if case == "wrong endpoint":
        return {**good, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, s3_env.root, "cannot reach the S3 endpoint"
    if case == "wrong access key":
        keys = S3Credentials("AKIAUNKNOWNUNKNOWN00", server.credentials.secret_access_key)
        return server.environ(keys), s3_env.root, "does not know the access key: check AWS_ACCESS_KEY_ID"
    if case == "wrong secret":
        keys = S3Credentials(server.credentials.access_key_id, "not-the-secret-" + "x" * 25)
        return server.environ(keys), s3_env.root, "refused the signature: check AWS_SECRET_ACCESS_KEY"
    if case == "missing bucket":
        return good, f"s3://{s3_env.name}-missing/lake", "does not exist"
    read_only = server.create_bucket(f"{s3_env.name[:40]}-ro", writable=False)
    return good, f"s3://{read_only}/lake", "access denied: the keys may not write under"


@pytest.mark.parametrize("case", ["wrong endpoint", "wrong access key", "wrong secret", "missing bucket", "no write"])
def test_a_bad_object_store_configuration_fails_the_batch_before_anything_commits(
    case: str,
    spark: Any,
    kafka_config: dict[str, Any],
    topic: str,
    produce_records: Any,
    ledger: Any,
    s3_env: S3Bucket,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    environ, root, cause = _bad(s3_env, case)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    produce_records(topic, [(0, None, order(i)) for i in range(5)])
    tp = TopicPartition(topic, 0)
    started = time.monotonic()
    with spark_environ(spark), pytest.raises(ObjectStoreError) as refused:
        run_batch(spark, _spec(root), kafka_config, [tp], ledger, run_id="bad")
    message = str(refused.value)
    assert time.monotonic() - started < 60
    assert cause in message and root in message and "\n" not in message, message
    assert environ["AWS_SECRET_ACCESS_KEY"] not in message
    assert ledger.committed_offsets([tp]) == {tp: None}


def test_a_replay_dying_inside_its_window_is_finished_by_the_next_batch(
    spark: Any,
    kafka_config: dict[str, Any],
    topic: str,
    produce_records: Any,
    coordinator: Any,
    ledger: Any,
    group: str,
    s3_env: S3Bucket,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The replay dies right after deleting the first range directory it replaces: readers miss offsets (never see
    one twice); the next batch, with nothing new to read, finishes the replay in its complete step."""
    tp = TopicPartition(topic, 0)
    produce_records(topic, [(0, None, order(i)) for i in range(60)])
    with spark_environ(spark):
        for run in ("first", "second"):  # [0, 30), [30, 60)
            run_batch(spark, _spec(s3_env.root, max_records_per_partition=30), kafka_config, [tp], ledger, run_id=run)
        coordinator.reset_offsets(group, {tp: 20}, actor="test", reason="replay killed in its window")
        delete = ArrowFs.delete

        def delete_then_die(self: ArrowFs, uri: str) -> None:
            delete(self, uri)
            if "/_staging/" not in uri and uri.endswith(".parquet"):
                raise SystemExit("killed after deleting a replaced range directory")

        monkeypatch.setattr(ArrowFs, "delete", delete_then_die)
        with pytest.raises(SystemExit):
            run_batch(spark, _spec(s3_env.root), kafka_config, [tp], ledger, run_id="replay")
        seen = [o for _t, _p, o in arrow_offsets(s3_env.root)]
        assert len(seen) == len(set(seen)) and seen != list(range(60))  # in the window: missing, never twice
        monkeypatch.setattr(ArrowFs, "delete", delete)
        result = run_batch(spark, _spec(s3_env.root), kafka_config, [tp], ledger, run_id="next")
    assert result.committed == ()
    assert [o for _t, _p, o in arrow_offsets(s3_env.root)] == list(range(60))
    partition = f"lake/topic={topic}/partition=0/"
    dirs = sorted({k.removeprefix(partition).split("/", 1)[0] for k in s3_env.object_keys(partition)} - {""})
    assert dirs == [f"{topic}-0-0-20.parquet", f"{topic}-0-20-60.parquet"]


def test_a_zombie_batch_never_replaces_output_committed_after_it_was_planned(
    spark: Any, kafka_config: dict[str, Any], topic: str, produce_records: Any, sqlite_url: str, s3_env: S3Bucket
) -> None:
    """test_zombies.py's stale batch on S3: inside its transform a new instance of its slot joins (fencing it),
    reads, commits and publishes the same offsets; the stale batch is refused at the ledger and touches nothing."""
    from cohort.assignment.coordinator import Coordinator
    from cohort.assignment.errors import FencedInstanceIdError
    from cohort.assignment.member import GroupMember
    from cohort.assignment.protocol.group_state import GroupConfig
    from cohort.assignment.settings import MemberSettings

    produce_records(topic, [(0, None, order(i)) for i in range(12)])
    tp = TopicPartition(topic, 0)
    coordinator = Coordinator.from_url(sqlite_url, config=GroupConfig(initial_rebalance_delay=0.0))
    group, instance_id = "zombie-s3", "zombie-s3/worker-1"

    def slot_member() -> GroupMember:
        settings = MemberSettings(topics=(topic,), session_timeout=30.0)
        return GroupMember(coordinator, group, settings, instance_id=instance_id, topic_metadata=lambda: {topic: 1})

    successor: dict[str, Any] = {}

    def the_group_moves_on(frame: Any) -> Any:
        with slot_member() as replacement:  # same instance id: the old member is fenced
            successor["result"] = run_batch(spark, _spec(s3_env.root), kafka_config, [tp], replacement)
        return frame

    zombie = slot_member()
    try:
        assert zombie.join() == (tp,)
        with spark_environ(spark), pytest.raises(FencedInstanceIdError):
            run_batch(spark, _spec(s3_env.root, transform=the_group_moves_on), kafka_config, [tp], zombie)
    finally:
        zombie.close(leave=False)
        coordinator.close()
    assert successor["result"].records == 12
    assert [o for _t, _p, o in arrow_offsets(s3_env.root)] == list(range(12))
    data = [k for k in s3_env.object_keys("lake/topic=") if k.endswith(".parquet") and "/_" not in k]
    assert data == [f"lake/topic={topic}/partition=0/{topic}-0-0-12.parquet/part-0-12.parquet"]
