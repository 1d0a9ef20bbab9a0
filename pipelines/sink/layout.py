"""The Parquet sink: staged writes moved into place with file-system renames, after the ledger commit.

Layout under a root (a local path or any Hadoop-compatible URI Spark can write):

    <root>/topic=<topic>/partition=<p>/<topic>-<p>-<from>-<until>.parquet/part-*.parquet

one directory per committed offset range, named by (topic, partition, from, until). A batch attempt writes
its ranges into `<root>/_staging/<attempt>/topic=<t>/partition=<p>/`, where the attempt id starts with a
digest of the run id (`attempt_id`). Before the ledger commit, each staged range gets two empty markers
(`prepare`): the attempt and the range's offsets. Only after the ledger accepted the commit is each range's
directory moved into place with one rename (`publish`); a batch whose commit is refused (a zombie) never
touches anything readers see, and its staging is deleted.

A batch that dies between its commit and its publish leaves committed offsets whose output waits in its
staging area. The next batch of the partition asks the ledger for the partition's last committed range and
the run that committed it, finds that run's staged range by its markers and publishes it (`complete`).

Publishing a committed range first deletes the partition's range directories that overlap it and do not
carry its attempt's marker: they cannot be committed (committed ranges never overlap), so they are leftovers
of an earlier version of this library, which published before committing. Crashes before the move leave
only `_staging`, which readers ignore (names starting with `_`). The staging area of an attempt killed before
its clean-up is deleted later, once nothing can need it (cohort.pipelines.sink.staging_gc decides, staging_collect
lists and deletes).

On an object store (`s3://`), which has no rename, each range directory holds one data file, copied into place
after its markers (cohort.pipelines.sink.object_publish): `prepare`, `publish` and `complete` hand over to it there.

Topic names are validated (cohort.common.names) before they reach a path; partitions must be ints >= 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cohort.common.names import validate_topic_name
from cohort.common.types import TopicPartition
from cohort.pipelines.sink.names import (
    MARKER_PREFIX,
    RANGE_PREFIX,
    STAGING,
    SinkError,
    attempt_id,
    attempt_run_tag,
    parse_range_dir,
    range_dir_name,
    run_tag,
)
from cohort.pipelines.tasks.spans import validate_partition

if TYPE_CHECKING:
    from cohort.pipelines.sink.counts import OutputShape

__all__ = [
    "MARKER_PREFIX",
    "RANGE_PREFIX",
    "STAGING",
    "DataDirLayout",
    "HadoopFs",
    "SinkError",
    "SinkFs",
    "SinkLayout",
    "SinkTarget",
    "StagedDirs",
    "TreeEntry",
    "attempt_id",
    "attempt_run_tag",
    "default_quarantine_root",
    "parse_range_dir",
    "range_dir_name",
    "run_tag",
]


def default_quarantine_root(sink_path: str) -> str:
    """Where the quarantine goes when none is given: `<sink>/_quarantine`, which Spark's readers of the sink skip."""
    return f"{sink_path.rstrip('/')}/_quarantine"


@dataclass(frozen=True)
class SinkTarget:
    """Where a batch's outputs land: the sink's and the quarantine's roots as given (local paths or URIs), and
    the sink's `table_format` (parquet: range directories under the roots; delta, iceberg: a table at each)."""

    sink_root: str
    quarantine_root: str
    table_format: str = "parquet"


@dataclass(frozen=True, order=True)
class TreeEntry:
    """A file or directory under a listed directory: its path relative to it ("" for the directory itself),
    whether it is a directory, and when it last changed (epoch seconds)."""

    path: str
    is_dir: bool
    mtime: float


class StagedDirs(Protocol):
    """Where a batch attempt's outputs are written before they are visible: a `SinkLayout`'s staging area, or a
    table's own data directories on an object store (`DataDirLayout`)."""

    def staging_root(self, attempt: str) -> str: ...
    def staged_range_dir(self, attempt: str, topic: str, partition: int) -> str: ...


