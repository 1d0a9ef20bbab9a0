"""Data files of a table sink (Delta Lake, Iceberg) that no version of the table references: what a commit that
never landed, or was refused or rolled back before any snapshot recorded it, leaves under `<table>/data/`.

Readers of a table read the files its versions list, so such files cost only space; `cohort audit` names them
and `--repair` deletes them. A file counts as referenced when any version the table still keeps lists it (the
current one or an older one kept for time travel: Iceberg's snapshots, Delta's log and checkpoint, where a
replay's removed files stay referenced until the table's own clean-up). Only files older than a grace period are
judged (`UNREFERENCED_GRACE_S`, the time taken from the caller's clock): a batch places its files before its
table commit, so a younger file may belong to a commit in flight.

Cost: one recursive listing of the data folder; the current version's file list; the older versions are read,
newest first, only while some old enough file is in none of the versions read so far (`unreferenced`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cohort.pipelines.tables.store import DATA_DIR, TableStore
from cohort.pipelines.tasks.writer import arrow_filesystem

__all__ = ["UNREFERENCED_GRACE_S", "DiskFile", "Unreferenced", "data_files_on_disk", "references", "unreferenced"]

UNREFERENCED_GRACE_S = 24 * 3600.0
"""How old a data file no version references must be before the audit names it and a repair deletes it: longer
than any batch takes from writing its files to its table commit."""


@dataclass(frozen=True, order=True)
class DiskFile:
    """A data file on disk: its path relative to the table root, size and modification time (epoch seconds)."""

    path: str
    size: int
    mtime: float


@dataclass(frozen=True)
class Unreferenced:
    """The outcome for one table: `old` files no version references (named and deleted by a repair), and how many
    `young` files no version references yet (a commit may be in flight: left alone)."""

    old: tuple[DiskFile, ...] = ()
    young: int = 0


def unreferenced(
    on_disk: Iterable[DiskFile], current: Iterable[str], older: Iterable[str], *, now: float, grace_s: float
) -> Unreferenced:
    """The files of `on_disk` that neither the current version's paths (`current`) nor an older version's
    (`older`, read lazily: only while some old enough file is still unaccounted for) reference."""
    live = set(current)
    left = [f for f in on_disk if f.path not in live]
    young = sum(1 for f in left if now - f.mtime < grace_s)
    candidates = {f.path: f for f in left if now - f.mtime >= grace_s}
    if candidates:
        for path in older:
            candidates.pop(path, None)
            if not candidates:
                break
    return Unreferenced(tuple(sorted(candidates.values())), young)


def _judged(parts: list[str]) -> bool:
    """A file the audit judges: a Parquet data file, no hidden name on its way (sidecars such as `.crc` files and
    markers are a writer's business)."""
    return parts[-1].endswith(".parquet") and not any(p.startswith(("_", ".")) for p in parts)


def data_files_on_disk(root: str) -> list[DiskFile]:
    """The Parquet files under `<root>/data/` (one recursive listing), paths relative to the root."""
    resolved = arrow_filesystem(f"{root.rstrip('/')}/{DATA_DIR}")
    if resolved is None:
        return []
    fs, base = resolved
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    found = []
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        parts = info.path[len(base.rstrip("/")) + 1 :].split("/")
        if _judged(parts):
            mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
            found.append(DiskFile("/".join([DATA_DIR, *parts]), int(info.size or 0), mtime))
    return sorted(found)


def references(table: TableStore) -> tuple[Iterable[str], Iterable[str]] | None:
    """(the current version's data file paths, an iterator of older versions' paths, newest first), relative to
    the table root; None for a store of another kind (nothing is judged)."""
    module = type(table).__module__
    if module == "cohort.pipelines.tables.iceberg.store":
        from cohort.pipelines.tables.iceberg.store import referenced_data_paths

        return referenced_data_paths(table)  # type: ignore[arg-type]
    if module == "cohort.pipelines.tables.delta.store":
        return _delta_references(table)
    return None


def _delta_references(table: Any) -> tuple[Iterable[str], Iterable[str]]:
    """The Delta table's active files, then every path an `add` or `remove` action of its log names: the commits
    newest first, then the checkpoints (what log clean-up kept of older versions)."""
    from deltalake import DeltaTable

    if not table.exists():
        return [], iter(())
    loaded = DeltaTable(table.root, storage_options=getattr(table, "_options", None))
    actions = loaded.get_add_actions(flatten=False)
    current = [unquote(str(p)) for p in actions.column("path").to_pylist()]
    return current, _delta_log_paths(table.root)


def _delta_log_paths(root: str) -> Iterator[str]:
    resolved = arrow_filesystem(f"{root.rstrip('/')}/_delta_log")
    if resolved is None:
        return
    fs, base = resolved
    infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    names = sorted((i.base_name for i in infos if i.type == pafs.FileType.File), reverse=True)
    for name in (n for n in names if n.endswith(".json") and n[:-5].isdigit()):
        with fs.open_input_stream(f"{base}/{name}") as stream:
            for line in stream.read().decode("utf-8").splitlines():
                action = json.loads(line) if line.strip() else {}
                for kind in ("add", "remove"):
                    if isinstance(action.get(kind), dict) and "path" in action[kind]:
                        yield unquote(str(action[kind]["path"]))
    for name in (n for n in names if ".checkpoint" in n and n.endswith(".parquet")):
        with fs.open_input_file(f"{base}/{name}") as handle:
            checkpoint = pq.read_table(handle, columns=["add", "remove"])
        for kind in ("add", "remove"):
            for action in checkpoint.column(kind).to_pylist():
                if action and action.get("path"):
                    yield unquote(str(action["path"]))
