"""`cohort audit` as the tests run it: the command in a subprocess with `--json`, its report's problems by
partition, and a directory tree's relative paths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

COHORT = str(Path(sys.executable).with_name("cohort"))


def cohort_audit(*args: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run([COHORT, "audit", *args, "--json"], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


def problems(report: dict[str, Any]) -> dict[int, list[tuple[str, str | None]]]:
    found = {p["partition"]: [(x["where"], x["repair"]) for x in p["problems"]] for p in report["partitions"]}
    return {partition: listed for partition, listed in found.items() if listed}


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))
