"""Every application transaction (`txn`) of one Delta table version, read in one pass over its log.

delta-rs answers `transaction_version(app_id)` one app id at a time, replaying the log since the last checkpoint for
each; a batch reads three marks per partition, several times. `read_transactions` reads the checkpoint's `txn`
column and the JSON entries after it once, as the Delta protocol defines them (the newest `txn` of an app id wins),
through delta-rs's own object store (what the table reaches). It answers None whenever the log is not the plain
shape it reads (no hint of a checkpoint at or before the version, a V2 or sidecar checkpoint, a missing entry, a
transaction retention that expires txns): the caller then asks delta-rs app id by app id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cohort.pipelines.storage.parallel import in_parallel

__all__ = ["TXN_RETENTION", "LogTxns", "read_entry", "read_transactions"]

TXN_RETENTION = "delta.setTransactionRetentionDuration"
"""The table property that expires old txns (delta-rs drops them from its answers): such tables are not read here."""

_LOG = "_delta_log"


@dataclass(frozen=True)
class LogTxns:
    """What one pass over the log up to a version found: the txns (app id -> version), the table's id (its newest
    `metaData`; None if none was read) and the bytes of the version's own entry (what tells a table re-created at
    the same root, and at the same version, from the one read)."""

    txns: dict[str, int]
    table_id: str | None
    entry: bytes


def _read_bytes(fs: pafs.FileSystem, path: str) -> bytes | None:
    """The object at `path`, None when it does not exist."""
    try:
        with fs.open_input_stream(path) as stream:
            return bytes(stream.read())
    except FileNotFoundError:
        return None


def _checkpoint(fs: pafs.FileSystem, version: int) -> tuple[int, list[str]] | None:
    """(checkpoint version, its files) from `_last_checkpoint`, (-1, []) without one; None when the hint is not a
    classic checkpoint at or before `version` (a newer writer's, a V2 checkpoint) or cannot be read."""
    raw = _read_bytes(fs, f"{_LOG}/_last_checkpoint")
    if raw is None:
        return -1, []
    try:
        hint = json.loads(raw)
        at, parts = int(hint["version"]), hint.get("parts")
    except (ValueError, KeyError, TypeError):
        return None
    if at > version or "v2Checkpoint" in hint:
        return None
    if parts is None:
        return at, [f"{_LOG}/{at:020d}.checkpoint.parquet"]
    count = int(parts)
    return at, [f"{_LOG}/{at:020d}.checkpoint.{i:010d}.{count:010d}.parquet" for i in range(1, count + 1)]


def _checkpoint_txns(fs: pafs.FileSystem, path: str) -> tuple[dict[str, int], str | None] | None:
    """The `txn` actions and the table id (`metaData`) of one checkpoint file (those columns only are read); None if
    the file is missing."""
    try:
        with fs.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            columns = [c for c in ("txn", "metaData") if c in parquet.schema_arrow.names]
            read = parquet.read(columns=columns)
    except FileNotFoundError:
        return None
    txns: list[Any] = read.column("txn").drop_null().to_pylist() if "txn" in columns else []
    metadata: list[Any] = read.column("metaData").drop_null().to_pylist() if "metaData" in columns else []
    table_id = str(metadata[-1]["id"]) if metadata else None
    return {str(t["appId"]): int(t["version"]) for t in txns}, table_id


def read_entry(fs: pafs.FileSystem, version: int) -> bytes | None:
    """The bytes of the log entry of `version`, None if it does not exist."""
    return _read_bytes(fs, f"{_LOG}/{version:020d}.json")


def _entry_txns(raw: bytes | None) -> tuple[dict[str, int], str | None] | None:
    """The `txn` actions of one JSON log entry in order (a later one of the same app id wins) and the table id of
    its `metaData`, if any; None for a missing entry."""
    if raw is None:
        return None
    found: dict[str, int] = {}
    table_id: str | None = None
    for line in raw.splitlines():
        if b'"txn"' in line or b'"metaData"' in line:
            action = json.loads(line)
            if isinstance(action.get("txn"), dict):
                found[str(action["txn"]["appId"])] = int(action["txn"]["version"])
            if isinstance(action.get("metaData"), dict):
                table_id = str(action["metaData"]["id"])
    return found, table_id


def read_transactions(fs: pafs.FileSystem, version: int, configuration: Mapping[str, str | None]) -> LogTxns | None:
    """The txns of the table at `version` (`fs`: the table's root, delta-rs's object store; the table's
    `configuration`), or None when this reader does not apply (see the module doc)."""
    if TXN_RETENTION in configuration:
        return None
    start = _checkpoint(fs, version)
    if start is None:
        return None
    at, files = start
    parts = in_parallel(lambda path: _checkpoint_txns(fs, path), files)
    raws = in_parallel(lambda v: read_entry(fs, v), list(range(at + 1, version + 1)))
    found: dict[str, int] = {}
    table_id: str | None = None
    for part in [*parts, *map(_entry_txns, raws)]:  # the checkpoint first, then the entries in version order
        if part is None:
            return None
        found.update(part[0])
        table_id = part[1] or table_id
    entry = raws[-1] if raws else None
    if entry is None:  # the version is the checkpoint's: its entry tells this table from a re-created one
        entry = read_entry(fs, version)
    return None if entry is None else LogTxns(found, table_id, entry)
