"""Publishing committed ranges on an object store (`s3://`, `gs://`), where a "rename" is a copy and a delete.

On a local disk or HDFS a range directory moves into place with one rename (cohort.pipelines.sink.layout). An object
store has no directories and no rename; what it does atomically is make ONE object appear whole (a PUT, the
completion of a multipart upload, a server-side copy). So on an object store a range is one data object:

- before the ledger commit (`single_object`), each staged range directory is made to hold one data file,
  `part-<from>-<until>.parquet` (the files of its spans merged when there are several);
- after the commit, publishing a range (`place`) is, in this order: the hidden markers into the range directory
  (`_cohort_attempt=`, `_cohort_range=`: no reader reads them), ONE server-side copy of the data file (the moment
  the whole range becomes visible), then the deletion of the staged data file (so no later batch, and no zombie
  of this attempt, has anything left to copy). The steps are decided by `publish_steps` from what the store holds,
  so running them again after a crash at any point finishes the publish and never copies twice;
- a range directory holding data but not the attempt's marker is someone else's (a replay's): never overwritten.

A replay (offsets the sink holds) cannot swap directories there: `replace_range` first builds, in the attempt's
staging area (`next/`, then marked built), the rows the replay keeps of the range directories it cuts; then deletes
the replaced directories (the staged output of their attempts first, so nothing can copy them back), then places
the kept slices and the range. Between the first deletion and the last copy the replaced offsets are missing,
never doubled; a crash there is finished by the next batch's complete step (or `cohort audit --repair`), which runs
the same steps from the built state (docs/guarantees.md, "On object stores").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from cohort.common.types import TopicPartition
from cohort.pipelines.sink.names import (
    MARKER_PREFIX,
    RANGE_PREFIX,
    STAGING,
    SinkError,
    parse_range_dir,
    range_dir_name,
    run_tag,
)


class ObjectFs(Protocol):
    """The file operations a publish on an object store makes (cohort.pipelines.tasks.writer.ArrowFs has them)."""

    def exists(self, uri: str) -> bool: ...
    def list_names(self, uri: str) -> list[str]: ...
    def delete(self, uri: str) -> None: ...
    def touch(self, uri: str) -> None: ...
    def rename(self, source: str, target: str) -> None: ...
    def copy_file(self, source: str, target: str) -> None: ...
    def parquet_record_count(self, uri: str) -> int: ...
    def merge_parquet(self, sources: list[str], target: str, offsets: tuple[int, int] | None = None) -> int: ...
    def write_offset_slice(
        self, source: str, target: str, from_offset: int, until_offset: int, *, name: str
    ) -> int: ...


class Layout(Protocol):
    """The paths of one output root a publish needs (cohort.pipelines.sink.layout.SinkLayout)."""

    @property
    def root(self) -> str: ...
    def range_dir(self, topic: str, partition: int, from_offset: int, until_offset: int) -> str: ...
    def staging_root(self, attempt: str) -> str: ...
    def staged_range_dir(self, attempt: str, topic: str, partition: int) -> str: ...
    def overlapped(
        self, fs: Any, attempt: str, tp: TopicPartition, from_offset: int, until_offset: int
    ) -> list[tuple[int, int, str]]: ...


__all__ = [
    "BUILT",
    "Layout",
    "ObjectFs",
    "PublishStep",
    "TargetState",
    "complete_range",
    "in_place",
    "place",
    "publish",
    "publish_steps",
    "range_file_name",
    "replace_range",
    "single_object",
]

BUILT = "_cohort_built"
"""Marks a replay's `next/` area complete: from then on its slices are placed as they are, never rebuilt (the
range directories they were cut from may be gone)."""

PublishStep = Literal["mark", "copy", "drop_staged"]


def range_file_name(from_offset: int, until_offset: int) -> str:
    """The one data file of a range directory on an object store."""
    return f"part-{from_offset}-{until_offset}.parquet"


def _data_files(names: list[str]) -> list[str]:
    return [n for n in names if n.endswith(".parquet") and n[0] not in "_."]


@dataclass(frozen=True)
class TargetState:
    """What the store holds of one range's publish: whether its directory carries the attempt's marker and its data
    file, whether it holds data of another attempt (`foreign`), and whether the staged data file is still there."""

    marked: bool
    placed: bool
    foreign: bool
    staged: bool


def publish_steps(state: TargetState) -> tuple[PublishStep, ...] | None:
    """The steps left to publish a range, in order; None when its directory is someone else's (data without this
    attempt's marker: a replay placed it), which must not be overwritten. Markers come before the data and the
    data before the staged file's deletion, so every crash leaves a state this answers for."""
    if state.foreign:
        return None
    if state.marked and state.placed:
        return ("drop_staged",) if state.staged else ()
    if not state.staged:
        return ()  # nothing staged here: no rows of this output, or a zombie whose output another batch dropped
    return ("copy", "drop_staged") if state.marked else ("mark", "copy", "drop_staged")


