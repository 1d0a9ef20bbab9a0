"""Which data files of a table sink no version references (cohort.pipelines.tables.files.unreferenced), with the
time given: files younger than the grace period are never judged, and older versions are read only while some old
file is still unaccounted for."""

from __future__ import annotations

from collections.abc import Iterator

from cohort.pipelines.tables.files import DiskFile, unreferenced

NOW = 1_800_000_000.0
HOUR = 3600.0


def disk(path: str, age_s: float) -> DiskFile:
    return DiskFile(path, 100, NOW - age_s)


class Versions:
    """Older versions' paths, newest first, counting how many were read."""

    def __init__(self, paths: list[str]) -> None:
        self.paths, self.read = paths, 0

    def __iter__(self) -> Iterator[str]:
        for path in self.paths:
            self.read += 1
            yield path


def test_an_old_file_no_version_lists_is_unreferenced_and_a_young_one_is_left_alone() -> None:
    files = [disk("data/a/1.parquet", 2 * HOUR), disk("data/b/2.parquet", 2 * HOUR), disk("data/c/3.parquet", 60)]
    older = Versions(["data/x.parquet", "data/b/2.parquet"])
    found = unreferenced(files, ["data/live.parquet"], older, now=NOW, grace_s=HOUR)
    assert [f.path for f in found.old] == ["data/a/1.parquet"] and found.young == 1


def test_older_versions_are_not_read_when_the_current_one_accounts_for_every_old_file() -> None:
    files = [disk("data/a/1.parquet", 2 * HOUR), disk("data/c/3.parquet", 60)]  # the young one is not looked for
    older = Versions(["data/a/1.parquet"] * 3)
    found = unreferenced(files, ["data/a/1.parquet"], older, now=NOW, grace_s=HOUR)
    assert (found.old, found.young, older.read) == ((), 1, 0)


def test_older_versions_are_read_only_until_every_old_file_is_found() -> None:
    files = [disk("data/a/1.parquet", 2 * HOUR)]  # removed by a replay: an older version lists it
    older = Versions(["data/z.parquet", "data/a/1.parquet", "data/y.parquet", "data/w.parquet"])
    found = unreferenced(files, [], older, now=NOW, grace_s=HOUR)
    assert (found.old, older.read) == ((), 2)
