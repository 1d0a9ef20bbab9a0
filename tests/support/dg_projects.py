"""Helpers of the dg tests: a dg project's virtual environment without downloads, and Definitions as plain data.

`install_cohort(project)` stands for the guide's `pip install -e . /path/to/cohort`: the project's `.venv` sees
this repository's environment (Cohort installed editable, Dagster, dg, PySpark ...) through a `.pth` file, the
project's `src/` is importable as an editable install would make it, and the console scripts the guide runs
(`dg`, `dagster`, `cohort`, ...) are written into `.venv/bin` as pip writes them.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import dagster as dg

SCRIPTS = ("dg", "dagster", "dagster-webserver", "dagster-daemon", "cohort")
DG_METADATA = frozenset({"dagster/code_references", "dagster/component_origin"})
"""Metadata dg adds to a component's assets (its defs.yaml, the component): left out of the comparison."""


def install_cohort(project: Path) -> Path:
    """Create `project/.venv` seeing this environment's packages and `project/src`; returns its bin directory."""
    venv = project / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = venv / "lib" / version / "site-packages"
    here = sysconfig.get_paths()["purelib"]
    (site / "cohort_environment.pth").write_text(
        f"import site; site.addsitedir({here!r})\n{project / 'src'}\n", encoding="utf-8"
    )
    bin_dir = venv / "bin"
    scripts = {ep.name: ep for ep in importlib.metadata.entry_points(group="console_scripts") if ep.name in SCRIPTS}
    for name, entry in scripts.items():
        module, _, function = entry.value.partition(":")
        script = bin_dir / name
        # as pip writes it: a process spawned by multiprocessing imports the script without running it
        script.write_text(
            f"#!{bin_dir / 'python'}\nimport sys\nfrom {module} import {function}\n"
            f"if __name__ == '__main__':\n    sys.exit({function}())\n",
            encoding="utf-8",
        )
        script.chmod(0o755)
    return bin_dir


def activated(bin_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` as `. .venv/bin/activate` leaves it (this environment's own bin directory off PATH)."""
    ours = str(Path(sys.executable).parent)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != ours]
    return {**env, "VIRTUAL_ENV": str(bin_dir.parent), "PATH": os.pathsep.join([str(bin_dir), *path])}


def _value(value: Any) -> Any:
    if isinstance(value, dg.EnvVar):
        return {"env": value.env_var_name}
    if isinstance(value, dg.MetadataValue):
        return repr(value)
    return value


def _resource(resource: Any) -> dict[str, Any]:
    fields = type(resource).model_fields if hasattr(type(resource), "model_fields") else {}
    return {"type": type(resource).__name__, **{name: _value(getattr(resource, name)) for name in fields}}


def describe(defs: dg.Definitions) -> dict[str, Any]:
    """What a project's Definitions define, as comparable data: assets with their specs, checks, jobs,
    schedules, sensors and resources (their settings; environment variables by name)."""
    repository = defs.get_repository_def()
    specs = {spec.key.to_user_string(): spec for spec in defs.resolve_all_asset_specs()}
    return {
        "assets": {
            key: {
                "description": spec.description,
                "group": spec.group_name,
                "kinds": sorted(spec.kinds),
                "tags": dict(spec.tags),
                "deps": sorted(dep.asset_key.to_user_string() for dep in spec.deps),
                "partitions": repr(spec.partitions_def),
                "metadata": {k: _value(v) for k, v in spec.metadata.items() if k not in DG_METADATA},
            }
            for key, spec in specs.items()
        },
        "checks": sorted(
            (spec.asset_key.to_user_string(), spec.name, spec.description)
            for assets in defs.resolve_asset_graph().assets_defs
            for spec in assets.check_specs
        ),
        "jobs": {
            job.name: {"description": job.description, "tags": dict(job.tags)}
            for job in defs.resolve_all_job_defs()
            if not job.name.startswith("__")
        },
        "schedules": {
            schedule.name: {
                "cron": schedule.cron_schedule,
                "job": schedule.job_name,
                "status": str(schedule.default_status),
                "description": schedule.description,
                "resources": sorted(schedule.required_resource_keys),
            }
            for schedule in repository.schedule_defs
        },
        "sensors": {
            sensor.name: {
                "jobs": sorted(target.job_name for target in sensor.targets),
                "interval": sensor.minimum_interval_seconds,
                "status": str(sensor.default_status),
                "description": sensor.description,
                "resources": sorted(sensor.required_resource_keys),
            }
            for sensor in repository.sensor_defs
        },
        "resources": {key: _resource(value) for key, value in sorted((defs.resources or {}).items())},
    }
