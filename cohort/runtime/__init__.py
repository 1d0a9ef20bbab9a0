"""What the Dagster and Airflow faces share, orchestrator-free: a slot's batch, its lineage, offset resets."""
