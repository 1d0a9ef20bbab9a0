"""Where groups and the ledger live: the SQL store (SQLite, PostgreSQL), its schema, an in-memory store, encodings."""
