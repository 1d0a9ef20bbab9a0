"""What the tests and the benchmarks both run against: Cohort's test and benchmark harness.

Throwaway local servers (`postgres`, `schema_registry`, `spark_cluster`, `spark_connect`), one group run through
Dagster in this process or in worker subprocesses (`dagster_group`, `dagster_worker`), a group's history
fast-forwarded in bulk (`history`), table sinks read back with their formats' own readers (`tables`), and the
fault, contention and zombie scenario drivers with their audit (`reliability`).

Importable from the repository root (as `tests` and `python -m benchmarks.NAME` run); not installed with the
product (pyproject.toml's package list leaves it out), and no product module imports it
(tests/packaging/test_layers.py checks). Helpers only the tests use stay in tests/support/.
"""
