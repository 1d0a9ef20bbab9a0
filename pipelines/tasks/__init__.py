"""What runs on Spark's executors: the reading tasks (read, decode, check, write) and nothing else.

`EXECUTOR_MODULES` names every module of Cohort a reading task may import, here and in the other rooms whose code
runs in the tasks (formats/, sink/layout, sink/digest, sink/counts, storage/moves): the worker daemon preloads
from it (cohort.pipelines.tasks.python_daemon), tests/packaging/test_lean_imports.py holds each to light imports, and
docs/architecture.md lists them (a test compares). Importing this package imports nothing else.
"""

EXECUTOR_MODULES: tuple[str, ...] = (
    "cohort.common",
    "cohort.pipelines.tasks.reader",
    "cohort.pipelines.tasks.spans",
    "cohort.pipelines.tasks.read_stats",
    "cohort.pipelines.tasks.python_consumer",
    "cohort.pipelines.tasks.records",
    "cohort.pipelines.tasks.native_reader",
    "cohort.pipelines.tasks._kafka_arrow",
    "cohort.pipelines.tasks.checked",
    "cohort.pipelines.tasks.validate",
    "cohort.pipelines.tasks.writer",
    "cohort.pipelines.tasks.transformed_writer",
    "cohort.pipelines.tasks.arrow_transform",
    "cohort.pipelines.tasks.written",
    "cohort.pipelines.tasks.python_daemon",
    "cohort.pipelines.formats.decode",
    "cohort.pipelines.formats.columns",
    "cohort.pipelines.formats.repeated_keys",
    "cohort.pipelines.formats.flat_json",
    "cohort.pipelines.formats._flat_json",
    "cohort.pipelines.formats.registry_decode",
    "cohort.pipelines.formats.framing",
    "cohort.pipelines.formats.registry",
    "cohort.pipelines.formats.avro.columns",
    "cohort.pipelines.formats.avro.cursor",
    "cohort.pipelines.formats.avro.defaults",
    "cohort.pipelines.formats.avro.match",
    "cohort.pipelines.formats.avro.schema",
    "cohort.pipelines.sink.layout",
    "cohort.pipelines.sink.names",
    "cohort.pipelines.sink.counts",
    "cohort.pipelines.sink.digest",
    "cohort.pipelines.storage.moves",
)
"""The modules a reading task may import: the read, decoding (the Schema Registry's formats too: their clients
load only when a task decodes such a record), the checks, the Parquet writers, the staging layouts (a table's data
directories among them), and what a task reports of its files (their digests and shapes)."""
