"""The dependency direction, read from the sources: assets -> resources -> runtime -> pipelines / assignment ->
common, the Airflow face beside the Dagster one, and neither face imported by the core or by the other; inside
pipelines/, what runs on executors (tasks/, formats/) imports none of the driver's rooms, and the lower rooms know
neither the spec nor the batch; and no import cycle anywhere in the package, typing-only imports counted too.

A static check of every import statement (module level or inside a function) of each layer's folder, so a
lazy import cannot slip a Dagster or Airflow dependency into the core.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_DRIVER_ROOMS = (
    "cohort.pipelines.batch",
    "cohort.pipelines.kafka",
    "cohort.pipelines.planning",
    "cohort.pipelines.replay",
    "cohort.pipelines.tables",
    "cohort.assignment",
    "sqlalchemy",
)
"""The rooms of pipelines/ that run on the driver only: the executors' code (tasks/, formats/) imports none."""

_ABOVE_THE_ROOMS = ("cohort.pipelines.spec", "cohort.pipelines.spec_settings", "cohort.pipelines.batch")
"""The spec (the front door) and the batch that reads it: the lower rooms of pipelines/ are handed the small records
they need (a `RecordSide`, `PlanLimits`, a `SinkTarget`, a `TableTarget`) and import neither."""

FORBIDDEN: dict[str, tuple[str, ...]] = {
    "common": ("cohort.assignment", "cohort.pipelines", "cohort.resources", "cohort.assets", "cohort.airflow",
               "dagster", "airflow", "pyspark"),
    "assignment": ("cohort.pipelines", "cohort.resources", "cohort.assets", "cohort.airflow", "dagster", "airflow",
                   "pyspark"),
    "pipelines": ("cohort.assignment", "cohort.runtime", "cohort.resources", "cohort.assets", "cohort.airflow",
                  "dagster", "airflow"),
    "pipelines/tasks": (*_DRIVER_ROOMS, *_ABOVE_THE_ROOMS),
    "pipelines/formats": (*_DRIVER_ROOMS, *_ABOVE_THE_ROOMS),
    "pipelines/planning": _ABOVE_THE_ROOMS,
    "pipelines/sink": _ABOVE_THE_ROOMS,
    "pipelines/tables": _ABOVE_THE_ROOMS,
    "pipelines/kafka": _ABOVE_THE_ROOMS,
    "pipelines/replay": _ABOVE_THE_ROOMS,
    "pipelines/storage": (*_DRIVER_ROOMS, *_ABOVE_THE_ROOMS, "cohort.pipelines.sink", "cohort.pipelines.tasks"),
    "assignment/protocol": ("sqlalchemy", "cohort.assignment.store", "cohort.assignment.coordinator",
                            "cohort.assignment.member"),
    "cohort/runtime": ("cohort.resources", "cohort.assets", "cohort.airflow", "dagster", "airflow"),
    "resources": ("cohort.assets", "cohort.airflow", "airflow"),
    "assets": ("cohort.airflow", "airflow"),
    "cohort/airflow": ("cohort.assets", "cohort.resources", "dagster"),
    "cohort/cli": ("cohort.airflow", "airflow"),
    "cohort/devtools": ("cohort.airflow", "airflow"),
    "cohort/demo": ("cohort.airflow", "airflow"),
}  # fmt: skip
"""Folder -> the modules (and their submodules) no file in it may import."""


@dataclass(frozen=True)
class Imported:
    """One module an import statement names: `import module` (no `names`) or `from module import names`."""

    line: int
    module: str
    names: tuple[str, ...]
    typing_only: bool
    """Under `if TYPE_CHECKING:` (not imported when the code runs)."""


def import_statements(path: Path) -> list[Imported]:
    """Every absolute import of `path`, at module level or inside a function: the one walker both checks read."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Imported(node.lineno, alias.name, (), id(node) in typing_only) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = tuple(alias.name for alias in node.names)
            found.append(Imported(node.lineno, node.module, names, id(node) in typing_only))
    return found


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of `path`, typing-only ones included: a layer rule holds for those too."""
    return [(i.line, i.module) for i in import_statements(path)]


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


LAYERS = {"cohort": "cohort", "common": "cohort.common", "assignment": "cohort.assignment",
          "pipelines": "cohort.pipelines", "resources": "cohort.resources", "assets": "cohort.assets"}  # fmt: skip
"""Folder -> its import name (pyproject's package-dir)."""


UNINSTALLED = ("harness", "tests", "benchmarks", "tools")
"""Repository folders that are not installed with the product (harness/: the servers and scenario drivers the
tests and benchmarks share)."""


def test_the_product_imports_nothing_that_is_not_installed() -> None:
    """No file of the product's folders imports the harness, the tests, the benchmarks or the tools, so the
    package works where only the wheel is installed."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for folder in LAYERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, name in _imports(path)
        if name.split(".")[0] in UNINSTALLED
    ]
    assert not offenders, offenders


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in LAYERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            found[".".join([package, *parts]).removesuffix(".__init__")] = path
    return found


def _dependencies(path: Path, modules: dict[str, Path], *, typing_only: bool = False) -> set[str]:
    """The package's modules `path` imports when it runs (module level or in a function), and with `typing_only`
    those it imports under TYPE_CHECKING too; `from package import module` counts as importing the module."""
    found = set()
    for i in import_statements(path):
        if i.typing_only and not typing_only:
            continue
        found |= {f"{i.module}.{n}" if f"{i.module}.{n}" in modules else i.module for n in i.names or ("",)}
    return found & modules.keys()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_back_through_others() -> None:
    """No import cycle anywhere in the package: a module that needs another's code depends on it one way."""
    modules = _modules()
    graph = {name: _dependencies(path, modules) - {name} for name, path in modules.items()}
    assert _cycles(graph) == []


def test_no_module_names_itself_back_through_others_even_in_types() -> None:
    """No cycle either once the imports under TYPE_CHECKING count: a module that only names another's types
    depends on it one way as well (a typing-only import back up is a dependency the runtime graph hides)."""
    modules = _modules()
    graph = {name: _dependencies(path, modules, typing_only=True) - {name} for name, path in modules.items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above can fail: a three-module loop is found, a chain is not."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