def _state(fs: ObjectFs, source: str, target: str, attempt: str, from_offset: int, until_offset: int) -> TargetState:
    names = fs.list_names(target)
    marked = f"{MARKER_PREFIX}{attempt}" in names
    data = _data_files(names)
    placed = range_file_name(from_offset, until_offset) in data
    return TargetState(marked, placed, bool(data) and not marked, fs.exists(source))


def place(fs: ObjectFs, source: str, target: str, attempt: str, offsets: tuple[int, int]) -> bool:
    """Publish the data file `source` as range directory `target` (see the module doc); True when it is in place."""
    from_offset, until_offset = offsets
    steps = publish_steps(_state(fs, source, target, attempt, from_offset, until_offset))
    if steps is None:
        raise SinkError(
            f"cannot publish {source} as {target}: the directory holds another attempt's data (a replay replaced the "
            "range); a committed range is never overwritten"
        )
    for step in steps:
        if step == "mark":
            fs.touch(f"{target}/{RANGE_PREFIX}{from_offset}-{until_offset}")
            fs.touch(f"{target}/{MARKER_PREFIX}{attempt}")
        elif step == "copy":
            fs.copy_file(source, f"{target}/{range_file_name(from_offset, until_offset)}")
        else:
            fs.delete(source)
    return in_place(fs, target, attempt, offsets)


def in_place(fs: ObjectFs, target: str, attempt: str, offsets: tuple[int, int]) -> bool:
    """Whether range directory `target` carries `attempt`'s marker and its data file (one listing)."""
    names = fs.list_names(target)
    return f"{MARKER_PREFIX}{attempt}" in names and range_file_name(*offsets) in names


def single_object(fs: ObjectFs, staged: str, from_offset: int, until_offset: int) -> None:
    """Before the ledger commit: make staged range directory `staged` hold one data file, `part-<from>-<until>.parquet`
    (its files merged when there are several, moved when one has another name). A crash here leaves staging that
    nothing committed: it is never published."""
    name = range_file_name(from_offset, until_offset)
    files = _data_files(fs.list_names(staged))
    if files == [name] or not files:
        return
    if len(files) == 1:
        fs.rename(f"{staged}/{files[0]}", f"{staged}/{name}")
        return
    fs.merge_parquet([f"{staged}/{f}" for f in files], f"{staged}/{name}")
    for f in files:
        fs.delete(f"{staged}/{f}")


def _next_area(layout: Layout, attempt: str, tp: TopicPartition) -> str:
    return f"{layout.staging_root(attempt)}/next/topic={tp.topic}/partition={tp.partition}"


def pending_replace(fs: ObjectFs, layout: Layout, attempt: str, tp: TopicPartition) -> bool:
    """Whether a replay of this attempt built its next state for `tp` and has not finished placing it."""
    return fs.exists(f"{_next_area(layout, attempt, tp)}/{BUILT}")


def _withdraw(fs: ObjectFs, layout: Layout, tp: TopicPartition, path: str) -> None:
    """Delete a replaced range directory: first the staged output its attempts may still hold (a zombie of theirs
    then has nothing to copy back), then the directory (its one data object, then its markers)."""
    for name in fs.list_names(path):
        if name.startswith(MARKER_PREFIX):
            owner = name.removeprefix(MARKER_PREFIX)
            if owner.isalnum():
                fs.delete(layout.staged_range_dir(owner, tp.topic, tp.partition))
    fs.delete(path)


