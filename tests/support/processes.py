"""The processes a test started, found through a marker in their environment (Linux /proc), even after their
parent died: Dagster's run workers, Spark's JVM and Python workers, daemons. Killed by pid only while each is
still the same process (its start time), so a reused pid is never hit."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Proc", "alive", "descendants", "kill", "marked"]


@dataclass(frozen=True)
class Proc:
    """A live process: pid, parent, start time (to tell a reused pid), name and command line."""

    pid: int
    ppid: int
    started: int
    name: str
    cmdline: str


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:  # gone, or not ours to read
        return b""


def _stat(pid: int) -> tuple[str, list[str]] | None:
    """(name, the fields after the name) of /proc/<pid>/stat; None when the process is gone."""
    stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
    if ")" not in stat:
        return None
    return stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()


def marked(variable: str, value: str) -> dict[int, Proc]:
    """Live processes (zombies excluded) whose environment carries `variable=value`."""
    found = {}
    needle = f"{variable}={value}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or needle not in _read(f"/proc/{entry}/environ").split(b"\0"):
            continue
        stat = _stat(int(entry))
        if stat is None or stat[1][0] == "Z":
            continue
        name, fields = stat  # state, ppid, ..., starttime (field 22 of stat)
        cmdline = _read(f"/proc/{entry}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()
        found[int(entry)] = Proc(int(entry), int(fields[1]), int(fields[19]), name, cmdline)
    return found


def descendants(procs: Mapping[int, Proc], root: int) -> dict[int, Proc]:
    """`root` and every process below it in `procs`."""
    tree, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        if pid in procs:
            tree[pid] = procs[pid]
        frontier += [p.pid for p in procs.values() if p.ppid == pid]
    return tree


def alive(proc: Proc) -> bool:
    """Whether the process still runs (the same one: same start time; a zombie has ended)."""
    stat = _stat(proc.pid)
    return stat is not None and stat[1][0] != "Z" and int(stat[1][19]) == proc.started


def kill(procs: Mapping[int, Proc]) -> None:
    """SIGKILL these processes by pid, each only if it is still the same process."""
    for proc in procs.values():
        if alive(proc):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
