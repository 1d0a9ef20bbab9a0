"""Airflow's provider metadata for Cohort (the `apache_airflow_provider` entry point): `airflow providers list`
shows Cohort, `airflow providers triggers` its trigger, and the description says what a deployment provides:
a Kafka connection and the store URL's environment variable (docs/airflow.md).

Outside `cohort.airflow` on purpose: Airflow calls `get_provider_info` while it reads its own configuration,
before `airflow.sdk` (which `cohort.airflow` imports) can be imported.
"""

from __future__ import annotations

from typing import Any

import cohort

__all__ = ["get_provider_info"]

INTEGRATION = "Cohort"


def get_provider_info() -> dict[str, Any]:
    """The provider's description, in the form of Airflow's provider_info schema."""
    return {
        "package-name": "cohort",
        "name": "Cohort",
        "description": (
            "Kafka consumer groups for batch pipelines: a DAG per group, one task per worker slot, and a trigger "
            "rerunning lost slots. Needs a Kafka connection (type kafka, its extra the librdkafka settings) and "
            "the group's store URL in an environment variable."
        ),
        "versions": [cohort.__version__],
        "integrations": [{"integration-name": INTEGRATION, "tags": ["software"]}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["cohort.airflow.trigger"]}],
    }
