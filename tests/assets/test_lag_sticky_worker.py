"""A Dagster batch of a group on `lag-sticky` (real broker, Spark, store, instance): the leader's sync sees each
partition's backlog through the worker's Kafka resource, so the slot given the one heavy partition gets it alone
and the other slot takes the light ones (count balance would pair the heavy partition with a light one)."""

from __future__ import annotations

import json
from collections import defaultdict

from cohort.assets.translator import DagsterCohortTranslator
from harness.dagster_group import config_for, definitions_for

T = DagsterCohortTranslator()


def test_the_heavy_partition_gets_a_slot_of_its_own(make_setup, topic_factory, produce_records, instance):
    topic = topic_factory(4, suffix="skewed")
    sizes = {0: 60, 1: 5, 2: 5, 3: 5}
    produce_records(
        topic,
        [
            (p, f"k{i}".encode(), json.dumps({"id": i, "kind": "view"}).encode())
            for p, n in sizes.items()
            for i in range(n)
        ],
    )
    setup = make_setup((topic,), slots=2, settings={"initial_rebalance_delay_s": 3.0, "assignors": ["lag-sticky"]})
    config = config_for(setup)
    job = definitions_for(setup).resolve_job_def(T.get_job_name(config.group))
    assert job.execute_in_process(instance=instance).success  # one run hosting both slots

    coordinator = config.group_resource.get_coordinator()
    by_slot: dict[str, set[int]] = defaultdict(set)
    for p in sizes:
        for entry in coordinator.ledger_history(config.group, topic, p):
            assert entry.instance_id is not None
            by_slot[entry.instance_id].add(p)
    assert sorted(map(sorted, by_slot.values())) == [[0], [1, 2, 3]], dict(by_slot)
