"""How long a table sink (Delta Lake, Iceberg) keeps its old versions, and when the store cleans up: plain values
and pure decisions (cohort.pipelines.tables.maintenance applies them after a commit).

A group commits once per batch, for years: a table that keeps every version grows without bound (Iceberg's
metadata file lists every snapshot and each commit rewrites it, so its commit latency grows with the snapshot
count; Delta's log and the files replays removed pile up). What Cohort itself reads of old versions:

- replays, the batch flow and the orphan sweep read the current version only (the files it references);
- `last_batch` (adopting a table commit the ledger never saw): Iceberg keeps that record in table properties,
  which survive snapshot expiry; Delta reads it from the commit log, kept `history_s` (the newest version of a
  partition is adopted by the partition's next batch, minutes later, long before);
- the audit judges files on disk against every version the table keeps: a version expired with the files only it
  referenced deleted leaves nothing to judge.

So old versions are kept for readers' time travel only: `keep_s` (and always the newest `min_versions`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_RETENTION",
    "TableRetention",
    "delta_configuration",
    "expired_versions",
    "maintenance_due",
    "vacuum_hours",
]


@dataclass(frozen=True)
class TableRetention:
    """How long a table keeps old versions, and how often the store cleans up after its commits.

    `keep_s`: old versions (Iceberg snapshots, Delta versions and the files a replay removed) stay readable this
    long (time travel); `min_versions`: the newest versions kept whatever their age; `history_s`: how long Delta's
    commit log is kept (the batch records a commit the ledger never saw is adopted from; at least `keep_s`);
    `every_commits`: the clean-up runs after the commit that takes the table's version past a multiple of it;
    `compact_files`: the clean-up also merges a partition's small files (cohort.pipelines.tables.compaction) once at
    least this many consecutive ones were added more than `keep_s` ago (0: never); `compact_bytes`: the size a
    merged file stays within (files of half of it or more are left as they are).
    """

    keep_s: float = 3600.0
    min_versions: int = 10
    history_s: float = 6 * 3600.0
    every_commits: int = 50
    compact_files: int = 10
    compact_bytes: int = 128 * 1024 * 1024

    def __post_init__(self) -> None:
        if not (isinstance(self.keep_s, (int, float)) and math.isfinite(self.keep_s) and self.keep_s >= 0):
            raise ValueError(f"table retention keep_s must be a number of seconds >= 0, got {self.keep_s!r}")
        if not (isinstance(self.history_s, (int, float)) and math.isfinite(self.history_s)):
            raise ValueError(f"table retention history_s must be a number of seconds, got {self.history_s!r}")
        if self.history_s < self.keep_s:
            raise ValueError(
                f"table retention history_s ({self.history_s}) must be at least keep_s ({self.keep_s}): a version "
                "is readable only while the log holds it"
            )
        for name, least in (("min_versions", 1), ("every_commits", 1), ("compact_files", 0), ("compact_bytes", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"table retention {name} must be an integer >= {least}, got {value!r}")
        if self.compact_files == 1:
            raise ValueError("table retention compact_files must be 0 (never) or at least 2: one file is not merged")


DEFAULT_RETENTION = TableRetention()
"""An hour of time travel, the newest 10 versions, 6 hours of Delta log, a clean-up every 50 commits that also merges
runs of 10 or more small files older than the hour into files of up to 128 MiB."""

_DELTA_MARGIN_S = 24 * 3600.0
"""How much longer than `keep_s` Delta's own `delta.deletedFileRetentionDuration` is: a checkpoint forgets removed
files older than it, so the vacuum (at `keep_s`) must see them first."""


def maintenance_due(before: int, after: int, every: int) -> bool:
    """Whether the commit that moved the table from version `before` to `after` passed a multiple
    of `every`: the table's own version count paces the clean-up, whoever commits and however short-lived the
    store, so it runs about once per `every` commits (versions made concurrently by others count as well)."""
    return after // every > before // every


def expired_versions(
    versions: Sequence[tuple[int, int]],
    current: int | None,
    protected: frozenset[int],
    *,
    now_ms: int,
    retention: TableRetention,
) -> list[int]:
    """The ids of `versions` ((id, commit time in ms)) to expire: older than `keep_s` at `now_ms`, not among the
    newest `min_versions`, not the `current` one, not `protected` (branch and tag heads)."""
    newest_first = sorted(versions, key=lambda v: (v[1], v[0]), reverse=True)
    cutoff = now_ms - int(retention.keep_s * 1000)
    return sorted(
        vid
        for vid, at in newest_first[retention.min_versions :]
        if at < cutoff and vid != current and vid not in protected
    )


def vacuum_hours(retention: TableRetention) -> int:
    """The retention delta-rs's vacuum is given: `keep_s` rounded up to whole hours (its unit)."""
    return math.ceil(retention.keep_s / 3600)


def delta_configuration(retention: TableRetention) -> dict[str, str]:
    """The table properties a Delta table gets: its log kept `history_s`, removed files `keep_s` plus a margin."""
    return {
        "delta.logRetentionDuration": f"interval {math.ceil(retention.history_s)} seconds",
        "delta.deletedFileRetentionDuration": f"interval {math.ceil(retention.keep_s + _DELTA_MARGIN_S)} seconds",
    }
