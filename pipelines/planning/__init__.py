"""Where each partition's range starts and ends (planning a batch from the ledger and Kafka's watermarks)."""
