"""Spark's own Kafka source (`spark.read.format("kafka")`, `readStream`) and `from_avro`, for the benchmarks and tests.

harness/spark_kafka/pom.xml pins the connector; `spark_kafka_jars()` returns the jars to add to a session
(`spark.jars`): the connector and what it needs that PySpark does not ship (kafka-clients, commons-pool2, the token
provider), never a second copy of a jar PySpark has (Scala, Hadoop, snappy ...).

`python -m harness.spark_kafka` resolves them and prints their paths, comma-separated (`make kafka-jars`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from harness.maven_jars import cached_jars

__all__ = ["POM", "spark_jars_conf", "spark_kafka_jars"]

POM = Path(__file__).resolve().parent / "spark_kafka" / "pom.xml"
_VERSIONED = re.compile(r"^(?P<name>.+?)-\d[\w.\-]*\.jar$")


def _artifact(jar: Path) -> str:
    found = _VERSIONED.match(jar.name)
    return found.group("name") if found else jar.stem


def _pyspark_artifacts() -> set[str]:
    import pyspark

    return {_artifact(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


def spark_kafka_jars(*, offline: bool = False) -> list[Path]:
    """The connector's jars PySpark lacks, sorted; resolved by Maven once (harness/maven_jars.py)."""
    shipped = _pyspark_artifacts()
    folder = cached_jars(POM, "spark-kafka-jars", offline=offline)
    return sorted(jar for jar in folder.glob("*.jar") if _artifact(jar) not in shipped)


def spark_jars_conf(*, offline: bool = False) -> dict[str, str]:
    """`{"spark.jars": ...}` for a session that reads Kafka with Spark's own source."""
    return {"spark.jars": ",".join(str(jar) for jar in spark_kafka_jars(offline=offline))}


if __name__ == "__main__":
    print(",".join(str(jar) for jar in spark_kafka_jars(offline="--offline" in sys.argv[1:])))
