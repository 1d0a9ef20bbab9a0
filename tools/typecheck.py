"""Type-check the product packages under their installed names: `make lint` and `make test` run this.

pyproject.toml maps the layer folders under one import root (`common/` installs as `cohort.common`, ...), and the
editable install resolves them with an import hook that mypy cannot follow. This script lays out
build/typecheck/cohort/ as relative symlinks (each entry of `cohort/`, plus one link per mapped folder, read from
[tool.setuptools.package-dir]), runs `mypy -p cohort` with MYPYPATH=build/typecheck, and prints the reported
paths as the repository's files (`build/typecheck/cohort/common/x.py` -> `common/x.py`). Extra arguments go to
mypy. The tree is brought up to date on every run, in place, so concurrent runs do not break each other.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = Path("build/typecheck")


def _link(link: Path, target: Path) -> None:
    relative = os.path.relpath(target, link.parent)
    if link.is_symlink() and os.readlink(link) == relative:
        return
    if link.is_symlink() or link.is_file():
        link.unlink(missing_ok=True)
    with contextlib.suppress(FileExistsError):  # a concurrent run made the same link
        link.symlink_to(relative, target_is_directory=target.is_dir())


def build_tree() -> dict[str, str]:
    """Lay out TREE; returns {path prefix mypy reports: repository path prefix}, longest first."""
    package_dir: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    root = ROOT / TREE / "cohort"
    root.mkdir(parents=True, exist_ok=True)
    wanted = {entry.name: entry for entry in (ROOT / package_dir["cohort"]).iterdir() if entry.name != "__pycache__"}
    prefixes = {f"{TREE}/cohort/": f"{package_dir['cohort']}/"}
    for name, folder in package_dir.items():
        if name != "cohort":  # cohort.common -> build/typecheck/cohort/common -> common/
            wanted[name.removeprefix("cohort.")] = ROOT / folder
            prefixes[f"{TREE}/{name.replace('.', '/')}/"] = f"{folder}/"
    for stale in set(os.listdir(root)) - set(wanted):
        (root / stale).unlink(missing_ok=True)
    for name, target in wanted.items():
        _link(root / name, target)
    return dict(sorted(prefixes.items(), key=lambda kv: -len(kv[0])))


def main() -> int:
    os.chdir(ROOT)
    prefixes = build_tree()
    command = [sys.executable, "-m", "mypy", "-p", "cohort", *sys.argv[1:]]
    proc = subprocess.run(command, env={**os.environ, "MYPYPATH": str(TREE)}, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout.splitlines():
        for reported, real in prefixes.items():
            if line.startswith(reported):
                line = real + line[len(reported) :]
                break
        print(line)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
