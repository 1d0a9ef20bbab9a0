"""A throwaway PostgreSQL server for tests: initdb + pg_ctl from Debian's package, on a loopback port.

Debian keeps the server binaries under /usr/lib/postgresql/<version>/bin (not on PATH), and initdb refuses
to run as root, so as root the server runs as the `postgres` system user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
from pathlib import Path

import sqlalchemy as sa

__all__ = ["PostgresServer", "find_pg_bin"]


def find_pg_bin() -> Path:
    """The directory holding initdb and pg_ctl (newest installed version)."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not candidates:
        raise RuntimeError(
            "PostgreSQL server binaries not found (initdb); install Debian's 'postgresql' package "
            "(make test does this with apt-get)"
        )
    return Path(candidates[-1]).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One PostgreSQL cluster in `root`, trust authentication on 127.0.0.1 only."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.port = _free_port()
        self.bin = find_pg_bin()
        self._as_postgres = os.geteuid() == 0

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")

    def start(self) -> None:
        if self._as_postgres:
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            # the parents must be traversable by the postgres user
            for parent in self.root.parents:
                if str(parent).startswith("/tmp/"):
                    os.chmod(parent, os.stat(parent).st_mode | 0o711)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options, "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database `name` (a safe identifier) and return its SQLAlchemy URL."""
        if not name.replace("_", "").isalnum():
            raise ValueError(f"unsafe database name {name!r}")
        engine = sa.create_engine(self.url(), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()
        return self.url(name)
