"""Table sinks (Delta Lake and Iceberg): stores, the batch's commit, reconciling, compaction, retention, audit."""
