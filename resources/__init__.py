"""Dagster resources: Kafka (confluent-kafka clients), the consumer group (coordinator + assignor), Spark.

`resources.embedded_broker` starts the embedded Tansu broker the Kafka resource points at by default in the
demo and the tests.
"""

from resources.group import DEFAULT_STORE_URL, CohortGroupResource
from resources.kafka import KafkaResource, redact
from resources.spark import SparkResource

__all__ = ["DEFAULT_STORE_URL", "CohortGroupResource", "KafkaResource", "SparkResource", "redact"]
