"""Fixtures of the Dagster tests: a group setup per test on the session broker, a persistent instance."""

import itertools
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from harness.dagster_group import Setup, instance_for

_groups = itertools.count()


@pytest.fixture
def make_setup(request: pytest.FixtureRequest, tmp_path: Path, kafka_config: dict[str, Any]) -> Callable[..., Setup]:
    """Build a `Setup` for this test: a unique group, a sink, a SQLite store and a Dagster home in tmp."""

    def make(topics: tuple[str, ...], **kwargs: Any) -> Setup:
        name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
        home = tmp_path / "dagster"
        home.mkdir(exist_ok=True)
        return Setup(
            bootstrap=kafka_config["bootstrap.servers"],
            group=f"g{next(_groups)}-{name}",
            topics=tuple(topics),
            sink=str(tmp_path / "lake"),
            store_url=f"sqlite:///{tmp_path / 'cohort.db'}",
            dagster_home=str(home),
            **kwargs,
        )

    return make


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    """A persistent Dagster instance in tmp (worker subprocesses open the same one)."""
    home = tmp_path / "dagster"
    home.mkdir(exist_ok=True)
    with instance_for(Setup("", "g", (), "", "", str(home))) as opened:
        yield opened