def replace_range(
    fs: ObjectFs,
    layout: Layout,
    attempt: str,
    tp: TopicPartition,
    offsets: tuple[int, int],
    replaced: list[tuple[int, int, str]],
) -> None:
    """Publish a replayed range over the directories `replaced` (see the module doc): build the kept slices once,
    delete the replaced directories, place the slices, then the range. Run again after a crash, it goes on from
    what the store holds."""
    from_offset, until_offset = offsets
    following = _next_area(layout, attempt, tp)
    if not fs.exists(f"{following}/{BUILT}"):
        fs.delete(following)
        for x, y, path in replaced:
            for lo, hi in ((x, min(y, from_offset)), (max(x, until_offset), y)):
                if lo < hi:
                    kept = f"{following}/{range_dir_name(tp.topic, tp.partition, lo, hi)}"
                    fs.write_offset_slice(path, kept, lo, hi, name=range_file_name(lo, hi))
        fs.touch(f"{following}/{BUILT}")
    for _x, _y, path in replaced:
        _withdraw(fs, layout, tp, path)
    for name in fs.list_names(following):
        parsed = parse_range_dir(name)
        if parsed is not None:
            lo, hi = parsed[2], parsed[3]
            source = f"{following}/{name}/{range_file_name(lo, hi)}"
            place(fs, source, layout.range_dir(tp.topic, tp.partition, lo, hi), attempt, (lo, hi))
    staged = layout.staged_range_dir(attempt, tp.topic, tp.partition)
    target = layout.range_dir(tp.topic, tp.partition, from_offset, until_offset)
    place(fs, f"{staged}/{range_file_name(from_offset, until_offset)}", target, attempt, offsets)
    fs.delete(following)


def publish(
    fs: ObjectFs, layout: Layout, attempt: str, ranges: Mapping[TopicPartition, tuple[int, int]]
) -> Iterator[str]:
    """Publish each committed range of `attempt` (the layout's `publish` on an object store); yield each range
    directory in place. Only a range the attempt prepared (its staged markers) is published: a zombie whose staged
    output a replay withdrew touches nothing. Reads one listing of each partition folder (the replay check) and of
    each range directory."""
    for tp, offsets in sorted(ranges.items()):
        target = layout.range_dir(tp.topic, tp.partition, *offsets)
        staged = layout.staged_range_dir(attempt, tp.topic, tp.partition)
        pending = pending_replace(fs, layout, attempt, tp)
        if pending or fs.exists(f"{staged}/{RANGE_PREFIX}{offsets[0]}-{offsets[1]}"):  # else: nothing of ours
            replaced = layout.overlapped(fs, attempt, tp, *offsets)
            if replaced or pending:
                replace_range(fs, layout, attempt, tp, offsets, replaced)
            else:
                place(fs, f"{staged}/{range_file_name(*offsets)}", target, attempt, offsets)
        if in_place(fs, target, attempt, offsets):
            yield target


def complete_range(
    fs: ObjectFs, layout: Layout, run_id: str, tp: TopicPartition, offsets: tuple[int, int], rows: int
) -> bool:
    """The layout's `complete` on an object store: finish publishing committed range `offsets` of run `run_id`
    (`rows` rows in this output) if it is not in place, from the run's staging; True when nothing is left to do.
    Finds a publish killed at any step: markers without data, data without the staged file's deletion, a replay's
    deletions without its placements."""
    from_offset, until_offset = offsets
    target = layout.range_dir(tp.topic, tp.partition, from_offset, until_offset)
    tag = run_tag(run_id)
    names = fs.list_names(target)
    marked = any(name.startswith(f"{MARKER_PREFIX}{tag}") for name in names)
    if rows and marked and range_file_name(from_offset, until_offset) in names:
        return True
    for attempt in fs.list_names(f"{layout.root}/{STAGING}"):
        if not (attempt.isalnum() and attempt.startswith(tag)):
            continue
        staged = layout.staged_range_dir(attempt, tp.topic, tp.partition)
        prepared = fs.exists(f"{staged}/{RANGE_PREFIX}{from_offset}-{until_offset}")
        ready = prepared and fs.parquet_record_count(staged) == rows
        if ready or pending_replace(fs, layout, attempt, tp):
            done = any(True for _ in publish(fs, layout, attempt, {tp: offsets}))
            return done or not rows
    return not rows
