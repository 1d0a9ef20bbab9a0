"""The vocabulary every layer shares: topic partitions, offset ranges, the ledger and mirror interfaces, names.

Standard library only, so the coordinator (`cohort.assignment`), the data path (`cohort.pipelines`, down to
the reading tasks on Spark executors) and the Dagster code (`cohort.assets`) can all import it without
loading one another's dependencies.

Example:
    >>> from cohort.common import OffsetRange, TopicPartition
    >>> OffsetRange("orders", 0, 10, 25, records=15).topic_partition == TopicPartition("orders", 0)
    True
"""

from cohort.common.ledger import OffsetLedger, OffsetMirror
from cohort.common.names import InvalidNameError, validate_group_name, validate_instance_id, validate_topic_name
from cohort.common.types import OffsetRange, TopicPartition

__all__ = [
    "InvalidNameError",
    "OffsetLedger",
    "OffsetMirror",
    "OffsetRange",
    "TopicPartition",
    "validate_group_name",
    "validate_instance_id",
    "validate_topic_name",
]
