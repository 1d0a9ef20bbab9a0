"""The dependency direction, read from the sources: assets -> resources -> pipelines / assignment -> common, the
Airflow face beside the Dagster one, and neither face imported by the core or by the other.

A static check of every import statement (module level or inside a function) of each layer's folder, so a
lazy import cannot slip a Dagster or Airflow dependency into the core.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FORBIDDEN: dict[str, tuple[str, ...]] = {
    "common": ("cohort.assignment", "cohort.pipelines", "cohort.resources", "cohort.assets", "cohort.airflow",
               "dagster", "airflow", "pyspark"),
    "assignment": ("cohort.pipelines", "cohort.resources", "cohort.assets", "cohort.airflow", "dagster", "airflow",
                   "pyspark"),
    "pipelines": ("cohort.resources", "cohort.assets", "cohort.airflow", "dagster", "airflow"),
    "resources": ("cohort.assets", "cohort.airflow", "airflow"),
    "assets": ("cohort.airflow", "airflow"),
    "cohort/airflow": ("cohort.assets", "cohort.resources", "dagster"),
    "cohort/cli": ("cohort.airflow", "airflow"),
    "cohort/devtools": ("cohort.airflow", "airflow"),
    "cohort/demo": ("cohort.airflow", "airflow"),
}  # fmt: skip
"""Folder -> the modules (and their submodules) no file in it may import."""


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it_or_beside_it(folder: str) -> None:
    banned = FORBIDDEN[folder]
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, name in _imports(path)
        if any(name == b or name.startswith(f"{b}.") for b in banned)
    ]
    assert not offenders, offenders