@dataclass(frozen=True)
class DataDirLayout:
    """A table's data directories as the place one batch attempt's reading tasks write its files (a `StagedDirs`),
    used on an object store: each range's files go straight to its data directory (`directories`: (topic,
    partition, directory under `root`), made by cohort.pipelines.batch.table_sink), where readers see nothing until a
    commit references them, instead of into the staging area and then, one server-side copy each, into place.
    Pickled into the tasks."""

    root: str
    attempt: str
    directories: tuple[tuple[str, int, str], ...]

    def staging_root(self, attempt: str) -> str:
        """The attempt's staging area at the table's root (where nothing is written)."""
        if not attempt.isalnum():
            raise ValueError(f"attempt ids are alphanumeric, got {attempt!r}")
        return f"{self.root}/{STAGING}/{attempt}"

    def staged_range_dir(self, attempt: str, topic: str, partition: int) -> str:
        """The data directory of the partition's planned range; KeyError for a partition outside the plan,
        ValueError for another attempt."""
        if attempt != self.attempt:
            raise ValueError(f"this layout is attempt {self.attempt}'s, not {attempt}'s")
        for t, p, directory in self.directories:
            if (t, p) == (topic, partition):
                return f"{self.root}/{directory}"
        raise KeyError(f"{topic}-{partition} has no planned range in this batch")


class SinkFs(Protocol):
    """The file operations the sink needs: HadoopFs (any Hadoop URI, through the JVM) or
    cohort.pipelines.tasks.writer.ArrowFs (roots pyarrow reaches)."""

    def exists(self, uri: str) -> bool: ...
    def list_names(self, uri: str) -> list[str]: ...
    def delete(self, uri: str) -> None: ...
    def touch(self, uri: str) -> None: ...
    def rename(self, source: str, target: str) -> None: ...
    def parquet_record_count(self, uri: str) -> int: ...
    def offset_shape(self, uri: str) -> OutputShape: ...
    def make_dirs(self, uri: str) -> None: ...
    def can_swap(self, uri: str) -> bool: ...
    def swap(self, first: str, second: str) -> None: ...
    def link_tree(self, source: str, target: str) -> None: ...
    def write_offset_slice(
        self, source: str, target: str, from_offset: int, until_offset: int, *, name: str
    ) -> int: ...
    def object_store(self, uri: str) -> bool: ...
    def copy_file(self, source: str, target: str) -> None: ...
    def merge_parquet(self, sources: list[str], target: str, offsets: tuple[int, int] | None = None) -> int: ...


