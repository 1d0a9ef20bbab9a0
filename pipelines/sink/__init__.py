"""The Parquet sink: its layout, staging, publishing swaps, counts, audits and the quarantine's limit."""
