"""The Delta Lake table store (cohort.pipelines.tables.delta.store) on real delta-rs tables in a temporary directory:
commits land atomically with their marks, stale marks are refused, races have one winner, a lost answer is not
committed twice, and what readers see (rows, stats, schema) is right. No Spark: pyarrow writes the files."""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.tables.delta.store import DeltaStoreError, DeltaTableStore, parquet_stats
from cohort.pipelines.tables.store import (
    BatchRecord,
    DataFile,
    NewFile,
    Owner,
    PartitionMark,
    TableCommit,
    TableConflictError,
    TableSchemaError,
    data_dir,
)

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
KAFKA = pa.struct(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.binary()),
        ("headers", HEADERS),
    ]
)
SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()), pa.field("kafka", KAFKA)]
)
P0, P1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
BASE = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
GROUP = "g1"


def rows(tp: TopicPartition, lo: int, hi: int, schema: pa.Schema = SCHEMA, **extra: list[Any]) -> pa.Table:
    """Rows for offsets [lo, hi) of `tp`, shaped like the pipeline's (the offset doubles as the id)."""
    kafka = [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "offset": o,
            "timestamp": BASE + dt.timedelta(seconds=o, microseconds=7),
            "key": f"k{o}".encode(),
            "headers": [{"key": "h", "value": b"v"}],
        }
        for o in range(lo, hi)
    ]
    return pa.Table.from_pydict(
        {"id": list(range(lo, hi)), "name": [f"n{o}" for o in range(lo, hi)], "kafka": kafka, **extra}, schema=schema
    )


def write(
    root: Path, tp: TopicPartition, lo: int, hi: int, attempt: str = "a1", table: pa.Table | None = None
) -> NewFile:
    """Write one range's Parquet file where a task would (the table's data directory); the batch's NewFile."""
    relative = f"{data_dir(tp, lo, hi, attempt)}/part-00000.parquet"
    table = rows(tp, lo, hi) if table is None else table
    (root / relative).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / relative)
    return NewFile(relative, os.path.getsize(root / relative), table.num_rows, pq.read_schema(root / relative))


def batch(
    run: str,
    generation: int | None,
    expected: dict[TopicPartition, PartitionMark],
    adds: list[NewFile],
    removes: tuple[DataFile, ...] = (),
) -> TableCommit:
    """A batch landing each added file's range (heads from the file paths) with a record of run `run`."""
    ranges = []
    for f in adds:
        _, topic, partition, span, _ = f.path.split("/")
        lo, hi, _ = span.split("-")
        ranges.append(
            OffsetRange(
                topic.removeprefix("topic="),
                int(partition.removeprefix("partition=")),
                int(lo),
                int(hi),
                records=f.records,
            )
        )
    heads = {r.topic_partition: r.until_offset for r in ranges}
    return TableCommit(Owner(GROUP, generation), expected, heads, tuple(adds), removes, BatchRecord(run, tuple(ranges)))


def ids(root: Path) -> list[int]:
    return sorted(DeltaTable(str(root)).to_pyarrow_table().column("id").to_pylist())


def fresh() -> dict[TopicPartition, PartitionMark]:
    return {P0: PartitionMark(), P1: PartitionMark()}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "sink"


@pytest.fixture
def store(root: Path) -> DeltaTableStore:
    return DeltaTableStore(str(root) + "/")


