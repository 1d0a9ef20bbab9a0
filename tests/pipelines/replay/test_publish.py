"""Publishing a replay: a committed range whose offsets the sink already holds replaces exactly those offsets,
in one step. A reader looks at the sink before every file operation of the publish, and the publish is killed
at each of its operations in turn (then completed by the next batch, as `complete` does): every look sees each
offset exactly once, the replayed offsets all old or all new (pyarrow's local file system, no Spark)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.sink.layout import SinkLayout, attempt_id
from cohort.pipelines.tasks.writer import ArrowFs

TP = TopicPartition("t", 0)
ORIGINAL = {"A": (0, 40), "B": (40, 80)}
REPLAY = (25, 60)


class Killed(Exception):
    """The publishing process died here."""


class Watched(ArrowFs):
    """ArrowFs that lets a reader look at the sink before each change, and dies at change number `kill_at`."""

    CHANGES = ("delete", "touch", "rename", "make_dirs", "swap", "link_tree", "write_offset_slice")

    def __init__(self, look: Callable[[], None], kill_at: int | None = None) -> None:
        self.look, self.kill_at, self.changes = look, kill_at, 0

    def __getattribute__(self, name: str) -> Any:
        attribute = super().__getattribute__(name)
        if name not in Watched.CHANGES:
            return attribute

        def change(*args: Any, **kwargs: Any) -> Any:
            self.look()
            if self.kill_at is not None and self.changes == self.kill_at:
                raise Killed(f"killed before {name}")
            self.changes += 1
            return attribute(*args, **kwargs)

        return change


def _write(directory: Path, writer: str, first: int, until: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    offsets = list(range(first, until))
    pq.write_table(
        pa.table({"kafka": [{"offset": o} for o in offsets], "by": [writer] * len(offsets)}),
        directory / f"part-{first}-{until}.parquet",
    )


def _visible(root: Path) -> list[tuple[int, str]]:
    """(offset, writer) of every row a hive-style reader of the sink sees (names starting with _ or . skipped)."""
    rows: list[tuple[int, str]] = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [d for d in subdirectories if not d.startswith(("_", "."))]
        for name in files:
            if name.endswith(".parquet") and not name.startswith(("_", ".")):
                table = pq.read_table(os.path.join(directory, name))
                rows += zip(
                    [k["offset"] for k in table.column("kafka").to_pylist()],
                    table.column("by").to_pylist(),
                    strict=True,
                )
    return sorted(rows)


def _seen_correctly(root: Path) -> str:
    """Check one look: offsets 0..79 once each; the replayed ones all old or all new. Returns which."""
    rows = _visible(root)
    assert [o for o, _ in rows] == list(range(80)), "an offset is missing or seen twice"
    replayed = {w for o, w in rows if REPLAY[0] <= o < REPLAY[1]}
    assert replayed in ({"A", "B"}, {"C"}), f"replayed offsets written by {replayed}: old and new mixed"
    assert all(w == "A" for o, w in rows if o < REPLAY[0]) and all(w == "B" for o, w in rows if o >= REPLAY[1])
    return "new" if replayed == {"C"} else "old"


def _scenario(root: Path) -> tuple[SinkLayout, str]:
    """A sink holding [0, 40) by A and [40, 80) by B, and a committed replay [25, 60) staged by run C."""
    layout, fs = SinkLayout(str(root)), ArrowFs()
    for writer, (first, until) in ORIGINAL.items():
        attempt = attempt_id(f"run-{writer}")
        _write(Path(layout.staged_range_dir(attempt, "t", 0)), writer, first, until)
        layout.prepare(fs, attempt, {TP: (first, until)})
        assert list(layout.publish(fs, attempt, {TP: (first, until)}))
    replay = attempt_id("run-C")
    _write(Path(layout.staged_range_dir(replay, "t", 0)), "C", *REPLAY)
    layout.prepare(fs, replay, {TP: REPLAY})
    return layout, replay


def test_a_replay_replaces_exactly_its_offsets(tmp_path: Path) -> None:
    layout, replay = _scenario(tmp_path / "lake")
    looks: list[str] = []
    fs = Watched(lambda: looks.append(_seen_correctly(tmp_path / "lake")))
    assert list(layout.publish(fs, replay, {TP: REPLAY})) == [layout.range_dir("t", 0, *REPLAY)]
    assert _seen_correctly(tmp_path / "lake") == "new"
    switch = looks.index("new")  # readers saw the old records until one change, the swap, and the new after it
    assert looks == ["old"] * switch + ["new"] * (len(looks) - switch) and switch > 3
    assert [(f, u) for f, u, _ in layout.range_dirs(ArrowFs(), "t", 0)] == [(0, 25), (25, 60), (60, 80)]
    assert not Path(layout.staging_root(replay), "next", "topic=t", "partition=0").exists()  # the old state, gone


def test_a_replay_killed_at_any_step_is_seen_whole_or_not_at_all_and_completed_by_the_next_batch(
    tmp_path: Path,
) -> None:
    counted = Watched(lambda: None)
    layout, replay = _scenario(tmp_path / "count")
    list(layout.publish(counted, replay, {TP: REPLAY}))
    steps = counted.changes
    assert steps >= 8
    for kill_at in range(steps):
        root = tmp_path / f"kill-{kill_at}"
        layout, replay = _scenario(root)
        dying = Watched(lambda root=root: _seen_correctly(root), kill_at=kill_at)
        with pytest.raises(Killed):
            list(layout.publish(dying, replay, {TP: REPLAY}))
        _seen_correctly(root)
        # the next batch of the partition: the ledger's last range is C's [25, 60), holding 35 rows
        assert layout.complete(Watched(lambda root=root: _seen_correctly(root)), "run-C", TP, *REPLAY, rows=35)
        assert _seen_correctly(root) == "new", f"killed at step {kill_at}"
        shutil.rmtree(root)


def test_a_replay_with_no_valid_record_removes_the_old_ones_for_its_offsets(tmp_path: Path) -> None:
    """Every replayed record went to the quarantine: the sink no longer holds those offsets (the quarantine
    root gets them, by the same publish)."""
    layout, _ = _scenario(tmp_path / "lake")
    empty = attempt_id("run-D")
    layout.prepare(ArrowFs(), empty, {TP: REPLAY})
    assert list(layout.publish(ArrowFs(), empty, {TP: REPLAY})) == []
    assert [o for o, _ in _visible(tmp_path / "lake")] == [*range(25), *range(60, 80)]
