"""What Kafka sees of a Cohort group, on Apache Kafka (the embedded broker lists no members and drops commit metadata:
README), while a Dagster run holds the group and after it (docs/protocol.md, "What Kafka sees of a Cohort group").

Cohort's members live in its own store: no run joins Kafka's group, whose coordinator knows the group only by the
offsets the Kafka mirror commits (an OffsetCommit that joins nothing, with the run id as each partition's metadata). So
`describe_consumer_groups` shows no member and no assignor even while Cohort's coordinator has the run's member in a
Stable generation: a group that never committed is unknown to Kafka (Dead, not listed), one that did is an Empty
classic group with an empty protocol type (a "simple" consumer group). `list_consumer_group_offsets` answers each
partition's committed offset with, as its metadata, the id of the last run that mirrored it: the run that committed
the range, or a later batch that read nothing there and mirrored the ledger's head again. The readers' consumers
(group id `cohort-reader-<topic>`, assigned, never committing) leave no group behind.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from cohort.assets.translator import DagsterCohortTranslator
from cohort.assignment.protocol.group_state import GroupState
from cohort.pipelines.batch.run import run_batch
from harness.dagster_group import config_for, definitions_for, json_records
from harness.kafka_broker import run_kafka_tool
from tests.support.kafka_records import require_kafka

T = DagsterCohortTranslator()


@dataclass(frozen=True)
class KafkaView:
    """One group as Kafka's AdminClient shows it."""

    state: str  # describe_consumer_groups' state: DEAD (unknown to Kafka), EMPTY...
    members: tuple[str, ...]
    assignor: str
    simple: bool  # an empty protocol type: a group only ever committed to, never joined
    kind: str  # CLASSIC or CONSUMER (KIP-848)
    listed: str | None  # its state in list_consumer_groups; None when not listed
    offsets: dict[int, tuple[int, str]]  # partition -> (committed offset, metadata), committed partitions only


_COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
}


def _answer(call: Any) -> Any:
    """A future's result, asked again while the coordinator moves or loads (NOT_COORDINATOR on a broker whose
    __consumer_offsets topic is being created by a group's first use)."""
    for attempt in range(60):
        try:
            return call().result(timeout=15)
        except KafkaException as exc:
            error = exc.args[0]
            if attempt == 59 or not (error.retriable() or error.code() in _COORDINATOR_MOVING):
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def kafka_view(config: dict[str, Any], group: str) -> KafkaView:
    admin = AdminClient(config)  # the handle lives until the futures resolve
    described = _answer(lambda: admin.describe_consumer_groups([group])[group])
    listed = _answer(lambda: admin.list_consumer_groups())
    offsets = _answer(lambda: admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group])
    states = {g.group_id: g.state.name for g in listed.valid}
    return KafkaView(
        state=described.state.name,
        members=tuple(m.member_id for m in described.members),
        assignor=described.partition_assignor,
        simple=described.is_simple_consumer_group,
        kind=described.type.name,
        listed=states.get(group),
        offsets={tp.partition: (tp.offset, tp.metadata) for tp in offsets.topic_partitions if tp.offset >= 0},
    )


def test_kafka_sees_an_empty_group_without_members_whose_offsets_carry_the_run_ids(
    make_setup, topic_factory, produce_records, kafka_config, instance, spark
):
    # `spark`: the session's Spark, which the runs share (a run stops only a session it started)
    require_kafka("commit metadata")
    topic = topic_factory(2, suffix="view")
    produce_records(topic, json_records(20, 2))
    setup = make_setup((topic,), slots=1, settings={"initial_rebalance_delay_s": 0.0})
    config = config_for(setup)
    coordinator = config.group_resource.get_coordinator()
    during: list[tuple[GroupState, list[tuple[str | None, str | None]], KafkaView]] = []

    def batch(spark: Any, spec: Any, kafka: Any, partitions: Any, ledger: Any, **kwargs: Any) -> Any:
        """The worker's batch, after a look at both coordinators while the run's member holds its partitions."""
        ours = coordinator.describe_group(config.group)
        members = [(m.instance_id, m.client_id) for m in ours.members]
        during.append((ours.state, members, kafka_view(kafka_config, config.group)))
        return run_batch(spark, spec, kafka, partitions, ledger, **kwargs)

    job = definitions_for(setup, runner=batch).resolve_job_def(T.get_job_name(config.group))
    worker = f"{config.group}/worker-1"

    first = job.execute_in_process(instance=instance)
    assert first.success
    [(state, members, kafka)] = during
    assert (state, members) == (GroupState.STABLE, [(worker, first.run_id)]), "Cohort: the run's member, Stable"
    assert (kafka.state, kafka.members, kafka.listed, kafka.offsets) == ("DEAD", (), None, {}), "Kafka: no such group"

    after = kafka_view(kafka_config, config.group)
    assert after == KafkaView("EMPTY", (), "", True, "CLASSIC", "EMPTY", {0: (10, first.run_id), 1: (10, first.run_id)})

    produce_records(topic, json_records(10, 2))
    second = job.execute_in_process(instance=instance)
    assert second.success
    (state, members, kafka) = during[-1]
    assert (state, members) == (GroupState.STABLE, [(worker, second.run_id)])
    assert kafka == after, "Kafka: the same Empty group, the first run's commits, while the second run holds it"

    assert kafka_view(kafka_config, config.group) == KafkaView(
        "EMPTY", (), "", True, "CLASSIC", "EMPTY", {0: (15, second.run_id), 1: (15, second.run_id)}
    )
    assert coordinator.describe_group(config.group).state is GroupState.EMPTY  # both coordinators agree, between runs

    # a batch with nothing to read commits nothing to the ledger, but mirrors the ledger's heads again: the metadata
    # names the last run that wrote Kafka's committed offset, not the run whose range the ledger ends with
    idle = job.execute_in_process(instance=instance)
    assert idle.success
    assert kafka_view(kafka_config, config.group).offsets == {0: (15, idle.run_id), 1: (15, idle.run_id)}
    heads = [[*coordinator.ledger_history(config.group, topic, p)][-1] for p in (0, 1)]
    assert [(e.until_offset, e.run_id) for e in heads] == [(15, second.run_id), (15, second.run_id)]
    admin = AdminClient(kafka_config)
    groups = {g.group_id for g in _answer(lambda: admin.list_consumer_groups()).valid}
    assert config.group in groups
    assert not {f"cohort-reader-{topic}", "cohort-watermarks", "cohort-offsets"} & groups, "readers, probes: no group"

    # what an operator sees with Kafka's own tool: an Empty group without members or assignor
    tool = run_kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        ["--bootstrap-server", kafka_config["bootstrap.servers"], "--describe", "--group", config.group, "--state"],
    )
    assert tool.returncode == 0 and "Error" not in tool.stdout, tool.stdout + tool.stderr[-2000:]
    lines = [line.split() for line in tool.stdout.splitlines()]
    [header] = [cells for cells in lines if cells[:1] == ["GROUP"]]
    [row] = [cells for cells in lines if cells[:1] == [config.group]]
    assert (header[-3:], row[-3:]) == (["ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"], ["-", "Empty", "0"]), tool.stdout
    assert f"Consumer group '{config.group}' has no active members." in tool.stderr
    coordinator.close()
