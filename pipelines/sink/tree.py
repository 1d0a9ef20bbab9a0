"""What Parquet readers read under an output root (the sink's or the quarantine's), and what of it Cohort's layout
does not account for: the audit's view of the sink as readers see it, whatever the names on disk.

Readers of a directory of Parquet files (measured, not assumed; tests/pipelines/sink/test_tree.py keeps the rules):

- **Spark** (`spark.read.parquet(root)`) reads every file of the tree, recursively and whatever its extension,
  except under a name starting with `.`, or with `_` unless the name holds `=` (`_x=1` is read), names ending in
  `._COPYING_`, empty files, and files directly at the root beside the `topic=` folders;
- **pyarrow** (`pyarrow.dataset.dataset(root)`, `pyarrow.parquet.read_table(root)`) reads every file of the tree,
  whatever its extension, except under a name starting with `_` or `.`;
- **DuckDB** skips nothing by name: `read_parquet` reads what its glob matches, hidden names included (a `**`
  glob descends into `_staging` and `_quarantine`). docs/sink.md gives it the layout's own glob,
  `<root>/topic=*/partition=*/*/*.parquet`, which matches `.parquet` files at the range directories' depth.

Cohort's layout (docs/sink.md) accounts for the data files of range directories only:
`topic=<t>/partition=<p>/<t>-<p>-<from>-<until>.parquet/<name>.parquet` (a name not starting with `_` or `.`),
for a partition the ledger holds; whether each range directory is a committed range is the ledger comparison's
business (cohort.pipelines.sink.audit). Everything else a reader reads is a `Stray`, named by the shortest path
that leaves the layout (a copied range directory, a range directory in another partition's folder, a file at
the root...). The walk lists each partition folder once, recursively, and skips subtrees no reader enters.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow.fs as pafs

from cohort.common.types import TopicPartition
from cohort.pipelines.sink.layout import SinkError, parse_range_dir
from cohort.pipelines.tasks.writer import arrow_filesystem

__all__ = [
    "DUCKDB_GLOB",
    "Entry",
    "OutputTree",
    "Stray",
    "data_file_name",
    "entered",
    "readers_of",
    "strays",
]

DUCKDB_GLOB = "topic=*/partition=*/*/*.parquet"
"""The glob under an output root that DuckDB's `read_parquet` is given (docs/sink.md)."""
SPARK, PYARROW, DUCKDB = "Spark", "pyarrow", "DuckDB"


@dataclass(frozen=True, order=True)
class Entry:
    """One file or directory under an output root: its path's names relative to the root, and its size."""

    parts: tuple[str, ...]
    is_dir: bool = False
    size: int = 0


@dataclass(frozen=True)
class Stray:
    """Something readers read that the layout does not account for: `parts` (relative to the root) names it, `tp`
    the partition folder it lies in (None: outside every partition folder of the ledger), `files` how many files
    readers read there, `readers` which ones, `reason` how it leaves the layout."""

    parts: tuple[str, ...]
    tp: TopicPartition | None
    files: int
    readers: tuple[str, ...]
    reason: str

    def describe(self, root: str) -> str:
        """`<root>/<path> (<n> files read by ...): <reason>` for a finding."""
        kind = f"{self.files} file{'' if self.files == 1 else 's'}"
        return f"{root.rstrip('/')}/{'/'.join(self.parts)} ({kind} read by {_listed(self.readers)}): {self.reason}"


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _spark_hides(name: str) -> bool:
    return name.startswith(".") or (name.startswith("_") and "=" not in name) or name.endswith("._COPYING_")


def _pyarrow_hides(name: str) -> bool:
    return name.startswith(("_", "."))


def readers_of(parts: Sequence[str], size: int) -> tuple[str, ...]:
    """The readers that read the file at `parts` (relative to the root) of `size` bytes."""
    found = []
    if size > 0 and len(parts) > 1 and not any(_spark_hides(p) for p in parts):
        found.append(SPARK)
    if not any(_pyarrow_hides(p) for p in parts):
        found.append(PYARROW)
    if _duckdb_reaches(parts) and len(parts) == 4 and parts[3].endswith(".parquet"):
        found.append(DUCKDB)
    return tuple(found)


def _duckdb_reaches(parts: Sequence[str]) -> bool:
    """Whether DuckDB's glob may match a file at or under `parts` (a directory prefix or a file)."""
    return (
        len(parts) <= 4
        and (len(parts) < 1 or parts[0].startswith("topic="))
        and (len(parts) < 2 or parts[1].startswith("partition="))
    )


def entered(parts: Sequence[str]) -> bool:
    """Whether some reader reads files under the directory `parts`: the walk skips the subtrees none enters
    (`_staging`, `_quarantine`, `.hidden`...)."""
    spark = not any(_spark_hides(p) for p in parts)
    pyarrow = not any(_pyarrow_hides(p) for p in parts)
    return spark or pyarrow or (_duckdb_reaches(parts) and len(parts) < 4)


def data_file_name(name: str) -> bool:
    """A data file of a range directory: `*.parquet`, not hidden (what the row counts count)."""
    return name.endswith(".parquet") and not name.startswith(("_", "."))


def _partition_of(name: str) -> int | None:
    number = name.removeprefix("partition=")
    return int(number) if name.startswith("partition=") and number.isascii() and number.isdigit() else None


