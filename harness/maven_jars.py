"""Jars a pinned pom names, resolved once by Maven and kept in the user's cache folder, keyed by the pom's hash.

The test broker (harness/kafka/pom.xml), Spark's own Kafka source (harness/spark_kafka/pom.xml) and Hadoop's S3A file
system for Spark (harness/spark_s3/pom.xml) come this way:
Maven's default configuration resolves the pom's runtime dependencies on first use (`offline`: from ~/.m2 only),
later runs need neither Maven nor the network.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["MavenJarsError", "cached_jars", "jars_pyspark_lacks"]

_VERSIONED = re.compile(r"^(?P<name>.+?)-\d[\w.\-]*\.jar$")


class MavenJarsError(RuntimeError):
    """Maven is missing, or could not resolve the pom."""


def _cache_root(kind: str) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cohort" / kind


def cached_jars(pom: Path, kind: str, *, offline: bool = False) -> Path:
    """The folder holding the runtime jars `pom` names: `~/.cache/cohort/<kind>/<pom hash>`, copied there by Maven
    on first use. Instant once cached; concurrent first uses each resolve and the first rename wins."""
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    folder = _cache_root(kind) / digest
    if folder.is_dir():  # only ever created by the rename below, so complete
        return folder
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenJarsError(
            f"the jars of {pom} are not cached in {folder} and Maven (mvn) is not installed to resolve them: "
            "install Debian's 'maven' package (`make system-deps` does)"
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{digest}.partial-", dir=folder.parent))
    command = [mvn, "-q", "-B", *(["-o"] if offline else []), "-f", str(pom), "dependency:copy-dependencies"]
    command += [f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
            raise MavenJarsError(f"Maven could not resolve {pom} (exit {done.returncode}):\n{tail}")
        try:
            staging.rename(folder)
        except OSError:  # another process cached the same pom first
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _artifact(jar: Path) -> str:
    found = _VERSIONED.match(jar.name)
    return found.group("name") if found else jar.stem


def jars_pyspark_lacks(folder: Path) -> list[Path]:
    """The jars under `folder` whose artifact PySpark does not ship itself, sorted: what a session adds
    (`spark.jars`), never a second copy of a jar PySpark has (Scala, Hadoop, netty, snappy ...)."""
    import pyspark

    shipped = {_artifact(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(jar for jar in folder.glob("*.jar") if _artifact(jar) not in shipped)
