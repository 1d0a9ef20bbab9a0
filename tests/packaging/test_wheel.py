"""The wheel is one `cohort` import root: built from the working tree, installed into a fresh venv, it serves
a user project whose own top-level modules are called `assets`, `resources`, `pipelines`, `assignment`."""

from __future__ import annotations

import json
import tomllib
import zipfile
from pathlib import Path
from textwrap import dedent

from tests.packaging.support import REPO, clean_env, package_dirs, python_in, run, venv_site_packages

OLD_TOP_LEVELS = ("assets", "resources", "pipelines", "assignment", "common", "tests", "harness", "benchmarks", "tools")
"""Repository folders that must not become top-level packages of the wheel."""


def _wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def _dist_info(names: list[str]) -> str:
    dist_infos = {name.split("/", 1)[0] for name in names if name.split("/", 1)[0].endswith(".dist-info")}
    assert len(dist_infos) == 1, f"expected one .dist-info directory in the wheel, found {sorted(dist_infos)}"
    return dist_infos.pop()


def test_the_wheel_holds_only_the_cohort_package(wheel: Path, wheel_source: Path) -> None:
    names = _wheel_names(wheel)
    dist_info = _dist_info(names)
    stray = sorted(n for n in names if not n.startswith(("cohort/", f"{dist_info}/")))
    assert not stray, f"files outside cohort/ in {wheel.name}: {stray}"
    tops = {n.split("/", 1)[0] for n in names}
    assert not tops & set(OLD_TOP_LEVELS), f"top-level folders {sorted(tops & set(OLD_TOP_LEVELS))} in the wheel"
    assert "cohort/py.typed" in names, f"cohort/py.typed missing from {wheel.name}"

    # Every file of the mapped folders (modules and package data) is in the wheel under its cohort name, and
    # nothing else is.
    expected = set()
    for package, folder in package_dirs(wheel_source).items():
        target = package.replace(".", "/")
        for path in (wheel_source / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                expected.add(f"{target}/{path.relative_to(wheel_source / folder).as_posix()}")
    shipped = {n for n in names if n.startswith("cohort/")}
    assert not expected - shipped, f"files left out of the wheel: {sorted(expected - shipped)}"
    assert not shipped - expected, (
        f"files in the wheel that are not in the mapped folders: {sorted(shipped - expected)}"
    )

    with zipfile.ZipFile(wheel) as archive:
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    assert "[console_scripts]" in entry_points and "cohort = cohort.cli.main:main" in entry_points, entry_points


def test_the_fresh_venv_imports_every_module_from_the_wheel(wheel_venv: Path, tmp_path: Path) -> None:
    """Every module of the installed wheel imports (from the wheel, not from the repository) and every name in
    a module's `__all__` resolves, lazy package re-exports included."""
    code = dedent(
        """
        import importlib, importlib.metadata, json, pkgutil, sys
        import cohort

        modules = {}
        for info in pkgutil.walk_packages(cohort.__path__, "cohort."):
            if info.name.rsplit(".", 1)[-1] == "__main__":
                continue
            module = importlib.import_module(info.name)
            for name in getattr(module, "__all__", ()):
                getattr(module, name)  # resolves lazy re-exports
            modules[info.name] = module.__file__
        modules["cohort"] = cohort.__file__
        print(json.dumps({
            "modules": modules,
            "version": cohort.__version__,
            "distribution": str(importlib.metadata.distribution("cohort").locate_file("")),
            "editable_finders": [repr(f) for f in sys.meta_path if "editable" in repr(f).lower()],
            "dagster": importlib.import_module("dagster").__file__,
        }))
        """
    )
    found = json.loads(python_in(wheel_venv, code, cwd=tmp_path).strip().splitlines()[-1])
    installed = venv_site_packages(wheel_venv) / "cohort"
    outside = {name: path for name, path in found["modules"].items() if not Path(path).is_relative_to(installed)}
    assert not outside, f"modules not imported from the wheel's install in {installed}: {outside}"
    assert {"cohort.assets.factory", "cohort.pipelines.tasks.reader", "cohort.assignment.coordinator"} <= set(
        found["modules"]
    )
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert found["version"] == version, found
    assert Path(found["distribution"]) == venv_site_packages(wheel_venv), found
    assert not found["editable_finders"], f"an editable finder is active in the fresh venv: {found}"
    assert Path(found["dagster"]).is_relative_to(wheel_venv / "dev-dependencies"), found  # through the .pth


def test_the_console_script_runs(wheel_venv: Path, tmp_path: Path) -> None:
    script = wheel_venv / "bin" / "cohort"
    assert script.exists(), f"the wheel installed no `cohort` script in {script.parent}"
    done = run([script, "--help"], cwd=tmp_path, env=clean_env(wheel_venv), timeout=60)
    assert "Usage" in done.stdout, done.stdout


USER_MODULES = {
    "assignment.py": '''
        """The user's own `assignment` module: who owns what."""

        USER_MODULE = True
        GROUP = "orders-ingest"
        TOPIC = "orders"
        ''',
    "common.py": '''
        """The user's own `common` module."""

        USER_MODULE = True
        OWNER = "team-data"
        ''',
    "pipelines.py": '''
        """The user's own `pipelines` module: the schema of the orders topic."""

        import pyspark.sql.types as T

        USER_MODULE = True
        ORDER_SCHEMA = T.StructType(
            [T.StructField("id", T.LongType(), nullable=False), T.StructField("amount", T.DoubleType())]
        )
        ''',
    "resources.py": '''
        """The user's own `resources` module."""

        import dagster as dg

        USER_MODULE = True


        class ReportSettings(dg.ConfigurableResource):
            title: str = "report"
        ''',
    "assets.py": '''
        """The user's own `assets` module: a report downstream of the topic Cohort ingests."""

        import dagster as dg

        from common import OWNER
        from resources import ReportSettings

        USER_MODULE = True


        @dg.asset(deps=[dg.AssetKey(["cohort", "orders_ingest", "orders"])], owners=[f"team:{OWNER}"])
        def order_report(report: ReportSettings) -> None:
            """Reads the lake Cohort writes."""
        ''',
    "definitions.py": '''
        """The user's code location: the user's own modules next to Cohort's definitions."""

        import importlib
        import os
        from pathlib import Path

        import dagster as dg

        import assets
        import assignment
        import common
        import pipelines
        import resources
        from cohort.assets import CohortConfig, build_cohort_definitions
        from cohort.pipelines import PipelineSpec
        from cohort.resources import CohortGroupResource, KafkaResource

        HERE = Path(__file__).resolve().parent
        INSTALLED = Path(os.environ["COHORT_EXPECTED_HOME"]).resolve()

        for mine in (assets, assignment, common, pipelines, resources):
            where = Path(mine.__file__).resolve()
            assert where == HERE / f"{mine.__name__}.py", f"the user's {mine.__name__!r} was imported from {where}"
            assert mine.USER_MODULE
        for name in ("cohort", "cohort.assets", "cohort.resources", "cohort.pipelines", "cohort.assignment",
                     "cohort.common"):
            where = Path(importlib.import_module(name).__file__).resolve()
            assert where.is_relative_to(INSTALLED), f"{name} was imported from {where}, not from {INSTALLED}"

        orders = CohortConfig(
            CohortGroupResource(group=assignment.GROUP, topics=[assignment.TOPIC], worker_slots=2),
            pipeline=PipelineSpec(
                sink_path=str(HERE / "lake"), value_format="json", value_schema=pipelines.ORDER_SCHEMA
            ),
        )
        defs = dg.Definitions.merge(
            build_cohort_definitions([orders], kafka=KafkaResource(bootstrap_servers="127.0.0.1:9092")),
            dg.Definitions(
                assets=[assets.order_report], resources={"report": resources.ReportSettings(title="orders")}
            ),
        )
        keys = {key.to_user_string() for key in defs.resolve_all_asset_keys()}
        assert {"cohort/orders_ingest/orders", "order_report"} <= keys, keys
        print("USER-DEFINITIONS-LOADED", sorted(keys))
        ''',
}


def test_a_user_project_with_modules_named_like_cohorts_layers_validates(wheel_venv: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for name, text in USER_MODULES.items():
        (project / name).write_text(dedent(text).lstrip())
    home = tmp_path / "dagster-home"
    home.mkdir()
    (home / "dagster.yaml").write_text("")
    env = clean_env(
        wheel_venv, DAGSTER_HOME=str(home), COHORT_EXPECTED_HOME=str(venv_site_packages(wheel_venv) / "cohort")
    )
    done = run(
        [wheel_venv / "bin" / "dagster", "definitions", "validate", "-f", "definitions.py"],
        cwd=project,
        env=env,
        timeout=180,
    )
    output = done.stdout + done.stderr
    assert "USER-DEFINITIONS-LOADED" in output, f"definitions.py did not run:\n{output}"
    assert "Validation successful" in output, output
