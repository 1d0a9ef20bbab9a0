"""Create topics and produce sample records: what the demo, `make ui`, the tests and the benchmarks use.

Not part of the data path: a real deployment's topics and producers are its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cohort.common.names import validate_topic_name
from cohort.pipelines.kafka.client import KafkaConfig, read_partition_counts

__all__ = ["create_topic", "partition_counts", "produce"]


def _admin(config: KafkaConfig) -> AdminClient:
    return AdminClient(dict(config))


def create_topic(
    config: KafkaConfig, topic: str, partitions: int, *, exist_ok: bool = False, timeout_s: float = 30.0
) -> None:
    """Create `topic` with `partitions` partitions (replication 1) and wait until it is visible. With `exist_ok`, a
    topic that exists with that many partitions is left as it is (a script that is run twice); with another count
    it is a ValueError naming both."""
    validate_topic_name(topic)
    if partitions < 1:
        raise ValueError(f"a topic needs at least one partition, got {partitions} for {topic!r}")
    admin = _admin(config)  # keep the handle alive until the futures resolve
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=timeout_s)
    for future in futures.values():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            if not (exist_ok and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
            found = partition_counts(config, [topic]).get(topic)
            if found != partitions:
                raise ValueError(f"topic {topic!r} exists with {found} partitions, not {partitions}") from None


def partition_counts(
    config: KafkaConfig, topics: Iterable[str] | None = None, *, timeout_s: float = 10.0
) -> dict[str, int]:
    """Partition count per topic; all non-internal topics when `topics` is None, missing topics omitted."""
    return read_partition_counts(_admin(config), topics, timeout_s=timeout_s)


def produce(
    config: KafkaConfig,
    topic: str,
    records: Iterable[tuple[int, bytes | None, bytes | None]],
    *,
    one_per_batch: bool = False,
    timeout_s: float = 60.0,
) -> int:
    """Produce (partition, key, value) records and wait for every delivery; returns the count delivered.

    An ordinary producer: librdkafka's default batching (`linger.ms` 5, up to 10,000 records a batch), as
    real applications produce. (The embedded broker's high watermark stops at the base offset of each
    partition's last batch; Cohort takes end offsets from a fetch, so it reads such batches in full.)
    `one_per_batch` sends every record in a batch of its own and waits for it (slow): for a test that needs
    the broker to see the records one request at a time.
    """
    producer_config: dict[str, Any] = {**config, "enable.idempotence": False, "acks": "all"}
    if one_per_batch:
        producer_config["linger.ms"] = 0
    producer = Producer(producer_config)
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    count = 0
    for partition, key, value in records:
        count += 1
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        if one_per_batch:
            producer.flush(timeout_s)
        elif count % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(timeout_s)
    if remaining or errors:
        raise KafkaException(
            f"producing to {topic!r}: {remaining} records undelivered, {len(errors)} failed"
            + (f" (first error: {errors[0]})" if errors else "")
        )
    return count
