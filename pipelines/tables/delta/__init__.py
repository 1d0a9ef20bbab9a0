"""The Delta Lake table store (delta-rs, no JVM): the store itself, its log's marks and batch records, its data
files and their `stats`, and its errors cut to one line."""
