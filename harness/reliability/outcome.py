"""What a fault scenario leaves behind, measured the same way for every fault (SIGKILL, SIGSTOP, broker).

`audit_delivery` reads the sink and the quarantine back and compares them with what was produced (every
offset of every partition, 0 .. count-1): records lost, records written twice; then audits the ledger against
Kafka's committed offsets (and, given a Dagster instance, against the materializations) with
`cohort.assets.audit.gather_audits`. A Parquet sink is read with Spark; a table sink (Delta Lake, Iceberg) with
its format's own reader (harness.tables), and its sink table counted a second time by DuckDB over the
table's Arrow data. `FaultOutcome` is one row of benchmarks/RELIABILITY.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import functions as F

from cohort.assets.audit import PartitionAudit, gather_audits
from cohort.assets.translator import DagsterCohortTranslator
from cohort.assignment.coordinator import Coordinator
from cohort.pipelines.spec import PipelineSpec

__all__ = [
    "DeliveryAudit",
    "FaultOutcome",
    "audit_delivery",
    "duckdb_table_offsets",
    "object_offsets",
    "sink_offsets",
    "table_offsets",
]


@dataclass(frozen=True)
class DeliveryAudit:
    """Produced records against what the sink and the quarantine hold, and the offset audit."""

    produced: int
    in_sink: int
    quarantined: int
    lost: int
    duplicated: int
    problems: tuple[str, ...]
    reader: str = "spark"
    """What read the outputs: "spark" (Parquet), "pyarrow" (Parquet on an object store), or the table format's own
    reader ("deltalake", "pyiceberg")."""
    duckdb_lost: int | None = None
    duckdb_duplicated: int | None = None
    """A table sink's (or an object store's Parquet sink's) lost and duplicated counted again with the sink's rows as
    DuckDB reads them."""

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing twice, ledger contiguous and equal to Kafka's committed offsets."""
        recount = (self.duckdb_lost or 0, self.duckdb_duplicated or 0)
        return self.lost == 0 and self.duplicated == 0 and recount == (0, 0) and not self.problems


@dataclass(frozen=True)
class FaultOutcome:
    """One row of the reliability matrix."""

    fault: str  # "SIGKILL", "SIGSTOP (zombie)", "broker down", "wrong bootstrap", ...
    point: str  # where the fault hit, e.g. "after sink write, before ledger commit"
    assignor: str  # "sticky" (eager) or "cooperative-sticky"
    produced: int
    lost: int
    duplicated: int
    recovered_s: float
    problems: tuple[str, ...] = ()
    sink: str = "parquet"  # the sink's format: "parquet", "delta" or "iceberg"

    def row(self) -> str:
        """The markdown table row."""
        return (
            f"| {self.fault} | {self.point} | {self.assignor} | {self.produced} | {self.lost} | {self.duplicated} "
            f"| {self.recovered_s:.1f} |"
        )

    def sink_row(self) -> str:
        """The markdown table row with the sink's format first (the table sinks' matrix)."""
        return (
            f"| {self.sink} | {self.fault} | {self.point} | {self.assignor} | {self.produced} | {self.lost} "
            f"| {self.duplicated} | {self.recovered_s:.1f} |"
        )


