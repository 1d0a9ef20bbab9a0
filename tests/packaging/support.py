"""Helpers of the packaging tests: subprocesses with readable failures, a wheel of the working tree, fresh venvs.

A fresh virtual environment gets Cohort's third-party dependencies without any download: a `.pth` file in its
site-packages names a directory of symlinks to the entries of the development environment's site-packages,
minus Cohort's own (its dist-info and the editable finder). A directory named by a `.pth` line is appended to
`sys.path`, but the `.pth` files inside it (such as the editable install's hook) are not executed, and without
Cohort's dist-info there pip sees no `cohort` installed and importlib.metadata finds only the fresh one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository root (the project being packaged)."""

DEV_PYTHON = sys.executable
"""The development environment's interpreter (the one running the tests, with Cohort's dependencies)."""


_UNCOPIED = (
    ".git",
    ".venv",
    "build",
    "dist",
    "__pycache__",
    "*.egg-info",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".hypothesis",
    ".cohort",
    "artifacts",
    "spark-warehouse",
    "metastore_db",
    "tmp",
)
"""What a source copy leaves out: version control, environments, build output and caches (.gitignore)."""


def package_dirs(root: Path = REPO) -> dict[str, str]:
    """pyproject's `[tool.setuptools.package-dir]` of the project at `root`: package name -> folder."""
    return dict(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"])


def run(
    command: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run `command`; when `check`, fail with the command, its exit code, stdout and stderr unless it exits 0."""
    args = [str(part) for part in command]
    try:
        done = subprocess.run(
            args, cwd=cwd, env=dict(env) if env is not None else None, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"timed out after {timeout} s: {' '.join(args)}\n{_tails(exc.stdout, exc.stderr)}"
        ) from None
    if check and done.returncode != 0:
        raise AssertionError(
            f"exit code {done.returncode}: {' '.join(args)}\n(cwd {cwd})\n{_tails(done.stdout, done.stderr)}"
        )
    return done


def _tails(stdout: str | bytes | None, stderr: str | bytes | None, limit: int = 6000) -> str:
    def tail(text: str | bytes | None) -> str:
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        text = (text or "").strip()
        return text if len(text) <= limit else "...\n" + text[-limit:]

    return f"--- stdout ---\n{tail(stdout)}\n--- stderr ---\n{tail(stderr)}"


def clean_env(venv: Path | None = None, **extra: str) -> dict[str, str]:
    """The current environment without anything that would leak the development setup into a subprocess
    (PYTHONPATH, an activated venv), pip kept offline, `venv/bin` first on PATH when given."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}}
    env.update(
        PIP_NO_INDEX="1",
        PIP_NO_CACHE_DIR="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
    )
    if venv is not None:
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(venv)
    env.update(extra)
    return env


def copy_source_tree(target: Path) -> Path:
    """A copy of the working tree (what the wheel is built from), without environments, caches and build
    output, so the build neither writes `build/` or `*.egg-info` into the repository nor reads stale files
    from them. Everything else is copied, `tests/`, `harness/` and `benchmarks/` included: the wheel must leave
    them out."""
    shutil.copytree(REPO, target, ignore=shutil.ignore_patterns(*_UNCOPIED), symlinks=True)
    return target


def build_wheel(source: Path, out: Path) -> Path:
    """Build the wheel of `source` into `out` (offline, with the development environment's setuptools)."""
    run(
        [DEV_PYTHON, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out, source],
        cwd=out.parent,
        env=clean_env(),
    )
    wheels = sorted(out.glob("cohort-*.whl"))
    assert len(wheels) == 1, f"expected one cohort wheel in {out}, found {[w.name for w in out.iterdir()]}"
    return wheels[0]


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def venv_site_packages(venv: Path) -> Path:
    return Path(sysconfig.get_path("purelib", scheme="venv", vars={"base": str(venv), "platbase": str(venv)}))


def dev_site_packages() -> list[Path]:
    """The development environment's site-packages directories (where Cohort's dependencies live)."""
    paths = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    return [Path(p) for p in sorted(paths) if Path(p).is_dir()]


def _is_cohort_entry(name: str) -> bool:
    """Whether a site-packages entry belongs to Cohort's own (editable) installation."""
    lowered = name.lower()
    return lowered.startswith(("cohort-", "cohort.", "__editable__")) or lowered == "cohort" or lowered.endswith(".pth")


def create_venv(venv: Path) -> Path:
    """A fresh virtual environment (no pip, no packages) on the development environment's base interpreter."""
    run([DEV_PYTHON, "-m", "venv", "--without-pip", venv], cwd=venv.parent, env=clean_env())
    return venv


def install_wheel(venv: Path, wheel: Path) -> None:
    """Install `wheel` (and nothing else) into `venv` with the development environment's pip."""
    run(
        [DEV_PYTHON, "-m", "pip", "--python", venv_python(venv), "install", "--no-deps", "-q", wheel],
        cwd=venv.parent,
        env=clean_env(),
    )


def expose_dependencies(venv: Path) -> Path:
    """Make the development environment's third-party packages importable in `venv` (see the module doc):
    returns the symlink directory a `.pth` line of `venv` names."""
    shadow = venv / "dev-dependencies"
    shadow.mkdir()
    for site in dev_site_packages():
        for entry in site.iterdir():
            if not _is_cohort_entry(entry.name) and not (shadow / entry.name).exists():
                (shadow / entry.name).symlink_to(entry)
    (venv_site_packages(venv) / "cohort_test_dependencies.pth").write_text(f"{shadow}\n")
    return shadow


def expose_script(venv: Path, name: str) -> Path:
    """A console script of the development environment (e.g. `dagster`) as `venv` would have it installed: the
    same launcher, run by `venv`'s interpreter."""
    source = Path(DEV_PYTHON).parent / name
    lines = source.read_text().splitlines(keepends=True)
    assert lines and lines[0].startswith("#!"), f"{source} is not a Python launcher script"
    script = venv / "bin" / name
    script.write_text(f"#!{venv_python(venv)}\n" + "".join(lines[1:]))
    script.chmod(0o755)
    return script


def python_in(venv: Path, code: str, *, cwd: Path, timeout: float = 120, **env: str) -> str:
    """Run `code` with `venv`'s interpreter in `cwd`; its stdout."""
    return run([venv_python(venv), "-c", code], cwd=cwd, env=clean_env(venv, **env), timeout=timeout).stdout