def _unit(
    parts: tuple[str, ...], partitions: Collection[TopicPartition], topics: Collection[str]
) -> tuple[int, str] | None:
    """(length of the shortest prefix of the file `parts` that leaves the layout, why), None for a data file of a
    range directory of a partition the ledger holds (`partitions`, of `topics`)."""
    n = len(parts)
    if n == 1:
        return 1, "a file at the root, which holds only topic=<topic> folders"
    if not parts[0].startswith("topic="):
        return 1, "not a topic=<topic> folder of the layout"
    topic = parts[0].removeprefix("topic=")
    if topic not in topics:
        return 1, f"the ledger holds no offset of topic {topic!r}"
    if n == 2:
        return 2, "a file in a topic folder, which holds only partition=<n> folders"
    partition = _partition_of(parts[1])
    if partition is None:
        return 2, "not a partition=<n> folder of the layout"
    if TopicPartition(topic, partition) not in partitions:
        return 2, f"the ledger holds no offset of partition {partition} of {topic!r}"
    if n == 3:
        return 3, "a file in a partition folder, which holds only range directories"
    parsed = parse_range_dir(parts[2])
    if parsed is None:
        return 3, f"not a range directory name ({topic}-{partition}-<from>-<until>.parquet): no commit accounts for it"
    if parsed[:2] != (topic, partition):
        return 3, (
            f"a range directory of partition {parsed[1]} of {parsed[0]!r} in the folder of partition {partition} "
            f"of {topic!r}: readers see its rows twice"
        )
    if n > 4:
        return 4, "a subdirectory of a range directory: readers read its files with the range's"
    if not data_file_name(parts[3]):
        return 4, "a file of a range directory that its row count leaves out (not a part-*.parquet data file)"
    return None


def strays(entries: Iterable[Entry], partitions: Collection[TopicPartition]) -> list[Stray]:
    """What readers read among `entries` (a listing under one output root) that the layout does not account for,
    one `Stray` per path leaving it, in path order; `partitions` are those the ledger holds."""
    wanted = frozenset(partitions)
    topics = frozenset(tp.topic for tp in wanted)
    found: dict[tuple[str, ...], tuple[str, set[str], int]] = {}
    for entry in entries:
        reading = () if entry.is_dir else readers_of(entry.parts, entry.size)
        unit = _unit(entry.parts, wanted, topics) if reading else None
        if unit is None:
            continue
        length, reason = unit
        key = entry.parts[:length]
        _, seen, count = found.get(key, (reason, set(), 0))
        found[key] = (reason, seen | set(reading), count + 1)
    result = []
    for key, (reason, readers, count) in sorted(found.items()):
        partition = _partition_of(key[1]) if len(key) >= 2 and key[0].startswith("topic=") else None
        tp = None if partition is None else TopicPartition(key[0].removeprefix("topic="), partition)
        ordered = tuple(r for r in (SPARK, PYARROW, DUCKDB) if r in readers)
        result.append(Stray(key, tp if tp in wanted else None, count, ordered, reason))
    return result


class OutputTree:
    """The listing of one output root through pyarrow: each partition folder recursively, in one request, and the
    rest of the tree around them, skipping what no reader enters."""

    def __init__(self, root: str) -> None:
        resolved = arrow_filesystem(root)
        if resolved is None:
            raise SinkError(f"pyarrow cannot reach {root}")
        self.root = root.rstrip("/") or "/"
        self._fs, base = resolved
        self._base = base.rstrip("/") or "/"

    def _list(self, parts: Sequence[str], *, recursive: bool) -> list[pafs.FileInfo]:
        path = "/".join([self._base, *parts]) if parts else self._base
        selector = pafs.FileSelector(path, recursive=recursive, allow_not_found=True)
        return list(self._fs.get_file_info(selector))

    def _entries(self, infos: Iterable[pafs.FileInfo]) -> Iterator[Entry]:
        prefix = len(self._base.rstrip("/")) + 1
        for info in infos:
            if info.type not in (pafs.FileType.File, pafs.FileType.Directory):
                continue
            parts = tuple(info.path[prefix:].split("/"))
            is_dir = info.type == pafs.FileType.Directory
            yield Entry(parts, is_dir, 0 if is_dir else int(info.size or 0))

    def partition(self, tp: TopicPartition) -> list[Entry]:
        """Everything under the folder of `tp`, recursively (one listing), sorted."""
        return sorted(self._entries(self._list((f"topic={tp.topic}", f"partition={tp.partition}"), recursive=True)))

    def ranges(self, tp: TopicPartition, names: Collection[str]) -> list[Entry]:
        """The range directories `names` of `tp`'s folder and everything under them (one listing each, none of
        the folder itself), sorted: what the check after a batch reads of the ranges committed since its mark."""
        folder = (f"topic={tp.topic}", f"partition={tp.partition}")
        paths = ["/".join([self._base, *folder, name]) for name in sorted(set(names))]
        found: list[Entry] = []
        for info in self._fs.get_file_info(paths):
            if info.type == pafs.FileType.Directory:
                found += self._entries([info])
                found += self._entries(self._list((*folder, info.base_name), recursive=True))
            elif info.type == pafs.FileType.File:
                found += self._entries([info])
        return sorted(found)

    def outside(self, partitions: Collection[TopicPartition]) -> list[Entry]:
        """Everything readers may read outside the folders of `partitions`: the root and topic folders listed one
        level at a time, any other subtree a reader enters listed recursively."""
        wanted = {(f"topic={tp.topic}", f"partition={tp.partition}") for tp in partitions}
        topics = {parts[0] for parts in wanted}
        found: list[Entry] = []
        for top in self._entries(self._list((), recursive=False)):
            found.append(top)
            if not top.is_dir or not entered(top.parts):
                continue
            if top.parts[0] not in topics:
                found += self._entries(self._list(top.parts, recursive=True))
                continue
            for child in self._entries(self._list(top.parts, recursive=False)):
                if child.parts in wanted:
                    continue
                found.append(child)
                if child.is_dir and entered(child.parts):
                    found += self._entries(self._list(child.parts, recursive=True))
        return sorted(found)
