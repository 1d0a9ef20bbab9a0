"""Spark's own Kafka source (`spark.read.format("kafka")`, `readStream`) and `from_avro`, for the benchmarks and tests.

harness/spark_kafka/pom.xml pins the connector; `spark_kafka_jars()` returns the jars to add to a session
(`spark.jars`): the connector and what it needs that PySpark does not ship (kafka-clients, commons-pool2, the token
provider), never a second copy of a jar PySpark has (Scala, Hadoop, snappy ...).

`python -m harness.spark_kafka` resolves them and prints their paths, comma-separated (`make kafka-jars`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.maven_jars import cached_jars, jars_pyspark_lacks

__all__ = ["POM", "spark_jars_conf", "spark_kafka_jars"]

POM = Path(__file__).resolve().parent / "spark_kafka" / "pom.xml"


def spark_kafka_jars(*, offline: bool = False) -> list[Path]:
    """The connector's jars PySpark lacks, sorted; resolved by Maven once (harness/maven_jars.py)."""
    return jars_pyspark_lacks(cached_jars(POM, "spark-kafka-jars", offline=offline))


def spark_jars_conf(*, offline: bool = False) -> dict[str, str]:
    """`{"spark.jars": ...}` for a session that reads Kafka with Spark's own source."""
    return {"spark.jars": ",".join(str(jar) for jar in spark_kafka_jars(offline=offline))}


if __name__ == "__main__":
    print(",".join(str(jar) for jar in spark_kafka_jars(offline="--offline" in sys.argv[1:])))
