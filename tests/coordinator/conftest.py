"""Fixtures of the coordinator tests: one contract suite over the in-memory, SQLite and PostgreSQL stores."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.group_state import GroupConfig
from cohort.assignment.store.memory import MemoryGroupStore
from cohort.assignment.store.sql import SqlGroupStore

CoordinatorFactory = Callable[..., Coordinator]


@pytest.fixture
def clock() -> ManualClock:
    """A manual clock at t = 1000 s."""
    return ManualClock(1000.0)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest) -> str:
    """'memory' or the URL of a fresh SQLite file / PostgreSQL database."""
    if request.param == "memory":
        return "memory"
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def make_coordinator(store_url: str, clock: ManualClock) -> Iterator[CoordinatorFactory]:
    """Build coordinators on the parametrized store (same database for every call in one test)."""
    made: list[Coordinator] = []
    memory = MemoryGroupStore()

    def make(config: GroupConfig | None = None, **kwargs: object) -> Coordinator:
        store = memory if store_url == "memory" else SqlGroupStore.from_url(store_url)
        coordinator = Coordinator(
            store,
            clock=kwargs.pop("clock", clock),  # type: ignore[arg-type]
            config=config or GroupConfig(initial_rebalance_delay=0),
            **kwargs,  # type: ignore[arg-type]
        )
        made.append(coordinator)
        return coordinator

    yield make
    for coordinator in made:
        coordinator.close()


@pytest.fixture
def coordinator(make_coordinator: CoordinatorFactory) -> Coordinator:
    """A coordinator with no initial rebalance delay (as Kafka before 0.11)."""
    return make_coordinator()
