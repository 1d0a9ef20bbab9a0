"""Eight processes hammering one group on SQLite and on a real PostgreSQL: no lost update, no double owner."""

from __future__ import annotations

import multiprocessing
from collections import defaultdict

import pytest

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.store.sql import SqlGroupStore
from cohort.common.types import TopicPartition
from tests.assignment.store.contention_worker import GROUP, TOPIC, run_worker

PROCESSES = 8
PARTITIONS = 12


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
@pytest.mark.timeout(180)
def test_eight_processes_on_one_group(backend: str, request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url"))
    setup = Coordinator(SqlGroupStore.from_url(url))
    setup.report_topic_metadata(GROUP, {TOPIC: PARTITIONS})
    context = multiprocessing.get_context("spawn")
    with context.Pool(PROCESSES) as pool:
        results = pool.starmap(run_worker, [(url, i, 2.0, ("cooperative-sticky", "range")) for i in range(PROCESSES)])

    # No lost update: every accepted commit is in the ledger, each partition's history is exactly the
    # contiguous sequence of accepted one-offset ranges, and the committed offset is its end.
    accepted = [entry for result in results for entry in result["accepted"]]
    assert len(accepted) > 50, "the workers should have committed a fair amount"
    by_partition: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for partition, start, member_id in accepted:
        by_partition[partition].append((start, member_id))
    heads = setup.fetch_offsets(GROUP, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    for partition in range(PARTITIONS):
        history = setup.ledger_history(GROUP, TOPIC, partition)
        assert [(e.from_offset, e.until_offset) for e in history] == [(i, i + 1) for i in range(len(history))]
        assert sorted(by_partition[partition]) == sorted((e.from_offset, e.member_id) for e in history)
        assert heads[TopicPartition(TOPIC, partition)] == (len(history) or None)
        # One committer per partition and generation: the generation's owner.
        owners: dict[int, set[str | None]] = defaultdict(set)
        for entry in history:
            owners[entry.generation].add(entry.member_id)
        assert all(len(members) == 1 for members in owners.values())

    # No double ownership: within a generation, the assignments members received are disjoint.
    per_generation: dict[int, dict[tuple[str, int], str]] = defaultdict(dict)
    for result in results:
        for generation, member_id, partitions in result["syncs"]:
            for topic, partition in partitions:
                holder = per_generation[generation].setdefault((topic, partition), member_id)
                assert holder == member_id, f"{topic}-{partition} held by {holder} and {member_id} in {generation}"
    assert len(per_generation) >= 2, "churn should have caused several generations"
    final = setup.describe_group(GROUP)
    owned = [p for m in final.members for p in m.owned]
    assert len(owned) == len(set(owned))
    setup.close()
