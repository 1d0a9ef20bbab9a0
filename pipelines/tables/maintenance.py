"""The clean-up a table store runs after some of its commits (cohort.pipelines.tables.retention decides what and
when): Iceberg's snapshot expiry with the files only expired snapshots referenced, Delta's vacuum and log clean-up.

It runs after the batch's commit has landed, outside the compare-and-set: a clean-up that fails or loses a race is
logged and left for the next one, never an error of the batch. What it deletes no live version references:

- Iceberg: the snapshots `expired_versions` names are removed in one catalog commit (which the catalog refuses if
  the table moved meanwhile); only then are the manifest lists of those snapshots deleted, their manifests no kept
  snapshot lists, and the data files they marked deleted (a replay's replaced files) that the current snapshot
  does not hold. Files a commit in flight adds are in no expired snapshot, so they are never candidates.
- both: Cohort's compaction of small files (cohort.pipelines.tables.compaction), after a batch's commit only: its
  own commit is guarded like a batch's, and the files it replaces go with a later clean-up, `keep_s` on.
- Delta: delta-rs's vacuum (lite: the files its log says were removed more than `keep_s` ago, never a file a
  live version or an in-flight commit references) and `cleanup_metadata` (log entries older than the table's
  `delta.logRetentionDuration`, before its last checkpoint).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from cohort.pipelines.tables.retention import TableRetention, expired_versions, vacuum_hours
from cohort.pipelines.tables.store import Owner, TableStore

__all__ = ["ICEBERG_PROPERTIES", "compact_files", "expire_iceberg", "run_safely", "vacuum_delta"]

_log = logging.getLogger(__name__)

ICEBERG_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "4",
}
"""What a retained Iceberg table sets: old metadata files deleted past the newest 20, and small manifests merged once
there are 4 (a fast append adds one manifest per commit, which every later commit's manifest list carries and reads:
at 20 a commit read up to 20 manifests, twice commit 10's latency)."""


def expire_iceberg(table: Any, retention: TableRetention, relative: Callable[[str], str | None]) -> int:
    """Expire `table`'s (a pyiceberg Table) old snapshots and delete the files only they referenced; the number
    of snapshots expired. `relative`: a location's path under the table root, None outside it (never deleted)."""
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    metadata = table.metadata
    current = table.current_snapshot()
    protected = frozenset(
        ref.snapshot_id
        for ref in metadata.refs.values()
        if ref.snapshot_ref_type in (SnapshotRefType.TAG, SnapshotRefType.BRANCH)
    )
    versions = [(s.snapshot_id, s.timestamp_ms) for s in metadata.snapshots]
    expired = set(
        expired_versions(
            versions,
            None if current is None else current.snapshot_id,
            protected,
            now_ms=int(time.time() * 1000),
            retention=retention,
        )
    )
    missing = {k: v for k, v in ICEBERG_PROPERTIES.items() if metadata.properties.get(k) != v}
    if not expired and not missing:
        return 0
    doomed = _only_expired(table, expired, relative) if expired else []
    from cohort.pipelines.tables.iceberg.transaction import MetadataOnceTransaction

    tx = MetadataOnceTransaction(table)  # expiring by id reads the staged metadata once per snapshot
    if missing:
        tx.set_properties(missing)
    if expired:
        ExpireSnapshots(tx).by_ids(sorted(expired)).commit()
    tx.commit_transaction()  # refused (CommitFailedException) if another commit moved the table: nothing deleted
    _delete(table.io, doomed)
    return len(expired)


def _only_expired(table: Any, expired: set[int], relative: Callable[[str], str | None]) -> list[str]:
    """The locations only the `expired` snapshots reference: their manifest lists, their manifests no kept
    snapshot lists, and the data files their manifests mark deleted that the current snapshot does not hold."""
    from pyiceberg.manifest import ManifestContent, ManifestEntryStatus

    io = table.io
    kept_manifests: set[str] = set()
    gone_manifests: dict[str, Any] = {}
    lists: list[str] = []
    for snapshot in table.metadata.snapshots:
        manifests = snapshot.manifests(io)
        if snapshot.snapshot_id in expired:
            lists.append(snapshot.manifest_list)
            gone_manifests.update((m.manifest_path, m) for m in manifests)
        else:
            kept_manifests.update(m.manifest_path for m in manifests)
    deleted: set[str] = set()
    for manifest in gone_manifests.values():
        if manifest.content != ManifestContent.DATA or manifest.added_snapshot_id not in expired:
            continue
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
            if entry.status == ManifestEntryStatus.DELETED:
                deleted.add(entry.data_file.file_path)
    current = table.current_snapshot()
    if deleted and current is not None:
        for manifest in current.manifests(io):
            if manifest.content == ManifestContent.DATA:
                deleted -= {e.data_file.file_path for e in manifest.fetch_manifest_entry(io, discard_deleted=True)}
    data = sorted(p for p in deleted if (rel := relative(p)) is not None and rel.startswith("data/"))
    manifests = sorted(p for p in gone_manifests if p not in kept_manifests)
    return [*data, *manifests, *lists]


def _delete(io: Any, locations: Iterable[str]) -> None:
    for location in locations:
        try:
            io.delete(location)
        except FileNotFoundError:
            pass
        except OSError as error:  # left behind: the audit names an old unreferenced data file, a repair deletes it
            _log.warning("could not delete %s after expiring its snapshot: %s", location, error)


def vacuum_delta(table: Any, retention: TableRetention) -> int:
    """delta-rs's vacuum of `table` (a DeltaTable) at `keep_s`, then its log clean-up; the files deleted.

    The vacuum's retention is shorter than the table's `delta.deletedFileRetentionDuration` (`keep_s` plus a
    margin: see table_retention), so the table's own check is bypassed on purpose: the files it deletes are those
    its log says were removed more than `keep_s` ago, which no live version references."""
    deleted = table.vacuum(
        retention_hours=vacuum_hours(retention), dry_run=False, enforce_retention_duration=False, full=False
    )
    table.cleanup_metadata()
    return len(deleted)


def compact_files(table: TableStore, group: str, retention: TableRetention) -> int:
    """Cohort's compaction (cohort.pipelines.tables.compaction) of every partition of `table` whose marks `group`
    holds, the marks' own generation kept; the number of files it replaced."""
    from cohort.pipelines.tables.compaction import compact_table

    done = compact_table(table, Owner(group, None), retention, now_ms=int(time.time() * 1000))
    return done.files_removed


def run_safely(what: str, call: Callable[[], int]) -> int | None:
    """`call()`; a failure is logged (the batch's commit has landed: a clean-up is never its error), None."""
    try:
        return call()
    except Exception as error:  # any failure of a clean-up waits for the next one
        _log.warning("table clean-up of %s skipped: %s", what, str(error).splitlines()[0] if str(error) else error)
        return None
