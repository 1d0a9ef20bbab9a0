"""Deleting the staging areas batch attempts left behind: list them, read what the decision needs, delete what it
says (cohort.pipelines.sink.staging_gc decides; the rules are there).

What is read, in this order, so that a group running every minute pays little:

1. the names under each root's `_staging` (one listing per root): nothing else happens when no attempt is found,
   the usual case, since every batch deletes its own staging area;
2. the group record's live members (one read of the coordinator's store, `GroupView.live_runs`). Reading it after
   the listing is safe: a run that joins meanwhile counts as live, and one that left can no longer commit;
3. per attempt whose run is not a member: its tree (one recursive listing: modification times and markers);
4. only for attempts old enough that hold prepared ranges: the ledger's last committed range of those partitions,
   which of the ranges it records, and those partitions' range directories (with markers and row counts where a
   decision needs them).

Files are reached through the sink's file operations (`SinkFs`: pyarrow's or Hadoop's); the group and the ledger
through a `GroupView`, which `group_view` makes from a `Coordinator` or a batch's ledger (a `GroupMember` or a
standalone ledger) without importing the coordinator's layer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow.fs as pafs

from cohort.common.types import TopicPartition
from cohort.pipelines.sink.layout import (
    MARKER_PREFIX,
    RANGE_PREFIX,
    STAGING,
    HadoopFs,
    SinkFs,
    SinkLayout,
    TreeEntry,
    attempt_run_tag,
    run_tag,
)
from cohort.pipelines.sink.staging_gc import (
    STAGING_GRACE_S,
    FoundAttempt,
    GroupFacts,
    Output,
    RangeDir,
    StagedRange,
    StagingVerdict,
    decide_staging_gc,
)
from cohort.pipelines.tasks.writer import arrow_filesystem

__all__ = [
    "CoordinatorView",
    "GroupView",
    "LiveRuns",
    "StagingCollection",
    "StagingRoot",
    "collect_after_batch",
    "collect_staging",
    "group_view",
    "staging_roots",
    "tidy_staging",
    "tree",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveRuns:
    """The group's live members' client ids (run ids), and how many live members have none."""

    run_ids: frozenset[str] = frozenset()
    anonymous: int = 0


class GroupView(Protocol):
    """What the clean-up reads of the group and its ledger."""

    def live_runs(self) -> LiveRuns:
        """The live members' run ids, as the group record holds them now."""
        ...

    def last_committed(self, partitions: Sequence[TopicPartition]) -> Mapping[TopicPartition, Any]:
        """The last committed range per partition (`cohort.pipelines.planning.positions.CommittedRange`, or None)."""
        ...

    def recorded_ranges(
        self, tp: TopicPartition, wanted: Collection[tuple[int, int]]
    ) -> Collection[tuple[int, int]] | None:
        """Which of the (from, until) ranges `wanted` the ledger holds as committed ranges; None: cannot say."""
        ...


class _Coordinator(Protocol):
    """The `cohort.assignment.coordinator.Coordinator` methods the view calls (that layer is not imported here)."""

    def describe_group(self, group: str) -> Any: ...

    def last_committed(self, group: str, partitions: Sequence[TopicPartition]) -> Mapping[TopicPartition, Any]: ...

    def recorded_ranges(
        self, group: str, topic: str, partition: int, wanted: Collection[tuple[int, int]]
    ) -> set[tuple[int, int]]: ...


@dataclass(frozen=True)
class CoordinatorView:
    """A `GroupView` of group `group` through a coordinator: `describe_group` (the record as of the coordinator's
    clock: members past their session deadline are gone), `last_committed` and `recorded_ranges`."""

    coordinator: _Coordinator
    group: str

    def live_runs(self) -> LiveRuns:
        members = self.coordinator.describe_group(self.group).members
        ids = [m.client_id for m in members]
        return LiveRuns(frozenset(i for i in ids if i), sum(1 for i in ids if not i))

    def last_committed(self, partitions: Sequence[TopicPartition]) -> Mapping[TopicPartition, Any]:
        return self.coordinator.last_committed(self.group, partitions)

    def recorded_ranges(
        self, tp: TopicPartition, wanted: Collection[tuple[int, int]]
    ) -> Collection[tuple[int, int]] | None:
        return self.coordinator.recorded_ranges(self.group, tp.topic, tp.partition, wanted)


def group_view(source: Any, group: str | None = None) -> CoordinatorView | None:
    """The view of a `Coordinator` (give `group`), or of a batch's ledger (`GroupMember`, `StandaloneLedger`: their
    coordinator and group); None when `source` is neither (a plain `OffsetLedger`: nothing can be collected)."""
    coordinator = getattr(source, "coordinator", source)
    name = group if group is not None else getattr(source, "group", None)
    needed = ("describe_group", "last_committed", "recorded_ranges")
    if not isinstance(name, str) or not all(callable(getattr(coordinator, m, None)) for m in needed):
        return None
    return CoordinatorView(coordinator, name)


