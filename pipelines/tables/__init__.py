"""Table sinks (Delta Lake and Iceberg): stores, their target, reconciling, compaction, retention, audit; a batch's
commits to them are the batch's (cohort.pipelines.batch.table_sink)."""