def test_the_first_commit_creates_the_table_and_readers_see_its_rows(root: Path, store: DeltaTableStore) -> None:
    assert store.root == str(root) and not store.exists() and store.schema() is None
    assert store.marks(GROUP, [P0]) == {P0: PartitionMark()} and store.files([P0]) == []
    a, b = write(root, P0, 0, 5), write(root, P1, 0, 3)
    store.commit(batch("run-1", 7, fresh(), [a, b]))

    assert store.exists()
    assert store.schema() == SCHEMA
    assert ids(root) == [0, 0, 1, 1, 2, 2, 3, 4]
    table = DeltaTable(str(root))
    con = duckdb.connect()
    con.register("sink", table.to_pyarrow_dataset())
    per_partition = con.sql(
        "SELECT kafka.partition, count(*), max(kafka.offset), min(kafka.headers[1].key) FROM sink GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert per_partition == [(0, 5, 4, "h"), (1, 3, 2, "h")]
    assert store.marks(GROUP, [P0, P1]) == {P0: PartitionMark(5, 7, 5), P1: PartitionMark(3, 7, 3)}
    assert store.marks("other-group", [P0]) == {P0: PartitionMark()}
    assert store.files([P0, P1]) == [
        DataFile("orders", 0, 0, 5, "a1", a.path, 5),
        DataFile("orders", 1, 0, 3, "a1", b.path, 3),
    ]
    assert store.files([P1]) == [DataFile("orders", 1, 0, 3, "a1", b.path, 3)]
    newest = table.history(1)[0]
    assert newest["cohort.group"] == GROUP and newest["cohort.batch"]["run_id"] == "run-1"


def test_stats_from_the_footer_let_readers_prune_on_nested_kafka_fields(root: Path, store: DeltaTableStore) -> None:
    store.commit(batch("run-1", 1, fresh(), [write(root, P0, 0, 5), write(root, P1, 10, 13)]))
    table = DeltaTable(str(root))
    assert table.count() == 8
    assert len(table.file_uris(file_pruning_predicate="kafka.offset > 4")) == 1
    assert len(table.file_uris(file_pruning_predicate="kafka.partition = 0")) == 1
    assert len(table.file_uris(file_pruning_predicate="kafka.topic = 'elsewhere'")) == 0
    # the newest row of partition 0 is at 4 s + 7 us; delta-rs widens a timestamp max by 1 ms (as Spark does)
    assert len(table.file_uris(file_pruning_predicate="kafka.timestamp > '2024-01-01T00:00:04.000006Z'")) == 2
    assert len(table.file_uris(file_pruning_predicate="kafka.timestamp > '2024-01-01T00:00:04.001007Z'")) == 1


def test_parquet_stats_cover_primitive_leaves_and_leave_out_lists_and_binary_bounds(tmp_path: Path) -> None:
    pq.write_table(rows(P0, 3, 6), tmp_path / "f.parquet", row_group_size=2)
    stats = json.loads(parquet_stats(pq.read_metadata(tmp_path / "f.parquet")))
    assert stats["numRecords"] == 3
    assert stats["minValues"] == {
        "id": 3,
        "name": "n3",
        "kafka": {"topic": "orders", "partition": 0, "offset": 3, "timestamp": "2024-01-01T00:00:03.000007Z"},
    }
    assert stats["maxValues"]["kafka"]["offset"] == 5 and stats["maxValues"]["name"] == "n5"
    assert stats["nullCount"] == {
        "id": 0,
        "name": 0,
        "kafka": {"topic": 0, "partition": 0, "offset": 0, "timestamp": 0, "key": 0},
    }


def test_a_zombie_of_an_older_generation_is_refused_after_a_fence(root: Path, store: DeltaTableStore) -> None:
    store.commit(batch("run-1", 6, fresh(), [write(root, P0, 0, 100)]))
    seen_by_zombie = store.marks(GROUP, [P0])
    # generation 7 takes the partition over: a commit of its marks only
    new_owner = DeltaTableStore(str(root))
    new_owner.commit(TableCommit(Owner(GROUP, 7), new_owner.marks(GROUP, [P0])))
    assert new_owner.marks(GROUP, [P0]) == {P0: PartitionMark(100, 7, 100)}
    version = DeltaTable(str(root)).version()

    with pytest.raises(TableConflictError) as refused:
        store.commit(batch("run-2", 6, seen_by_zombie, [write(root, P0, 100, 120)]))
    assert str(refused.value) == (
        "orders-0: the table's marks are head 100, generation 7; this batch expected head 100, generation 6 "
        "(a newer generation fenced the partition, or another batch committed it)"
    )
    assert DeltaTable(str(root)).version() == version and ids(root) == list(range(100))
    assert len(DeltaTable(str(root)).get_add_actions()) == 1  # the fence added no file


def _racing(
    monkeypatch: pytest.MonkeyPatch, attempts: list[Callable[[], None]], step: str = "create_write_transaction"
) -> list[BaseException | None]:
    """Run `attempts` in threads whose first call of DeltaTable's `step` waits for all of them, so they take it
    from the same table version: each thread's outcome (None: it landed)."""
    barrier = threading.Barrier(len(attempts), timeout=20)
    first = threading.local()
    original = getattr(DeltaTable, step)

    def held(*args: Any, **kwargs: Any) -> Any:
        if not getattr(first, "done", False):
            first.done = True
            barrier.wait()
        return original(*args, **kwargs)

    monkeypatch.setattr(DeltaTable, step, staticmethod(held) if step == "create" else held)
    outcomes: list[BaseException | None] = [None] * len(attempts)

    def run(i: int) -> None:
        try:
            attempts[i]()
        except BaseException as error:
            outcomes[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(attempts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return outcomes


def test_two_writers_racing_on_one_partition_have_exactly_one_winner(
    root: Path, store: DeltaTableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.commit(batch("run-0", 3, fresh(), [write(root, P0, 0, 10)]))
    expected = store.marks(GROUP, [P0])
    first, second = write(root, P0, 10, 20, "aa"), write(root, P0, 10, 20, "bb")
    outcomes = _racing(
        monkeypatch,
        [
            lambda: DeltaTableStore(str(root)).commit(batch("run-a", 3, expected, [first])),
            lambda: DeltaTableStore(str(root)).commit(batch("run-b", 3, expected, [second])),
        ],
    )
    assert sorted(type(o).__name__ for o in outcomes) == ["NoneType", "TableConflictError"]
    assert "this batch expected head 10, generation 3" in str(next(o for o in outcomes if o is not None))
    assert ids(root) == list(range(20))
    assert store.marks(GROUP, [P0]) == {P0: PartitionMark(20, 3, 20)}
    winner = ["run-a", "run-b"][outcomes.index(None)]
    record = store.last_batch(GROUP, P0, 20)
    assert record is not None and record.run_id == winner


def test_writers_racing_on_different_partitions_both_land(
    root: Path, store: DeltaTableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.commit(batch("run-0", 3, fresh(), [write(root, P0, 0, 2), write(root, P1, 0, 2)]))
    m0, m1 = store.marks(GROUP, [P0]), store.marks(GROUP, [P1])
    a, b = write(root, P0, 2, 4), write(root, P1, 2, 5)
    outcomes = _racing(
        monkeypatch,
        [
            lambda: DeltaTableStore(str(root)).commit(batch("run-a", 3, m0, [a])),
            lambda: DeltaTableStore(str(root)).commit(batch("run-b", 3, m1, [b])),
        ],
    )
    assert outcomes == [None, None]
    assert store.marks(GROUP, [P0, P1]) == {P0: PartitionMark(4, 3, 4), P1: PartitionMark(5, 3, 5)}
    assert len(ids(root)) == 9


def test_two_first_commits_racing_to_create_the_table_both_land(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = write(root, P0, 0, 2), write(root, P1, 0, 3)
    outcomes = _racing(
        monkeypatch,
        [
            lambda: DeltaTableStore(str(root)).commit(batch("run-a", 1, {P0: PartitionMark()}, [a])),
            lambda: DeltaTableStore(str(root)).commit(batch("run-b", 1, {P1: PartitionMark()}, [b])),
        ],
        step="create",
    )
    assert outcomes == [None, None]
    assert DeltaTableStore(str(root)).marks(GROUP, [P0, P1]) == {P0: PartitionMark(2, 1, 2), P1: PartitionMark(3, 1, 3)}
    assert len(ids(root)) == 5


def test_a_first_commit_that_loses_the_creation_to_another_writer_lands_in_its_table(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = write(root, P1, 0, 3)
    original = DeltaTable.create

    def created_meanwhile(*args: Any, **kwargs: Any) -> DeltaTable:
        monkeypatch.setattr(DeltaTable, "create", original)
        DeltaTableStore(str(root)).commit(batch("run-other", 1, {P1: PartitionMark()}, [other]))
        raise CommitFailedError("Failed to commit transaction: Protocol changed since last commit: protocol changed")

    monkeypatch.setattr(DeltaTable, "create", staticmethod(created_meanwhile))
    DeltaTableStore(str(root)).commit(batch("run-a", 1, {P0: PartitionMark()}, [write(root, P0, 0, 2)]))
    assert DeltaTableStore(str(root)).marks(GROUP, [P0, P1]) == {P0: PartitionMark(2, 1, 2), P1: PartitionMark(3, 1, 3)}


def test_a_commit_whose_answer_was_lost_is_not_applied_twice(root: Path, store: DeltaTableStore) -> None:
    change = batch("run-1", 2, fresh(), [write(root, P0, 0, 4), write(root, P1, 0, 2)])
    store.commit(change)
    version = DeltaTable(str(root)).version()
    store.commit(change)  # the retry after a lost answer
    assert DeltaTable(str(root)).version() == version
    assert ids(root) == [0, 0, 1, 1, 2, 3]
    # another run expecting the same marks is refused, not taken for the one that landed
    with pytest.raises(TableConflictError):
        store.commit(batch("run-2", 2, fresh(), [write(root, P0, 0, 4, "a2")]))


def test_a_replay_removes_the_files_it_re_read_and_adds_its_own_in_one_commit(
    root: Path, store: DeltaTableStore
) -> None:
    store.commit(batch("run-1", 1, fresh(), [write(root, P0, 0, 10)]))
    old = store.files([P0])
    before = DeltaTable(str(root)).version()
    replayed = rows(P0, 0, 10).set_column(1, "name", pa.array([f"new{o}" for o in range(10)]))
    new = write(root, P0, 0, 10, "r2", replayed)
    store.commit(batch("run-2", 1, store.marks(GROUP, [P0]), [new], tuple(old)))

    assert store.files([P0]) == [DataFile("orders", 0, 0, 10, "r2", new.path, 10)]
    names = DeltaTable(str(root)).to_pyarrow_table().column("name").to_pylist()
    assert sorted(names) == sorted(f"new{o}" for o in range(10))
    assert store.marks(GROUP, [P0]) == {P0: PartitionMark(10, 1, 10)}
    assert DeltaTable(str(root), version=before).to_pyarrow_table().num_rows == 10  # the old version is intact


def test_a_new_nullable_field_is_added_and_older_rows_read_it_as_null(root: Path, store: DeltaTableStore) -> None:
    store.commit(batch("run-1", 1, fresh(), [write(root, P0, 0, 2)]))
    wider = SCHEMA.append(pa.field("note", pa.string()))
    store.commit(
        batch(
            "run-2", 1, store.marks(GROUP, [P0]), [write(root, P0, 2, 4, table=rows(P0, 2, 4, wider, note=["x", "y"]))]
        )
    )
    assert store.schema() == wider
    table = DeltaTable(str(root)).to_pyarrow_table().sort_by("id")
    assert table.column("note").to_pylist() == [None, None, "x", "y"]
    assert store.marks(GROUP, [P0]) == {P0: PartitionMark(4, 1, 4)}


@pytest.mark.parametrize(
    ("field", "values"),
    [(pa.field("must", pa.int64(), nullable=False), [1, 2]), (pa.field("name", pa.int64()), [1, 2])],
    ids=["non-nullable new field", "changed type"],
)
def test_rows_that_do_not_fit_the_table_are_refused_and_nothing_is_committed(
    root: Path, store: DeltaTableStore, field: pa.Field, values: list[int]
) -> None:
    store.commit(batch("run-1", 1, fresh(), [write(root, P0, 0, 2)]))
    version = DeltaTable(str(root)).version()
    index = SCHEMA.get_field_index(field.name)
    schema = SCHEMA.append(field) if index < 0 else SCHEMA.set(index, field)
    data = rows(P0, 2, 4, SCHEMA)
    data = data.append_column(field, [values]) if index < 0 else data.set_column(index, field, [values])
    with pytest.raises(TableSchemaError):
        store.commit(batch("run-2", 1, store.marks(GROUP, [P0]), [write(root, P0, 2, 4, table=data.cast(schema))]))
    assert DeltaTable(str(root)).version() == version and store.schema() == SCHEMA


def test_last_batch_finds_the_commit_that_moved_a_head(root: Path, store: DeltaTableStore) -> None:
    assert store.last_batch(GROUP, P0, 5) is None  # no table
    store.commit(batch("run-1", 1, fresh(), [write(root, P0, 0, 5), write(root, P1, 0, 5)]))
    store.commit(batch("run-2", 1, store.marks(GROUP, [P0]), [write(root, P0, 5, 8)]))
    first, second = store.last_batch(GROUP, P1, 5), store.last_batch(GROUP, P0, 8)
    assert first is not None and first.run_id == "run-1" and len(first.ranges) == 2
    assert second == BatchRecord("run-2", (OffsetRange("orders", 0, 5, 8, records=3),))
    assert store.last_batch(GROUP, P0, 5) is not None
    assert store.last_batch(GROUP, P0, 6) is None
    assert store.last_batch("other-group", P0, 8) is None


def test_a_commit_without_files_on_a_missing_table_creates_nothing_unless_it_names_a_schema(
    root: Path, store: DeltaTableStore
) -> None:
    store.commit(TableCommit(Owner(GROUP, 4), {P0: PartitionMark()}))
    assert not store.exists() and not root.exists()
    store.commit(TableCommit(Owner(GROUP, 4), {P0: PartitionMark()}, schema=SCHEMA))
    assert store.schema() == SCHEMA and store.marks(GROUP, [P0]) == {P0: PartitionMark(None, 4)}
    assert store.files([P0]) == [] and ids(root) == []


@pytest.mark.parametrize("damage", ["missing", "wrong size", "absolute path"])
def test_a_file_that_is_not_what_the_batch_says_is_refused_before_anything_is_written(
    root: Path, store: DeltaTableStore, damage: str
) -> None:
    good = write(root, P0, 0, 3)
    bad = {
        "missing": good,
        "wrong size": NewFile(good.path, good.size - 1, good.records, good.schema),
        "absolute path": NewFile(str(root / good.path), good.size, good.records, good.schema),
    }[damage]
    if damage == "missing":
        os.remove(root / good.path)
    change = TableCommit(Owner(GROUP, 1), fresh(), {P0: 3}, (bad,), (), BatchRecord("run-1", ()))
    with pytest.raises(FileNotFoundError if damage == "missing" else ValueError, match="data file"):
        store.commit(change)
    assert not store.exists()


def test_a_commit_refused_again_and_again_gives_up_with_a_conflict(
    root: Path, store: DeltaTableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.commit(batch("run-1", 1, fresh(), [write(root, P0, 0, 2)]))

    def refuse(self: DeltaTable, *args: Any, **kwargs: Any) -> None:
        raise CommitFailedError("Failed to commit transaction: Concurrent transaction failed.")

    monkeypatch.setattr(DeltaTable, "create_write_transaction", refuse)
    stubborn = DeltaTableStore(str(root), max_attempts=3)
    with pytest.raises(TableConflictError, match=r"refused this one 3 times \(last: Failed to commit"):
        stubborn.commit(batch("run-2", 1, store.marks(GROUP, [P0]), [write(root, P0, 2, 4)]))


def test_a_damaged_log_is_a_short_error_naming_the_table(root: Path, store: DeltaTableStore) -> None:
    store.commit(batch("run-1", 1, fresh(), [write(root, P0, 0, 2)]))
    (root / "_delta_log" / "00000000000000000002.json").write_text("{not json\n")
    with pytest.raises(DeltaStoreError, match=f"Delta table {root}") as failed:
        store.marks(GROUP, [P0])
    assert "\n" not in str(failed.value) and len(str(failed.value)) < 400
