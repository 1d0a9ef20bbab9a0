"""The test tree mirrors the package, so a maintainer finds a behaviour's tests where its code's name says:
tests/<a>/<b>/ holds the tests of `cohort.<a>.<b>`. Infrastructure is a fixture (tests/fixtures/) and a marker,
never a folder; tests/conftest.py marks each test with what its fixtures start."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import FIXTURE_MARKERS
from tests.packaging.support import REPO

TESTS = REPO / "tests"

# Folders of tests whose subject is not an installed package, with that subject in the repository.
BESIDE_THE_PACKAGE = {"docs": "docs", "packaging": "pyproject.toml", "harness": "harness", "benchmarks": "benchmarks"}

# Folders of helpers that hold no tests.
HELPERS = {"fixtures", "support"}


def _installed_packages() -> set[str]:
    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])


def _test_folders() -> list[Path]:
    return sorted({path.parent for path in TESTS.rglob("test_*.py") if "__pycache__" not in path.parts})


def test_every_test_folder_names_a_package_or_a_repository_folder() -> None:
    packages = _installed_packages()
    strays = []
    for folder in _test_folders():
        parts = folder.relative_to(TESTS).parts
        if not parts:
            strays.append("tests/ (a test module at the top)")
        elif parts[0] in BESIDE_THE_PACKAGE:
            if len(parts) > 1 or not (REPO / BESIDE_THE_PACKAGE[parts[0]]).exists():
                strays.append(str(folder.relative_to(REPO)))
        elif parts[0] in HELPERS or ".".join(("cohort", *parts)) not in packages:
            strays.append(str(folder.relative_to(REPO)))
    assert not strays, f"test folders that name no package of cohort nor a repository folder: {strays}"


def test_helper_folders_hold_no_tests() -> None:
    found = [str(p.relative_to(REPO)) for name in HELPERS for p in (TESTS / name).rglob("test_*.py")]
    assert not found, found


def test_every_test_folder_is_a_package() -> None:
    """Test modules import by their dotted path (tests.pipelines.batch.test_run), so equal file names in two
    folders never collide."""
    missing = set()
    for folder in _test_folders():
        while folder != REPO:
            if not (folder / "__init__.py").exists():
                missing.add(str(folder.relative_to(REPO)))
            folder = folder.parent
    assert not missing, f"folders without __init__.py: {sorted(missing)}"


def test_each_marking_fixture_is_a_shared_fixture() -> None:
    plugins = [p.stem for p in (TESTS / "fixtures").glob("*.py") if p.stem != "__init__"]
    text = "\n".join((TESTS / "fixtures" / f"{name}.py").read_text() for name in plugins)
    absent = [name for name in FIXTURE_MARKERS if f"\ndef {name}(" not in text]
    assert not absent, f"markers keyed on fixtures tests/fixtures/ does not define: {absent}"


# Collects each selection in turn in one interpreter (the plugins' imports are paid once), printing a header before
# each: `pytest --collect-only -q` per selection, as a user would run it.
_COLLECT = """
import sys, pytest
for selection in sys.argv[1:]:
    print("=== " + selection, flush=True)
    pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *selection.split("|")])
"""


def _collected(*selections: tuple[str, ...]) -> list[list[str]]:
    """The node ids each selection (pytest arguments) collects."""
    done = subprocess.run(
        [sys.executable, "-c", _COLLECT, *("|".join(s) for s in selections)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    found: list[list[str]] = []
    for line in done.stdout.splitlines():
        if line.startswith("=== "):
            found.append([])
        elif "::" in line and found:
            found[-1].append(line)
    assert len(found) == len(selections), done.stdout[-2000:] + done.stderr[-2000:]
    return found


def test_markers_follow_the_fixtures_a_test_uses() -> None:
    """A batch test uses the broker and Spark through fixtures, so it is marked `kafka` and `spark`, never
    `pure`; a pure protocol decision is marked `pure` and nothing else."""
    batch, pure = "tests/pipelines/batch/test_run.py", "tests/assignment/protocol/test_group_state.py"
    every_batch, every_pure, as_pure, as_infra, pure_as_infra = _collected(
        (batch,),
        (pure,),
        (batch, pure, "-m", "pure"),
        (batch, pure, "-m", "kafka and spark"),
        (pure, "-m", "kafka or spark or postgres or dagster"),
    )
    assert every_batch and every_pure
    assert as_pure == every_pure
    assert as_infra == every_batch
    assert pure_as_infra == []