def object_offsets(root: str, *, duckdb: bool = False) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every row under a Parquet root on an object store (`s3://`), as
    pyarrow.dataset reads it (skipping names that start with _ or .), or with `duckdb` as DuckDB counts them scanning
    that dataset (DuckDB's own S3 reader is an extension it downloads); none if empty."""
    import pyarrow.dataset as ds

    from cohort.pipelines.tasks.writer import arrow_filesystem

    resolved = arrow_filesystem(root)
    assert resolved is not None, root
    try:
        dataset = ds.dataset(resolved[1], filesystem=resolved[0], format="parquet", partitioning="hive")
    except FileNotFoundError:
        return []
    if not dataset.files:
        return []
    if duckdb:
        import duckdb as db

        rows = db.sql("SELECT kafka.topic, kafka.partition, kafka.offset FROM dataset").fetchall()
        return sorted((str(t), int(p), int(o)) for t, p, o in rows)
    kafka = dataset.to_table(columns=["kafka"]).column("kafka").to_pylist()
    return sorted((k["topic"], k["partition"], k["offset"]) for k in kafka)


def sink_offsets(spark: Any, path: str) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every row under a Parquet root the pipeline wrote (none if empty): read with
    Spark, or with pyarrow on an object store (`object_offsets`: the tests' Spark has no S3 file system)."""
    from pyspark.errors import AnalysisException

    from cohort.pipelines.storage.s3 import is_s3

    if is_s3(path):
        return object_offsets(path)

    try:
        frame = spark.read.parquet(path)
    except AnalysisException:  # nothing written there (yet)
        return []
    coordinates = frame.select(F.col("kafka.topic"), F.col("kafka.partition"), F.col("kafka.offset")).collect()
    return [(str(t), int(p), int(o)) for t, p, o in coordinates]


def table_offsets(spec: PipelineSpec, *, quarantine: bool = False) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every row of a table sink's sink (or quarantine) table, read with the
    format's own reader (deltalake, pyiceberg); none if the table does not exist."""
    from harness.tables import table_arrow

    table = table_arrow(spec, quarantine=quarantine)
    if table is None or table.num_rows == 0:
        return []
    kafka = table.column("kafka").combine_chunks()
    columns = (kafka.field(name).to_pylist() for name in ("topic", "partition", "offset"))
    return [(str(t), int(p), int(o)) for t, p, o in zip(*columns, strict=True)]


def duckdb_table_offsets(spec: PipelineSpec) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every row of a table sink's sink table, as DuckDB reads the table's Arrow
    data (`harness.tables.duckdb_offsets`, with the topic)."""
    import duckdb

    from harness.tables import table_arrow

    table = table_arrow(spec)
    if table is None:
        return []
    con: Any = duckdb.connect()
    try:
        con.register("t", table)
        rows = con.execute("SELECT kafka.topic, kafka.partition, kafka.offset FROM t").fetchall()
    finally:
        con.close()
    return [(str(t), int(p), int(o)) for t, p, o in rows]


def _lost_and_duplicated(rows: list[tuple[str, int, int]], expected: set[tuple[str, int, int]]) -> tuple[int, int]:
    return len(expected - set(rows)), len(rows) - len(set(rows))


def audit_delivery(
    spark: Any,
    *,
    sink: str,
    quarantine: str | None = None,
    produced: Mapping[str, Mapping[int, int]],
    coordinator: Coordinator,
    group: str,
    kafka: Any,
    instance: Any = None,
    spec: PipelineSpec | None = None,
) -> DeliveryAudit:
    """Audit one group's delivery of `produced` ({topic: {partition: records produced}}, offsets from 0).

    `kafka` is a `resources.KafkaResource`. With a Dagster `instance`, the ledger is also compared with the
    materializations (a committed range without one is a problem); without, only ledger contiguity and
    Kafka's committed offsets are checked. With the `spec` of a table sink (`table_format` delta or iceberg),
    the sink and quarantine tables are read with the format's reader (`sink` and `quarantine` are then the
    spec's), and lost and duplicated are counted a second time with DuckDB's reading of the sink table.
    """
    expected = {(t, p, o) for t, parts in produced.items() for p, n in parts.items() for o in range(n)}
    problems: list[str] = []
    duckdb_counts: tuple[int | None, int | None] = (None, None)
    if spec is not None and spec.table_format != "parquet":
        reader = "deltalake" if spec.table_format == "delta" else "pyiceberg"
        sink_rows, quarantine_rows = table_offsets(spec), table_offsets(spec, quarantine=True)
        by_duckdb = duckdb_table_offsets(spec)
        duckdb_counts = _lost_and_duplicated(by_duckdb + quarantine_rows, expected)
        if sorted(by_duckdb) != sorted(sink_rows):
            problems.append(
                f"DuckDB reads {len(by_duckdb)} rows in the sink table, {reader} {len(sink_rows)}: they differ"
            )
    else:
        from cohort.pipelines.storage.s3 import is_s3

        reader = "pyarrow" if is_s3(sink) else "spark"
        quarantine = quarantine or f"{sink.rstrip('/')}/_quarantine"
        sink_rows, quarantine_rows = (sink_offsets(spark, path) for path in (sink, quarantine))
        if reader == "pyarrow":
            duckdb_counts = _lost_and_duplicated(object_offsets(sink, duckdb=True) + quarantine_rows, expected)
    rows = sink_rows + quarantine_rows
    total, in_sink = len(rows), len(sink_rows)
    distinct = set(rows)
    problems += [f"unexpected record {r} in the output" for r in sorted(distinct - expected)[:5]]
    translator = DagsterCohortTranslator()
    audits: list[PartitionAudit] = []
    for topic, parts in produced.items():
        audits.extend(_audits(coordinator, group, topic, max(parts) + 1, kafka, instance, translator))
    for audit in audits:
        problems.extend(p for p in audit.problems if instance is not None or "materialization" not in p)
        count = produced[audit.tp.topic][audit.tp.partition]
        if audit.committed != count:
            problems.append(f"{audit.tp}: ledger committed {audit.committed}, produced {count}")
    return DeliveryAudit(
        produced=len(expected),
        in_sink=in_sink,
        quarantined=total - in_sink,
        lost=len(expected - distinct),
        duplicated=total - len(distinct),
        problems=tuple(problems),
        reader=reader,
        duckdb_lost=duckdb_counts[0],
        duckdb_duplicated=duckdb_counts[1],
    )


def _audits(
    coordinator: Coordinator,
    group: str,
    topic: str,
    partitions: int,
    kafka: Any,
    instance: Any,
    translator: DagsterCohortTranslator,
) -> list[PartitionAudit]:
    if instance is not None:
        return gather_audits(
            coordinator,
            group,
            topic,
            partitions,
            instance=instance,
            asset_key=translator.get_asset_key(group, topic),
            kafka=kafka,
            full=True,
        )
    from cohort.assets.audit import audit_partition
    from cohort.common.types import TopicPartition

    tps = [TopicPartition(topic, p) for p in range(partitions)]
    in_kafka = kafka.committed_offsets(group, tps)
    marks = kafka.watermarks(tps)
    audits = []
    for tp in tps:
        ledger = [(e.from_offset, e.until_offset, e.gap_reason) for e in coordinator.ledger_history(group, *tp)]
        recorded = {(s, u) for s, u, gap in ledger if gap is None}
        audits.append(
            audit_partition(
                tp, ledger, recorded, kafka_committed=in_kafka.get(tp), end_offset=marks[tp][1], low_offset=marks[tp][0]
            )
        )
    return audits
