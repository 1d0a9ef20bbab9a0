"""The coordinator's tests run on every store: here `coordinator` is the store-parametrized one (in-memory,
SQLite, PostgreSQL) that tests/fixtures/stores.py's `make_coordinator` builds, not the SQLite one elsewhere."""

from __future__ import annotations

import pytest

from cohort.assignment.coordinator import Coordinator
from tests.fixtures.stores import CoordinatorFactory


@pytest.fixture
def coordinator(make_coordinator: CoordinatorFactory) -> Coordinator:
    """A coordinator with no initial rebalance delay (as Kafka before 0.11), on the parametrized store."""
    return make_coordinator()