@dataclass(frozen=True)
class StagingRoot:
    """An output root whose `_staging` is collected, and what it belongs to."""

    root: str
    output: Output


def staging_roots(sink_path: str, quarantine_root: str, table_format: str = "parquet") -> tuple[StagingRoot, ...]:
    """The staging roots of a sink: the Parquet sink's and quarantine's roots, or a table sink's two table roots."""
    sink, quarantine = SinkLayout(sink_path).root, SinkLayout(quarantine_root).root
    if table_format == "parquet":
        return StagingRoot(sink, "sink"), StagingRoot(quarantine, "quarantine")
    return StagingRoot(sink, "table"), StagingRoot(quarantine, "table")


@dataclass(frozen=True)
class StagingCollection:
    """What a collection found and did: a verdict per attempt, the areas deleted, names under `_staging` left
    alone (not attempt ids) and the areas whose deletion failed (path and error)."""

    verdicts: tuple[StagingVerdict, ...] = ()
    deleted: tuple[str, ...] = ()
    foreign: tuple[str, ...] = ()
    failed: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @property
    def kept(self) -> tuple[StagingVerdict, ...]:
        return tuple(v for v in self.verdicts if not v.delete)


def tree(fs: SinkFs, uri: str) -> list[TreeEntry]:
    """`uri` and everything under it with modification times: through Hadoop's FileSystem for a `HadoopFs`, else
    through pyarrow (the roots `ArrowFs` reaches); [] when it does not exist."""
    if isinstance(fs, HadoopFs):
        return fs.tree(uri)
    resolved = arrow_filesystem(uri)
    if resolved is None:
        return []
    filesystem, base = resolved
    top = filesystem.get_file_info(base)
    if top.type == pafs.FileType.NotFound:
        return []
    found = [TreeEntry("", top.type == pafs.FileType.Directory, _mtime(top))]
    if top.type == pafs.FileType.Directory:
        prefix = len(base.rstrip("/")) + 1
        for info in filesystem.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True)):
            found.append(TreeEntry(info.path[prefix:], info.type == pafs.FileType.Directory, _mtime(info)))
    return sorted(found)


def _mtime(info: pafs.FileInfo) -> float:
    return info.mtime.timestamp() if info.mtime is not None else 0.0


def _found(root: StagingRoot, attempt: str, entries: Sequence[TreeEntry]) -> FoundAttempt:
    """The attempt as its tree shows it: the newest modification time, and each staged partition's markers."""
    if not entries:  # gone since the listing (its batch ended): nothing to judge by its age
        return FoundAttempt(root.root, root.output, attempt, None)
    marks: dict[tuple[str, int], StagedRange] = {}
    for entry in entries:
        parts = entry.path.split("/")
        if len(parts) < 2 or not (parts[0].startswith("topic=") and parts[1].startswith("partition=")):
            continue
        topic, number = parts[0].removeprefix("topic="), parts[1].removeprefix("partition=")
        if not number.isdigit():
            continue
        key = (topic, int(number))
        staged = marks.get(key, StagedRange(topic, int(number)))
        name = parts[2] if len(parts) == 3 else ""
        if name == f"{MARKER_PREFIX}{attempt}":
            staged = StagedRange(topic, int(number), staged.from_offset, staged.until_offset, True)
        elif name.startswith(RANGE_PREFIX):
            low, _, high = name.removeprefix(RANGE_PREFIX).partition("-")
            if low.isdigit() and high.isdigit():
                staged = StagedRange(topic, int(number), int(low), int(high), staged.attempt_marked)
        marks[key] = staged
    newest = max(entry.mtime for entry in entries)
    return FoundAttempt(root.root, root.output, attempt, newest, tuple(sorted(marks.values())))


def collect_staging(
    fs: SinkFs,
    roots: Iterable[StagingRoot],
    view: GroupView,
    *,
    now: float,
    grace_s: float = STAGING_GRACE_S,
    execute: bool = True,
) -> StagingCollection:
    """Find the attempts under each root's `_staging`, decide (`decide_staging_gc`) and, with `execute`, delete
    the areas it condemns (see the module doc for what is read); `now` in epoch seconds, the clock the file
    system's modification times follow. A deletion that fails is reported in `failed`, not raised."""
    listed: list[tuple[StagingRoot, str]] = []
    foreign: list[str] = []
    for root in roots:
        parent = f"{root.root}/{STAGING}"
        for name in fs.list_names(parent):
            if attempt_run_tag(name) is None:
                foreign.append(f"{parent}/{name}")
            else:
                listed.append((root, name))
    if not listed:
        return StagingCollection(foreign=tuple(foreign))
    live = view.live_runs()
    live_tags = {run_tag(run) for run in live.run_ids}
    attempts = [
        FoundAttempt(root.root, root.output, name)  # a live run's: kept whatever its tree holds, not read
        if attempt_run_tag(name) in live_tags
        else _found(root, name, tree(fs, f"{root.root}/{STAGING}/{name}"))
        for root, name in listed
    ]
    facts = _ledger_facts(fs, view, attempts, live, now=now, grace_s=grace_s)
    verdicts = decide_staging_gc(attempts, facts, now=now, grace_s=grace_s)
    deleted: list[str] = []
    failed: list[tuple[str, str]] = []
    for verdict in verdicts:
        if verdict.delete and execute:
            try:
                fs.delete(verdict.path)
                deleted.append(verdict.path)
            except Exception as exc:  # another member's clean-up removed it first, or the store refused
                failed.append((verdict.path, f"{type(exc).__name__}: {exc}"))
    return StagingCollection(verdicts, tuple(deleted), tuple(foreign), tuple(failed))


