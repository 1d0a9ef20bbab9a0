"""Dagster resources: Kafka (confluent-kafka clients), the consumer group (coordinator + assignor), Spark, and
the Schema Registry of the Avro, Protobuf and JSON Schema formats.

`cohort.devtools.embedded_broker` starts the embedded Tansu broker the Kafka resource points at by default in the
demo and the tests.
"""

from cohort.resources.group import DEFAULT_STORE_URL, CohortGroupResource
from cohort.resources.kafka import KafkaResource, redact
from cohort.resources.schema_registry import SchemaRegistryResource
from cohort.resources.spark import SparkResource

__all__ = [
    "DEFAULT_STORE_URL",
    "CohortGroupResource",
    "KafkaResource",
    "SchemaRegistryResource",
    "SparkResource",
    "redact",
]
