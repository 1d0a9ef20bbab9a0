"""An editable install maps the repository's layer folders under `cohort` (and nothing at the top level), and
installing one into another venv leaves the repository and the development environment's own install as
they were."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from textwrap import dedent

from tests.packaging.support import (
    DEV_PYTHON,
    REPO,
    clean_env,
    create_venv,
    dev_site_packages,
    expose_dependencies,
    python_in,
    run,
    venv_python,
)

MODULE_FILES = {
    "cohort": "cohort/__init__.py",
    "cohort.cli.main": "cohort/cli/main.py",
    "cohort.common": "common/__init__.py",
    "cohort.assignment.coordinator": "assignment/coordinator.py",
    "cohort.assignment.assignors.sticky": "assignment/assignors/sticky.py",
    "cohort.pipelines.tasks.reader": "pipelines/tasks/reader.py",
    "cohort.resources.group": "resources/group.py",
    "cohort.assets.factory": "assets/factory.py",
}
"""Modules and the repository files an editable install must import them from."""

NOT_TOP_LEVEL = ("assets", "resources", "pipelines", "assignment", "common", "harness")


def _build_output() -> set[str]:
    """What a setuptools build may leave in the repository: its egg-info, build/ and dist/ entries."""
    found = {p.name for p in REPO.glob("*.egg-info")}
    for folder in ("build", "dist"):
        if (REPO / folder).is_dir():
            found |= {f"{folder}/{p.name}" for p in (REPO / folder).iterdir()}
    return found


def _dev_install() -> dict[str, str]:
    """Digest of every file of Cohort's own (editable) install in the development environment."""
    digests = {}
    for site in dev_site_packages():
        for path in [*site.glob("__editable__*cohort*"), *site.glob("cohort-*.dist-info/*")]:
            if path.is_file():
                digests[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def test_an_editable_install_maps_the_layer_folders(tmp_path: Path) -> None:
    venv = create_venv(tmp_path / "venv")
    expose_dependencies(venv)
    build_output, dev_install = _build_output(), _dev_install()
    try:
        run(
            [venv_python(venv), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q", "-e", REPO],
            cwd=tmp_path,
            env=clean_env(venv),
            timeout=180,
        )
    finally:
        if "cohort.egg-info" not in build_output:
            shutil.rmtree(REPO / "cohort.egg-info", ignore_errors=True)
    left = _build_output() - build_output
    assert not left, f"the editable install left build output in the repository: {sorted(left)}"
    assert _dev_install() == dev_install, "installing into another venv changed the development environment's install"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = dedent(
        f"""
        import importlib, importlib.util, json
        files = {{name: importlib.import_module(name).__file__ for name in {sorted(MODULE_FILES)!r}}}
        top_level = {{name: importlib.util.find_spec(name) is not None for name in {NOT_TOP_LEVEL!r}}}
        print(json.dumps({{"files": files, "top_level": top_level}}))
        """
    )
    found = json.loads(python_in(venv, code, cwd=elsewhere).strip().splitlines()[-1])
    wrong = {name: path for name, path in found["files"].items() if Path(path).resolve() != (REPO / MODULE_FILES[name])}
    assert not wrong, f"modules not imported from their repository files: {wrong}"
    exposed = sorted(name for name, present in found["top_level"].items() if present)
    assert not exposed, f"the editable install makes top-level modules importable: {exposed}"

    # The development environment's own editable install still resolves to the repository.
    dev = run([DEV_PYTHON, "-c", code], cwd=elsewhere, env=clean_env()).stdout
    dev_files = json.loads(dev.strip().splitlines()[-1])["files"]
    assert Path(dev_files["cohort.assignment.coordinator"]).resolve() == REPO / "assignment/coordinator.py", dev
