"""Store contention: 8 processes x 1,000 protocol steps on ONE group, SQLite and PostgreSQL.

Usage:
    python -m benchmarks.contention [--processes 8] [--steps 1000] [--no-postgres]

Each spawned process runs members through join / sync / heartbeat / commit / leave cycles, one raw
coordinator call per step (harness/reliability/contention_worker.py); afterwards the store is checked
against everything the processes saw accepted (harness/reliability/contention_checks.py: every commit in the
ledger exactly once, admissions and leaves recorded once, consecutive generations, the group version
between accepted writes and calls, no double ownership). A failed check raises.

The last line printed is one JSON object: per backend, the calls made, accepted, refused by code, commits,
generations, the group row's version, wall seconds of the slowest process and calls/s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.reliability.contention_checks import verify
from harness.reliability.contention_worker import run_contention

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def postgres() -> Iterator[str | None]:
    """A throwaway PostgreSQL server (harness/postgres.py); None if it cannot be started."""
    root = Path(tempfile.mkdtemp(prefix="cohort-bench-pg-"))
    try:
        from harness.postgres import PostgresServer

        server = PostgresServer(root)
        server.start()
    except Exception as exc:  # no server binaries here: report, measure the rest
        print(f"PostgreSQL not measured: {exc}", file=sys.stderr)
        shutil.rmtree(root, ignore_errors=True)
        yield None
        return
    try:
        yield server.create_database("contention")
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def measure(url: str, processes: int, steps: int) -> dict[str, Any]:
    """One contention run on `url`, checked; its figures plus the total wall time (spawn included)."""
    started = time.perf_counter()
    results = run_contention(url, processes, steps, timeout=900)
    figures = verify(url, results)
    figures["total_s"] = round(time.perf_counter() - started, 2)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    out: dict[str, Any] = {"processes": args.processes, "steps": args.steps}
    with tempfile.TemporaryDirectory(prefix="cohort-bench-contention-") as tmp:
        out["sqlite"] = measure(f"sqlite:///{Path(tmp) / 'cohort.db'}", args.processes, args.steps)
        print("sqlite:", json.dumps(out["sqlite"]), flush=True)
    if not args.no_postgres:
        with postgres() as url:
            out["postgres"] = None if url is None else measure(url, args.processes, args.steps)
            print("postgres:", json.dumps(out["postgres"]), flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
