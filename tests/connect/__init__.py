"""Tests of the data path over Spark Connect: a real Spark Connect server started from PySpark's distribution."""
