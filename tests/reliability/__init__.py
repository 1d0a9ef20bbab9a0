"""Reliability tests of the coordinator: chaos simulation, store contention, bad-input corpus (issue 7)."""
