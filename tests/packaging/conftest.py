"""Fixtures of the packaging tests: the wheel of the working tree and a fresh venv with it installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.packaging.support import (
    build_wheel,
    copy_source_tree,
    create_venv,
    expose_dependencies,
    expose_script,
    install_wheel,
)


@pytest.fixture(scope="session")
def wheel_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the working tree, which the wheel is built from."""
    return copy_source_tree(tmp_path_factory.mktemp("wheel") / "src")


@pytest.fixture(scope="session")
def wheel(wheel_source: Path) -> Path:
    """The wheel of the working tree (built from its copy)."""
    out = wheel_source.parent / "dist"
    out.mkdir()
    return build_wheel(wheel_source, out)


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv holding the wheel, with the dependencies (not Cohort) of the development environment and
    a `dagster` launcher as if Dagster were installed in it."""
    venv = create_venv(tmp_path_factory.mktemp("wheel-venv") / "venv")
    install_wheel(venv, wheel)  # before the dependencies are visible, so pip sees no other cohort
    expose_dependencies(venv)
    expose_script(venv, "dagster")
    return venv
