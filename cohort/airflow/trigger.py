"""The trigger that reruns a group's slots from Airflow's triggerer: an asset watcher over the group's store.

`GroupWatchTrigger` runs in the triggerer (it is importable from the installed package, as the triggerer
needs), looks at the group every `poll_interval_s` (`cohort.airflow.watch.GroupWatch`: members removed while
they held work, partition counts of the subscribed topics) and yields one `TriggerEvent` per claimed signal,
whose payload names the slots to run. Attached to the group's signal asset (`cohort.airflow.dag`), each event
becomes an asset event that schedules the group's DAG, whose first task reads the slots from it.

Its kwargs hold the group's settings and the name of the Kafka connection, never a secret: a store URL with a
password is read from the environment variable `store_url_env` names (in the triggerer's environment).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from cohort.airflow.connection import config_from_extra, store_url_from_env
from cohort.airflow.watch import GroupWatch
from cohort.assignment.worker_group import WorkerGroup

__all__ = ["GroupWatchTrigger", "group_settings", "worker_group_of"]


def group_settings(group: WorkerGroup, *, store_url_env: str | None = None) -> dict[str, Any]:
    """The group's settings as trigger kwargs (plain JSON): without the store URL when it comes from the environment."""
    settings = asdict(group)
    settings["topics"] = list(group.topics)
    settings["assignors"] = list(group.assignors)
    if store_url_env:
        del settings["store_url"]
    return settings


def worker_group_of(settings: dict[str, Any], store_url_env: str | None) -> WorkerGroup:
    """Inverse of `group_settings`, the store URL read from `store_url_env` when given."""
    values = dict(settings)
    values["topics"] = tuple(values.get("topics", ()))
    values["assignors"] = tuple(values.get("assignors", ()))
    if store_url_env:
        values["store_url"] = store_url_from_env(store_url_env)
    return WorkerGroup(**values)


class GroupWatchTrigger(BaseEventTrigger):
    """Watches one group's store and Kafka metadata; yields the slots to run (see the module doc)."""

    def __init__(
        self,
        group: dict[str, Any],
        kafka_conn_id: str,
        *,
        store_url_env: str | None = None,
        poll_interval_s: float = 10.0,
    ) -> None:
        super().__init__()
        self.group = group
        self.kafka_conn_id = kafka_conn_id
        self.store_url_env = store_url_env
        self.poll_interval_s = poll_interval_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "cohort.airflow.trigger.GroupWatchTrigger",
            {
                "group": self.group,
                "kafka_conn_id": self.kafka_conn_id,
                "store_url_env": self.store_url_env,
                "poll_interval_s": self.poll_interval_s,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow.sdk import Connection

        from cohort.runtime.kafka_access import KafkaAccess

        group = worker_group_of(self.group, self.store_url_env)
        connection = await Connection.async_get(self.kafka_conn_id)
        kafka = KafkaAccess(config_from_extra(self.kafka_conn_id, connection.extra_dejson))

        def counts() -> dict[str, int]:
            return kafka.subscribed_partition_counts(group.topics, group.topic_pattern)

        coordinator = group.open_coordinator()
        watch = GroupWatch(group, coordinator, counts, holder=f"airflow-triggerer:{socket.gethostname()}:{os.getpid()}")
        try:
            while True:
                for signal in await asyncio.to_thread(watch.poll):
                    self.log.info("group %r: %s: running slots %s", group.group, signal.reason, list(signal.slots))
                    yield TriggerEvent(signal.payload())
                await asyncio.sleep(self.poll_interval_s)
        finally:
            coordinator.close()
            kafka.close()
