"""The data files of a Delta table as Cohort's sink sees them: the table's `add` actions read as files of Cohort's
layout, and a commit's `add` and `remove` actions. delta-rs checks nothing about an added file (a missing file or a
wrong size commits fine and breaks every later read), so each one is checked here first."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, RemoveAction

from cohort.pipelines.tables.delta.errors import DeltaStoreError, short_error
from cohort.pipelines.tables.delta.stats import parquet_stats
from cohort.pipelines.tables.store import DataFile, NewFile, parse_data_path

__all__ = ["active_files", "checked_add_action", "remove_actions"]

_RELATIVE_PATH = re.compile(r"[A-Za-z0-9._=+-]+(/[A-Za-z0-9._=+-]+)*")


def active_files(actions: pa.Table) -> list[DataFile]:
    """The files of the table's flattened `add` actions in Cohort's layout (a file without a row count in its stats
    counts 0 rows), with their sizes and the time their `add` says."""
    columns = ("path", "num_records", "size_bytes", "modification_time")
    paths, counts, sizes, times = (actions.column(c).to_pylist() for c in columns)
    parsed = (
        parse_data_path(str(path), int(count or 0), size=int(size or 0), added_ms=_epoch_ms(at))
        for path, count, size, at in zip(paths, counts, sizes, times, strict=True)
    )
    return [f for f in parsed if f is not None]


def remove_actions(actions: pa.Table, removes: Sequence[DataFile]) -> list[RemoveAction]:
    """The `remove` of each file, with the size the table's `add` actions (not flattened) record for it."""
    sizes = dict(zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist(), strict=True))
    now = _now_ms()
    return [RemoveAction(f.path, data_change=True, deletion_timestamp=now, size=sizes.get(f.path)) for f in removes]


def checked_add_action(root: str, filesystem: pafs.FileSystem, new: NewFile) -> AddAction:
    """The `add` of a file the batch wrote under the table's `root`, after checking through `filesystem` (the table's
    own object store) that it is where and what the batch says: its size, and its rows and statistics from its
    footer (the one its writer reported, else read from the file)."""
    if not _RELATIVE_PATH.fullmatch(new.path) or any(part in (".", "..") for part in new.path.split("/")):
        raise ValueError(
            f"data file {new.path!r} of Delta table {root}: paths are relative to the table root and made "
            "of letters, digits and . _ = + - (no '..', no scheme, no leading '/')"
        )
    try:
        info = filesystem.get_file_info(new.path)
    except (OSError, DeltaError) as error:
        raise DeltaStoreError(f"cannot reach {root}/{new.path}: {short_error(error)}") from error
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(f"data file {root}/{new.path} does not exist: nothing was committed")
    if info.size != new.size:
        raise ValueError(
            f"data file {root}/{new.path} has {info.size} bytes, the batch says {new.size}: "
            "nothing was committed (a partial or replaced file?)"
        )
    try:
        metadata = new.footer if new.footer is not None else pq.read_metadata(new.path, filesystem=filesystem)
    except (OSError, DeltaError, pa.ArrowException) as error:
        raise ValueError(f"data file {root}/{new.path} is not a readable Parquet file: {short_error(error)}") from error
    if metadata.num_rows != new.records:
        raise ValueError(
            f"data file {root}/{new.path} holds {metadata.num_rows} rows, the batch says {new.records}: "
            "nothing was committed"
        )
    return AddAction(
        path=new.path,
        size=new.size,
        partition_values={},
        modification_time=_now_ms(),
        data_change=True,
        stats=parquet_stats(metadata),
    )


def _now_ms() -> int:
    """The time now in epoch ms, as the log's actions record it."""
    return int(time.time() * 1000)


def _epoch_ms(value: Any) -> int | None:
    """An `add` action's modification time (a datetime, or epoch ms) in epoch ms."""
    if isinstance(value, dt.datetime):
        return int((value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp() * 1000)
    return int(value) if isinstance(value, int) else None