def _ledger_facts(
    fs: SinkFs, view: GroupView, attempts: Sequence[FoundAttempt], live: LiveRuns, *, now: float, grace_s: float
) -> GroupFacts:
    """The group facts, reading the ledger and the range directories only for the prepared ranges of attempts the
    cheaper checks do not keep already (not a live run's, old enough, a Parquet output)."""
    live_tags = {run_tag(run) for run in live.run_ids}
    candidates = [
        a
        for a in attempts
        if a.output != "table"
        and not live.anonymous
        and attempt_run_tag(a.attempt) not in live_tags
        and a.modified is not None
        and now - a.modified >= grace_s
    ]
    prepared = [(a, r) for a in candidates for r in a.ranges if r.prepared]
    if not prepared:
        return GroupFacts(live.run_ids, live.anonymous)
    tps = sorted({r.tp for _, r in prepared})
    last = dict(view.last_committed(tps))
    wanted: dict[TopicPartition, set[tuple[int, int]]] = {}
    for _, r in prepared:
        if r.from_offset is not None and r.until_offset is not None and r.from_offset < r.until_offset:
            wanted.setdefault(r.tp, set()).add((r.from_offset, r.until_offset))
    recorded = _recorded(view, wanted)
    in_place: dict[tuple[str, TopicPartition], list[RangeDir]] = {}
    for a, r in prepared:
        key = (a.root, r.tp)
        if key not in in_place:
            in_place[key] = _range_dirs(fs, a.root, r.tp, last.get(r.tp))
    return GroupFacts(live.run_ids, live.anonymous, last, recorded, in_place)


def _recorded(
    view: GroupView, wanted: Mapping[TopicPartition, Collection[tuple[int, int]]]
) -> dict[TopicPartition, Collection[tuple[int, int]]] | None:
    """Which of the `wanted` ranges the ledger records per partition; None as soon as it cannot say."""
    recorded: dict[TopicPartition, Collection[tuple[int, int]]] = {}
    for tp, pairs in sorted(wanted.items()):
        found = view.recorded_ranges(tp, pairs)
        if found is None:
            return None
        recorded[tp] = frozenset(found)
    return recorded


def _range_dirs(fs: SinkFs, root: str, tp: TopicPartition, last: Any) -> list[RangeDir]:
    """The partition's range directories under `root`; the one of the ledger's last committed range with its
    markers and row count (what tells whether that range is published)."""
    dirs = []
    for low, high, path in SinkLayout(root).range_dirs(fs, tp.topic, tp.partition):
        if last is not None and (low, high) == (last.from_offset, last.until_offset):
            names = fs.list_names(path)
            attempts = frozenset(n.removeprefix(MARKER_PREFIX) for n in names if n.startswith(MARKER_PREFIX))
            dirs.append(RangeDir(low, high, attempts, fs.parquet_record_count(path)))
        else:
            dirs.append(RangeDir(low, high))
    return dirs


def collect_after_batch(
    fs: SinkFs,
    roots: Iterable[StagingRoot],
    ledger: Any,
    *,
    now: float,
    grace_s: float = STAGING_GRACE_S,
) -> StagingCollection | str | None:
    """The clean-up a batch runs after its publish: `collect_staging` through the batch's ledger (`group_view`).
    None when the ledger cannot show the group (nothing is collected); an error message instead of raising (the
    batch's commit stands whatever happens here)."""
    view = group_view(ledger)
    if view is None:
        return None
    try:
        return collect_staging(fs, roots, view, now=now, grace_s=grace_s)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def tidy_staging(fs: SinkFs, roots: Iterable[StagingRoot], ledger: Any) -> None:
    """What a batch calls after its publish: `collect_after_batch` at the wall clock's time; a failure is logged
    and left for the next batch (the batch's commit stands whatever happens here)."""
    outcome = collect_after_batch(fs, roots, ledger, now=time.time())
    if isinstance(outcome, str):
        log.warning("staging clean-up skipped: %s", outcome)
