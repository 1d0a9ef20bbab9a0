"""The data files of an Iceberg table as Cohort's sink sees them: a batch's files checked before its commit, the
current snapshot's files read from its manifests (no scan planning, no metrics decoding), and every file the
table's snapshots reference, relative to the table's root."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile
from pyiceberg.manifest import DataFile as IcebergFile
from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Table

from cohort.pipelines.tables.store import DataFile, NewFile, parse_data_path

__all__ = [
    "ReportedFooters",
    "check_files_exist",
    "live_files",
    "referenced_paths",
    "relative_path",
    "snapshot_entries",
]


def check_files_exist(root: str, adds: Sequence[NewFile]) -> None:
    """Refuse a batch whose files are not all under `root` with the sizes it wrote (before any commit)."""
    if not adds:
        return
    for new in adds:
        if parse_data_path(new.path, new.records) is None:
            raise ValueError(f"{new.path} is not a data file path of Cohort's layout (data/topic=.../...)")
    filesystem, base = pafs.FileSystem.from_uri(root)
    infos = filesystem.get_file_info([f"{base}/{new.path}" for new in adds])
    for new, info in zip(adds, infos, strict=True):
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(f"{new.path} does not exist under {root}: the batch's file is missing")
        if info.size != new.size:
            raise ValueError(f"{new.path} under {root} is {info.size} bytes, the batch wrote {new.size}")


def live_files(table: Table, root: str) -> Iterator[tuple[DataFile, IcebergFile]]:
    """The data files of the table's current snapshot that follow Cohort's layout under `root`."""
    for entry, relative, added_ms in snapshot_entries(table, root):
        data = entry.data_file
        ours = None
        if relative is not None:
            ours = parse_data_path(relative, data.record_count, size=data.file_size_in_bytes, added_ms=added_ms)
        if ours is not None:
            yield ours, data


def snapshot_entries(table: Table, root: str) -> Iterator[tuple[Any, str | None, int | None]]:
    """The live data entries of the current snapshot: the entry, its path relative to `root` (None outside it), and
    when the snapshot that added it was made (None when the table no longer keeps that snapshot)."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return
    made = {s.snapshot_id: s.timestamp_ms for s in table.metadata.snapshots}
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            added = None if entry.snapshot_id is None else made.get(entry.snapshot_id)
            yield entry, relative_path(root, entry.data_file.file_path), added


def relative_path(root: str, location: str) -> str | None:
    """`location` relative to `root` (`file:` schemes aside), None when it lies outside it."""
    path, base = _without_file_scheme(location), _without_file_scheme(root)
    return path[len(base) + 1 :] if path.startswith(base + "/") else None


def _without_file_scheme(location: str) -> str:
    """A location without its `file://` or `file:` scheme."""
    if location.startswith("file://"):
        return location[len("file://") :]
    return location[len("file:") :] if location.startswith("file:/") else location


def referenced_paths(table: Table, root: str) -> tuple[list[str], Iterator[str]]:
    """(the data files the current snapshot holds, then, lazily, those every other snapshot the table keeps holds,
    newest first, each manifest read once), as paths relative to `root` (files elsewhere are left out)."""
    seen: set[str] = set()

    def paths(snapshot: Any) -> Iterator[str]:
        for manifest in snapshot.manifests(table.io):
            if manifest.content != ManifestContent.DATA or manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                relative = relative_path(root, entry.data_file.file_path)
                if relative is not None:
                    yield relative

    current = table.current_snapshot()
    listed = list(paths(current)) if current is not None else []
    others = sorted(
        (s for s in table.metadata.snapshots if current is None or s.snapshot_id != current.snapshot_id),
        key=lambda s: s.timestamp_ms,
        reverse=True,
    )
    return listed, (path for snapshot in others for path in paths(snapshot))


class _FooterOnly(InputFile):
    """A data file as pyiceberg reads it for its statistics: its real size, and as its content its footer alone (a
    footer-only Parquet file, which pyarrow's metadata reader reads as it reads the file's own)."""

    def __init__(self, location: str, size: int, footer: pq.FileMetaData) -> None:
        super().__init__(location)
        self._size = size
        stream = pa.BufferOutputStream()
        footer.write_metadata_file(stream)
        self._footer = stream.getvalue()

    def __len__(self) -> int:
        return self._size

    def exists(self) -> bool:
        return True

    def open(self, seekable: bool = True) -> InputStream:
        return pa.BufferReader(self._footer)


class ReportedFooters(FileIO):
    """A FileIO that serves one data file from the size and footer its writer reported, so pyiceberg's statistics of
    it (`parquet_file_to_data_file`) fetch nothing; it serves only that file, for reading."""

    def __init__(self, location: str, size: int, footer: pq.FileMetaData) -> None:
        super().__init__()
        self._file = _FooterOnly(location, size, footer)

    def new_input(self, location: str) -> InputFile:
        if location != self._file.location:
            raise ValueError(f"only {self._file.location} is served here, not {location}")
        return self._file

    def new_output(self, location: str) -> OutputFile:
        raise NotImplementedError("reported footers are read-only")

    def delete(self, location: str | InputFile | OutputFile) -> None:
        raise NotImplementedError("reported footers are read-only")
