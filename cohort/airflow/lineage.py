"""The Airflow audit trail of a slot's batch: one asset event per consumed topic partition.

Each topic is an Airflow asset named as Airflow's Kafka assets are, `kafka://<bootstrap server>/<topic>`; a
slot's task emits one event per topic partition it consumed, its `extra` the range's record
(`cohort.runtime.lineage.ConsumedRange`: `cohort/partition`, `cohort/from_offset`, `cohort/until_offset`,
`cohort/records`, `cohort/quarantined`, `cohort/lag_after`, ...). Several events for one asset from one task
go through the group's asset alias (`cohort-<group>`): an asset's own outlet accessor merges extras into one
event, an alias emits one per distinct extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Asset, AssetAlias

from cohort.runtime.lineage import ConsumedRange

__all__ = ["emit", "group_alias", "topic_asset", "topic_uri"]


def topic_uri(bootstrap: str, topic: str) -> str:
    """`kafka://<bootstrap>/<topic>`, as Airflow's Kafka provider names a topic."""
    return f"kafka://{bootstrap}/{topic}"


def topic_asset(bootstrap: str, topic: str) -> Asset:
    """The topic's Airflow asset."""
    uri = topic_uri(bootstrap, topic)
    return Asset(name=uri, uri=uri, group="kafka")


def group_alias(group: str) -> AssetAlias:
    """The alias a group's slot tasks emit their topics' events through."""
    return AssetAlias(name=f"cohort-{group}")


def emit(outlet_events: Any, group: str, bootstrap: str, ranges: Sequence[ConsumedRange]) -> int:
    """Add one event per consumed range to the task's outlet events; returns how many."""
    alias = group_alias(group)
    for consumed in ranges:
        outlet_events[alias].add(topic_asset(bootstrap, consumed.topic), extra=consumed.as_extra())
    return len(ranges)
