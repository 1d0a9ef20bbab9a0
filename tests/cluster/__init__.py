"""Tests on a real Spark standalone cluster (one master, two workers) started from PySpark's distribution."""
