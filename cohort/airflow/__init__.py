"""Cohort's Airflow face: the same group protocol, Spark batch and fenced ledger, driven from Airflow 3.

Installed with the `airflow` extra (`pip install 'cohort[airflow]'`); nothing in the core or the Dagster side
imports it. `cohort_dag(AirflowGroup(...))` builds a group's DAG (docs/airflow.md).
"""

from cohort.airflow.dag import cohort_dag, signal_asset, slots_for
from cohort.airflow.settings import group_from_settings
from cohort.airflow.slot import AirflowGroup, SlotReport, run_slot
from cohort.airflow.trigger import GroupWatchTrigger

__all__ = [
    "AirflowGroup",
    "GroupWatchTrigger",
    "SlotReport",
    "cohort_dag",
    "group_from_settings",
    "run_slot",
    "signal_asset",
    "slots_for",
]
