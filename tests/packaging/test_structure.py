"""Size limits that keep the product findable: no folder holds more than 15 modules (a shared prefix becomes a
sub-package instead), no module more than 500 lines, no function more than 80. Read from the sources."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PRODUCT = ("common", "assignment", "pipelines", "resources", "assets", "cohort")
"""The folders installed as `cohort.` (pyproject's package-dir)."""

MAX_MODULES = 15
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _folders() -> list[Path]:
    return sorted({p.parent for top in PRODUCT for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts})


def _modules(folder: Path) -> list[str]:
    """The modules of `folder`, its `__init__` left out (a package is a room, not a module of it)."""
    return sorted(p.name for p in folder.glob("*.py") if p.name != "__init__.py")


def _sources() -> list[Path]:
    return [p for folder in _folders() for p in sorted(folder.glob("*.py"))]


def _over_limit_folders(folders: list[Path], root: Path = ROOT) -> list[str]:
    return [f"{f.relative_to(root)}: {len(_modules(f))} modules" for f in folders if len(_modules(f)) > MAX_MODULES]


def _long_functions(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(root)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_no_folder_of_the_product_holds_more_than_15_modules() -> None:
    folders = _folders()
    assert len(folders) > 20, "the walk found the product's folders"
    assert _over_limit_folders(folders) == []


def test_no_module_is_longer_than_500_lines() -> None:
    long = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in _sources()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert long == []


def test_no_function_is_longer_than_80_lines() -> None:
    assert [line for p in _sources() for line in _long_functions(p)] == []


def test_the_limits_can_fail(tmp_path: Path) -> None:
    """A folder of 16 modules and a function of 81 lines are found."""
    crowded = tmp_path / "crowded"
    crowded.mkdir()
    for i in range(MAX_MODULES + 1):
        (crowded / f"m{i}.py").write_text("")
    assert len(_modules(crowded)) == MAX_MODULES + 1
    long = tmp_path / "long.py"
    long.write_text("def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES)
    assert _long_functions(long, tmp_path) == [f"long.py:1 f: {MAX_FUNCTION_LINES + 1} lines"]
    assert _over_limit_folders([crowded], tmp_path) == [f"crowded: {MAX_MODULES + 1} modules"]
