"""Cohort: Kafka consumer-group semantics for batch pipelines (Dagster orchestrates, PySpark works).

One import root with one subpackage per layer; dependencies point one way,
`assets -> resources -> pipelines / assignment -> common`:

- `cohort.assets`: Dagster assets, the worker job, schedules, sensors, asset checks, the Definitions factory;
- `cohort.resources`: Dagster resources (Kafka, the consumer group, Spark);
- `cohort.pipelines`: the PySpark data path (plan, read, decode, validate, sink, commit); no Dagster;
- `cohort.assignment`: the group protocol (coordinator, ledger, SQL store, assignors); no Dagster, no Spark;
- `cohort.common`: the shared vocabulary (topic partitions, offset ranges, ledger interfaces, names);
- `cohort.cli` (the `cohort` command), `cohort.devtools` (embedded broker, sample producers, `make ui`) and
  `cohort.demo` (the demo's Definitions and `make demo`).

Example:
    >>> import cohort
    >>> cohort.__version__ != ""
    True
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("cohort")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