class HadoopFs:
    """The few Hadoop FileSystem operations the sink needs, through the driver's JVM (py4j).

    Works for any URI scheme the session's Hadoop configuration can open (file:, hdfs:, s3a:, abfs: ...).
    Needs a classic SparkSession (Spark Connect sessions have no driver JVM in this process).
    """

    def __init__(self, spark: Any) -> None:
        jvm = getattr(spark, "_jvm", None)
        if jvm is None:
            raise SinkError("the Parquet sink needs a classic SparkSession (not Spark Connect) to move files")
        self._jvm = jvm
        self._spark = spark
        self._conf = spark._jsc.hadoopConfiguration()

    def path(self, uri: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(uri)

    def _fs(self, path: Any) -> Any:
        return path.getFileSystem(self._conf)

    def exists(self, uri: str) -> bool:
        path = self.path(uri)
        return bool(self._fs(path).exists(path))

    def list_names(self, uri: str) -> list[str]:
        """Names directly under `uri`; [] when it does not exist."""
        path = self.path(uri)
        fs = self._fs(path)
        if not fs.exists(path):
            return []
        return sorted(status.getPath().getName() for status in fs.listStatus(path))

    def delete(self, uri: str) -> None:
        path = self.path(uri)
        fs = self._fs(path)
        if fs.exists(path) and not fs.delete(path, True):
            raise SinkError(f"could not delete {uri}")

    def touch(self, uri: str) -> None:
        path = self.path(uri)
        self._fs(path).create(path, True).close()

    def rename(self, source: str, target: str) -> None:
        """Move `source` to `target`, which must not exist; its parent is created."""
        src, dst = self.path(source), self.path(target)
        fs = self._fs(dst)
        if fs.exists(dst):
            raise SinkError(f"cannot move {source} to {target}: the target exists")
        fs.mkdirs(dst.getParent())
        if not fs.rename(src, dst):
            raise SinkError(f"could not move {source} to {target}")

    def make_dirs(self, uri: str) -> None:
        path = self.path(uri)
        self._fs(path).mkdirs(path)

    def tree(self, uri: str) -> list[TreeEntry]:
        """`uri` itself and everything under it, recursively, with modification times; [] when it does not
        exist (what the staging clean-up reads of an attempt: cohort.pipelines.sink.staging_collect)."""
        path = self.path(uri)
        fs = self._fs(path)
        if not fs.exists(path):
            return []
        root = fs.getFileStatus(path)
        found = [TreeEntry("", bool(root.isDirectory()), root.getModificationTime() / 1000.0)]
        pending = [("", path)] if root.isDirectory() else []
        while pending:
            prefix, current = pending.pop()
            for status in fs.listStatus(current):
                name = prefix + status.getPath().getName()
                found.append(TreeEntry(name, bool(status.isDirectory()), status.getModificationTime() / 1000.0))
                if status.isDirectory():
                    pending.append((f"{name}/", status.getPath()))
        return sorted(found)

    def can_swap(self, uri: str) -> bool:
        """Hadoop's FileSystem has no atomic swap of two directories."""
        return False

    def swap(self, first: str, second: str) -> None:
        raise SinkError(f"cannot swap {first} and {second} atomically through Hadoop's FileSystem")

    def link_tree(self, source: str, target: str) -> None:
        raise SinkError(f"cannot hard-link {source} through Hadoop's FileSystem")

    def write_offset_slice(self, source: str, target: str, from_offset: int, until_offset: int, *, name: str) -> int:
        raise SinkError(f"cannot rewrite {source} through Hadoop's FileSystem")

    def object_store(self, uri: str) -> bool:
        """Roots only Hadoop reaches publish by directory renames (not atomic on `s3a://`: docs/guarantees.md)."""
        return False

    def copy_file(self, source: str, target: str) -> None:
        raise SinkError(f"cannot copy {source} through Hadoop's FileSystem")

    def merge_parquet(self, sources: list[str], target: str, offsets: tuple[int, int] | None = None) -> int:
        raise SinkError(f"cannot rewrite {target} through Hadoop's FileSystem")

    def offset_shape(self, uri: str) -> OutputShape:
        """The rows of the Parquet files under `uri` by their `kafka.offset` (one aggregation job on Spark)."""
        from pyspark.sql import functions as F

        from cohort.pipelines.sink.counts import OutputShape

        if not self.exists(uri) or not any(n.endswith(".parquet") for n in self.list_names(uri)):
            return OutputShape(0, 0)
        offset = F.col("kafka.offset")
        row = (
            self._spark.read.parquet(uri)
            .agg(F.count(F.lit(1)), F.count_distinct(offset), F.min(offset), F.max(offset))
            .first()
        )
        return OutputShape(int(row[0]), int(row[1]), row[2], row[3])

    def parquet_record_count(self, uri: str) -> int:
        """Rows in the Parquet files directly under `uri`, from their footers (no data is read)."""
        path = self.path(uri)
        fs = self._fs(path)
        if not fs.exists(path):
            return 0
        parquet = self._jvm.org.apache.parquet.hadoop
        total = 0
        for status in fs.listStatus(path):
            name = status.getPath().getName()
            if name.startswith(("_", ".")) or not name.endswith(".parquet"):
                continue
            reader = parquet.ParquetFileReader.open(parquet.util.HadoopInputFile.fromPath(status.getPath(), self._conf))
            try:
                total += int(reader.getRecordCount())
            finally:
                reader.close()
        return total


@dataclass(frozen=True)
class SinkLayout:
    """Paths of one sink root; `attempt` names a batch attempt's staging area and its markers."""

    root: str

    def __post_init__(self) -> None:
        if not isinstance(self.root, str) or not self.root.strip():
            raise ValueError("the sink path must be a non-empty string (a local path or a Hadoop URI)")
        object.__setattr__(self, "root", self.root.rstrip("/") or "/")

    def partition_dir(self, topic: str, partition: int) -> str:
        validate_topic_name(topic)
        return f"{self.root}/topic={topic}/partition={validate_partition(topic, partition)}"

    def range_dir(self, topic: str, partition: int, from_offset: int, until_offset: int) -> str:
        name = range_dir_name(topic, partition, from_offset, until_offset)
        return f"{self.partition_dir(topic, partition)}/{name}"

    def staging_root(self, attempt: str) -> str:
        if not attempt.isalnum():
            raise ValueError(f"attempt ids are alphanumeric, got {attempt!r}")
        return f"{self.root}/{STAGING}/{attempt}"

    def staged_range_dir(self, attempt: str, topic: str, partition: int) -> str:
        validate_topic_name(topic)
        return f"{self.staging_root(attempt)}/topic={topic}/partition={validate_partition(topic, partition)}"

    def range_dirs(self, fs: SinkFs, topic: str, partition: int) -> list[tuple[int, int, str]]:
        """(from, until, path) of every range directory of a partition, in offset order."""
        found = []
        for name in fs.list_names(self.partition_dir(topic, partition)):
            parsed = parse_range_dir(name)
            if parsed is not None and parsed[:2] == (topic, partition):
                found.append((parsed[2], parsed[3], f"{self.partition_dir(topic, partition)}/{name}"))
        return sorted(found)

    def overlapped(
        self, fs: SinkFs, attempt: str, tp: TopicPartition, from_offset: int, until_offset: int
    ) -> list[tuple[int, int, str]]:
        """The partition's range directories holding offsets of [from, until) that this attempt did not write:
        what publishing the range replaces (a replay)."""
        marker = f"{MARKER_PREFIX}{attempt}"
        return [
            (x, y, path)
            for x, y, path in self.range_dirs(fs, tp.topic, tp.partition)
            if ((x < until_offset and from_offset < y) or x == y == from_offset == until_offset)
            and not fs.exists(f"{path}/{marker}")
        ]

    def prepare(self, fs: SinkFs, attempt: str, ranges: Mapping[TopicPartition, tuple[int, int]]) -> None:
        """Before the ledger commit: mark each staged range with its attempt and its offsets, so that a later
        batch can publish it if this one dies after its commit (`complete`). A range that would replace
        output the sink holds (a replay) is refused here, before anything is committed, where the sink's
        file system cannot swap directories atomically."""
        objects = fs.object_store(self.root)
        replays = set()
        for tp, (from_offset, until_offset) in sorted(ranges.items()):
            if self.overlapped(fs, attempt, tp, from_offset, until_offset):
                replays.add(tp)
                if not (objects or fs.can_swap(self.root)):
                    raise SinkError(
                        f"{tp}: offsets [{from_offset}, {until_offset}) are already in the sink at {self.root}, and "
                        "replacing them atomically needs a local file system that can swap directories (Linux "
                        "renameat2) or an object store (s3://); replay into such a sink root"
                    )
        for tp, (from_offset, until_offset) in sorted(ranges.items()):
            staged = self.staged_range_dir(attempt, tp.topic, tp.partition)
            if objects and fs.exists(staged):  # one data object per range (cohort.pipelines.sink.object_publish)
                from cohort.pipelines.sink.object_publish import single_object

                single_object(fs, staged, from_offset, until_offset)
            if fs.exists(staged) or (objects and tp in replays):  # a replay's deletions need marks here too
                fs.touch(f"{staged}/{MARKER_PREFIX}{attempt}")
                fs.touch(f"{staged}/{RANGE_PREFIX}{from_offset}-{until_offset}")

    def publish(self, fs: SinkFs, attempt: str, ranges: Mapping[TopicPartition, tuple[int, int]]) -> Iterator[str]:
        """Move each committed staged range into place (see the module doc), yielding each directory in place.

        A range whose offsets the sink holds already (a replay) replaces them in one step (`_replace`). A
        partition whose staging directory is missing (no rows of that kind, or another batch published this
        attempt's range already) gets no new directory. On an object store each range is one object, copied
        into place after its markers (cohort.pipelines.sink.object_publish).
        """
        if fs.object_store(self.root):
            from cohort.pipelines.sink.object_publish import publish

            yield from publish(fs, self, attempt, ranges)
            return
        for tp, (from_offset, until_offset) in sorted(ranges.items()):
            target = self.range_dir(tp.topic, tp.partition, from_offset, until_offset)
            marker = f"{MARKER_PREFIX}{attempt}"
            staged = self.staged_range_dir(attempt, tp.topic, tp.partition)
            replaced = self.overlapped(fs, attempt, tp, from_offset, until_offset)
            if replaced:
                self._replace(fs, attempt, tp, (from_offset, until_offset), replaced)
            elif fs.exists(staged) and not fs.exists(f"{target}/{marker}"):
                if not fs.exists(f"{staged}/{marker}"):
                    fs.touch(f"{staged}/{marker}")
                try:
                    fs.rename(staged, target)
                except Exception:
                    if not fs.exists(f"{target}/{marker}"):
                        raise
            if fs.exists(f"{target}/{marker}"):  # moved here, or by a batch completing this attempt's commit
                yield target

    def _replace(
        self,
        fs: SinkFs,
        attempt: str,
        tp: TopicPartition,
        offsets: tuple[int, int],
        replaced: list[tuple[int, int, str]],
    ) -> None:
        """Publish a replayed range: build the partition's next state in the attempt's staging area (untouched
        range directories hard-linked, those the range cuts rewritten without its offsets, the staged range
        added) and swap it with the live partition directory in one step (cohort.pipelines.sink.swap). Run
        again after a crash, it rebuilds the next state from scratch."""
        from_offset, until_offset = offsets
        live = self.partition_dir(tp.topic, tp.partition)
        following = f"{self.staging_root(attempt)}/next/topic={tp.topic}/partition={tp.partition}"
        fs.delete(following)
        fs.make_dirs(following)
        cut = {path for _x, _y, path in replaced}
        for x, y, path in self.range_dirs(fs, tp.topic, tp.partition):
            if path not in cut:
                fs.link_tree(path, f"{following}/{path.rsplit('/', 1)[1]}")
                continue
            for lo, hi in ((x, min(y, from_offset)), (max(x, until_offset), y)):
                if lo < hi:
                    kept = f"{following}/{range_dir_name(tp.topic, tp.partition, lo, hi)}"
                    if fs.write_offset_slice(path, kept, lo, hi, name=f"part-{lo}-{hi}.parquet"):
                        fs.touch(f"{kept}/{RANGE_PREFIX}{lo}-{hi}")
        staged = self.staged_range_dir(attempt, tp.topic, tp.partition)
        if fs.exists(staged):
            marker = f"{MARKER_PREFIX}{attempt}"
            if not fs.exists(f"{staged}/{marker}"):
                fs.touch(f"{staged}/{marker}")
            target = range_dir_name(tp.topic, tp.partition, from_offset, until_offset)
            fs.link_tree(staged, f"{following}/{target}")  # linked, not moved: `complete` may need it again
        fs.swap(following, live)
        fs.delete(following)  # the partition's previous state

    def complete(
        self, fs: SinkFs, run_id: str, tp: TopicPartition, from_offset: int, until_offset: int, rows: int
    ) -> bool:
        """Publish committed range [from, until) of `tp`, holding `rows` rows here, from the staging of run
        `run_id` if its directory is not in place (the run died between its commit and its publish); True
        when the directory is in place. A staged range whose row count differs is left alone."""
        if fs.object_store(self.root):
            from cohort.pipelines.sink.object_publish import complete_range

            return complete_range(fs, self, run_id, tp, (from_offset, until_offset), rows)
        target = self.range_dir(tp.topic, tp.partition, from_offset, until_offset)
        tag, marker = run_tag(run_id), f"{RANGE_PREFIX}{from_offset}-{until_offset}"
        if any(name.startswith(f"{MARKER_PREFIX}{tag}") for name in fs.list_names(target)):
            return True  # in place (a directory of the same range by another run is one a replay replaces)
        for attempt in fs.list_names(f"{self.root}/{STAGING}"):
            if not (attempt.isalnum() and attempt.startswith(tag)):
                continue
            staged = self.staged_range_dir(attempt, tp.topic, tp.partition)
            if fs.exists(f"{staged}/{marker}") and fs.parquet_record_count(staged) == rows:
                return any(True for _ in self.publish(fs, attempt, {tp: (from_offset, until_offset)}))
        return False

    def withdraw(self, fs: SinkFs, attempt: str, directories: Iterable[str]) -> None:
        """Delete the given range directories that still carry this attempt's marker (a clean-up for tools: a
        batch publishes only what the ledger accepted, so it never withdraws)."""
        for directory in directories:
            if fs.exists(f"{directory}/{MARKER_PREFIX}{attempt}"):
                fs.delete(directory)

    def discard_staging(self, fs: SinkFs, attempt: str) -> None:
        fs.delete(self.staging_root(attempt))
