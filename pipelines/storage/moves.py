"""Placing a batch's staged files on a root without directories (an object store: S3, GCS), where a "rename" is a
server-side copy of each object.

A table sink places each partition's staged output into its data directory before the table commit references it
(cohort.pipelines.batch.table_sink): readers see nothing of it until then, so the placing need not be atomic, only
repeatable. `copy_files` lists the staged directories at once, then copies every file with one bounded pool of
threads (`cohort.pipelines.storage.parallel`: each copy is one server-side request; the partitions' files all side
by side, not partition after partition), reading each footer on the way: the table commit needs the rows and the
schema. The staged copies stay where they are: the batch deletes its whole staging area at its end in bulk, where
deleting each one here would cost more requests than its copy (pyarrow checks that an object exists before deleting
it, then keeps its "directory" alive with a marker). Run again after a crash, it copies the same files to the same
names again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

__all__ = ["PlacedFile", "copy_files", "is_object_store"]

_OBJECT_STORES: tuple[type[pafs.FileSystem], ...] = tuple(
    getattr(pafs, name) for name in ("S3FileSystem", "GcsFileSystem") if hasattr(pafs, name)
)


def is_object_store(fs: pafs.FileSystem) -> bool:
    """Whether `fs` is one of pyarrow's object stores (no directories, no rename)."""
    return isinstance(fs, _OBJECT_STORES)


@dataclass(frozen=True)
class PlacedFile:
    """A Parquet file copied into place: its `source` and `target` directories (paths of the file system), its
    `name`, `size`, `rows` and Arrow `schema` (from its footer)."""

    source: str
    target: str
    name: str
    size: int
    rows: int
    schema: pa.Schema


def _data_files(fs: pafs.FileSystem, directories: Mapping[str, str]) -> list[pafs.FileInfo]:
    """The Parquet data files directly under each source directory (names starting with `_` or `.` left out), found
    with one recursive listing of the directories' common parent (not one listing per directory)."""
    parent = os.path.commonpath(list(directories)) if len(directories) > 1 else next(iter(directories))
    infos = fs.get_file_info(pafs.FileSelector(parent, recursive=True, allow_not_found=True))
    return sorted(
        (
            i
            for i in infos
            if i.is_file
            and i.path.rsplit("/", 1)[0] in directories
            and i.base_name.endswith(".parquet")
            and i.base_name[0] not in "_."
        ),
        key=lambda i: i.path,
    )


def _copy(fs: pafs.FileSystem, info: pafs.FileInfo, target: str) -> PlacedFile:
    """Read the footer of one staged file (its size from the listing: one request, no size asked for first), then
    copy it to `target`. Imported here: pyarrow.dataset loads pandas, which the executors (who import
    `is_object_store`) need not."""
    import pyarrow.dataset as ds

    fragment = ds.ParquetFileFormat().make_fragment(info.path, filesystem=fs, file_size=info.size)
    assert isinstance(fragment, ds.ParquetFileFragment)
    rows, schema = fragment.metadata.num_rows, fragment.physical_schema
    fs.copy_file(info.path, f"{target}/{info.base_name}")
    source = info.path.rsplit("/", 1)[0]
    return PlacedFile(source, target, info.base_name, int(info.size or 0), rows, schema)


def copy_files(fs: pafs.FileSystem, directories: Mapping[str, str]) -> list[PlacedFile]:
    """Copy the Parquet data files directly under each source directory of `directories` (source -> target, paths
    of `fs`) into its target, a bounded number at a time; the files copied, in the order of their source paths.
    (`in_parallel` imported here: the executors import this module for `is_object_store` only.)"""
    from cohort.pipelines.storage.parallel import in_parallel

    if not directories:
        return []
    return in_parallel(
        lambda info: _copy(fs, info, directories[info.path.rsplit("/", 1)[0]]), _data_files(fs, directories)
    )
