"""The Iceberg table sink (cohort.pipelines.tables.iceberg.store) on a real pyiceberg SqlCatalog over SQLite: the marks'
compare-and-set (fences, zombies, races between processes, lost answers, snapshot expiry), replays and schema
evolution, with Parquet files written by pyarrow in the layout Spark's tasks use."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyiceberg")

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.tables.iceberg.store import BATCH_SUMMARY_KEY, IcebergTableStore
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

IDENTIFIER = "lake.orders"
GROUP = "sink"
TP = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
KAFKA = pa.struct(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("headers", pa.list_(HEADER)),
    ]
)
SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()), pa.field("kafka", KAFKA)]
)
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def mark(head: int | None, generation: int | None) -> PartitionMark:
    """A partition's marks when no replay moved its head back (the reach is the head)."""
    return PartitionMark(head, generation, head)


def rows(tp: TopicPartition, start: int, until: int, schema: pa.Schema = SCHEMA, **extra: list[Any]) -> pa.Table:
    """The rows a task writes for offsets [start, until) of `tp`: id = offset, one header each."""
    offsets = range(start, until)
    kafka = [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "offset": o,
            "timestamp": T0 + timedelta(seconds=o),
            "key": f"k{o}".encode(),
            "headers": [{"key": "h", "value": b"v"}],
        }
        for o in offsets
    ]
    columns: dict[str, Any] = {"id": list(offsets), "name": [f"n{o}" for o in offsets], "kafka": kafka, **extra}
    return pa.table({f.name: columns[f.name] for f in schema}, schema=schema)


def write(
    root: str, tp: TopicPartition, start: int, until: int, attempt: str = "a", table: pa.Table | None = None
) -> NewFile:
    """A task's Parquet file for the range, under the table root, as the NewFile the batch reports."""
    data = rows(tp, start, until) if table is None else table
    relative = f"{data_dir(tp, start, until, attempt)}/part-0.parquet"
    path = Path(root) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, path)
    return NewFile(relative, path.stat().st_size, data.num_rows, data.schema)


def batch(
    root: str,
    tp: TopicPartition,
    start: int,
    until: int,
    expected: PartitionMark,
    run_id: str,
    generation: int | None = 5,
    attempt: str = "a",
    table: pa.Table | None = None,
) -> TableCommit:
    """One batch landing [start, until) of `tp` on top of the marks it read."""
    new = write(root, tp, start, until, attempt, table)
    record = BatchRecord(run_id, (OffsetRange(tp.topic, tp.partition, start, until, records=new.records),))
    return TableCommit(Owner(GROUP, generation), {tp: expected}, {tp: until}, (new,), (), record)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/catalog.db"


@pytest.fixture
def make_store(tmp_path: Path, url: str) -> Callable[[], IcebergTableStore]:
    """A new store object on the same table, as another process would hold."""
    return lambda: IcebergTableStore(str(tmp_path / "table"), catalog_url=url, identifier=IDENTIFIER)


@pytest.fixture
def store(make_store: Callable[[], IcebergTableStore]) -> IcebergTableStore:
    return make_store()


def load(url: str) -> Table:
    """The table as any other Iceberg reader sees it (its own catalog object)."""
    return SqlCatalog("cohort", uri=url).load_table(IDENTIFIER)


def offsets(url: str) -> list[tuple[int, int]]:
    """(partition, offset) of every row, sorted: duplicates would show."""
    kafka = load(url).scan().to_arrow().column("kafka").to_pylist()
    return sorted((k["partition"], k["offset"]) for k in kafka)


def test_the_first_commit_creates_the_table_and_its_rows_marks_and_files_read_back(
    store: IcebergTableStore, url: str
) -> None:
    assert not store.exists() and store.schema() is None and store.files([TP]) == []
    assert store.marks(GROUP, [TP]) == {TP: PartitionMark()}
    store.commit(batch(store.root, TP, 0, 10, PartitionMark(), "run-1"))

    assert store.exists() and load(url).properties["commit.retry.num-retries"] == "0"  # the store's loop retries
    assert store.schema() == SCHEMA  # plain Arrow types, `id` still not null: batches compare equal to it
    arrow = load(url).scan().to_arrow()
    assert arrow.num_rows == 10 and sorted(arrow.column("id").to_pylist()) == list(range(10))
    first = arrow.sort_by("id").slice(0, 1).to_pylist()[0]
    assert first["kafka"]["headers"] == [{"key": "h", "value": b"v"}] and first["kafka"]["timestamp"] == T0
    summary = duckdb.sql("select count(*), min(kafka.offset), max(kafka.offset), sum(len(kafka.headers)) from arrow")
    assert summary.fetchall() == [(10, 0, 9, 10)]

    assert store.marks(GROUP, [TP, TP1]) == {TP: mark(10, 5), TP1: PartitionMark()}
    (data_file,) = store.files([TP])
    assert (data_file.from_offset, data_file.until_offset, data_file.attempt, data_file.records) == (0, 10, "a", 10)
    assert data_file.path == "data/topic=orders/partition=0/0-10-a/part-0.parquet" and store.files([TP1]) == []
    record = store.last_batch(GROUP, TP, 10)
    assert record is not None and record.run_id == "run-1" and store.last_batch(GROUP, TP, 9) is None
    snapshot = load(url).current_snapshot()
    assert snapshot is not None and BATCH_SUMMARY_KEY in snapshot.summary.additional_properties
    assert '"group":"sink","run_id":"run-1"' in snapshot.summary.additional_properties[BATCH_SUMMARY_KEY]


def test_a_zombie_of_an_older_generation_is_refused_after_a_fence(store: IcebergTableStore, url: str) -> None:
    store.commit(batch(store.root, TP, 0, 10, PartitionMark(), "run-1", generation=6))
    fence = TableCommit(Owner(GROUP, 7), {TP: mark(10, 6)})
    store.commit(fence)
    assert store.marks(GROUP, [TP])[TP] == mark(10, 7)
    before = load(url).current_snapshot()
    store.commit(fence)  # sent again (its answer was lost): the marks are its own, nothing to do

    zombie = batch(store.root, TP, 10, 20, mark(10, 6), "run-zombie", generation=6)
    with pytest.raises(TableConflictError) as refused:
        store.commit(zombie)
    assert str(refused.value).startswith(
        "orders-0 in lake.orders: the table's marks are head 10, generation 7; this batch expected head 10, "
        "generation 6 (a newer generation fenced"
    )
    assert load(url).current_snapshot() == before and offsets(url) == [(0, o) for o in range(10)]
    assert store.marks(GROUP, [TP])[TP] == mark(10, 7) and len(store.files([TP])) == 1


def test_a_stale_fence_is_refused_too(store: IcebergTableStore) -> None:
    """A properties-only commit asserts nothing in pyiceberg: the store's requirement guards it."""
    store.commit(batch(store.root, TP, 0, 10, PartitionMark(), "run-1", generation=6))
    store.commit(TableCommit(Owner(GROUP, 8), {TP: mark(10, 6)}))
    with pytest.raises(TableConflictError, match="marks are head 10, generation 8"):
        store.commit(TableCommit(Owner(GROUP, 7), {TP: mark(10, 6)}))
    assert store.marks(GROUP, [TP])[TP] == mark(10, 8)


def test_a_commit_overtaken_between_its_check_and_the_catalog_swap_is_refused_even_with_pyiceberg_retries(
    make_store: Callable[[], IcebergTableStore],
    url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """pyiceberg rebases a failed data commit and drops its own snapshot assertion: the marks requirement stays."""
    first, other = make_store(), make_store()
    first.commit(batch(first.root, TP, 0, 10, PartitionMark(), "run-1"))
    retrying = {"commit.retry.num-retries": "3", "commit.retry.min-wait-ms": "1", "commit.retry.max-wait-ms": "2"}
    with load(url).transaction() as tx:
        tx.set_properties(retrying)
    stale = first._load  # the table as first reads it; then another batch lands before first's commit
    loads = []

    def load_then_overtake() -> Table | None:
        table = stale()
        loads.append(table)
        if len(loads) == 1:
            other.commit(batch(other.root, TP, 10, 20, mark(10, 5), "run-2b", attempt="b"))
        return table

    monkeypatch.setattr(first, "_load", load_then_overtake)
    with pytest.raises(TableConflictError, match="the table's marks are head 20, generation 5; this batch expected"):
        first.commit(batch(first.root, TP, 10, 20, mark(10, 5), "run-2a"))
    assert len(loads) == 2  # refused by the requirement, then the reload named the marks
    assert "retrying (3/3)" in caplog.text  # each rebased retry (no snapshot assertion left) was refused as well
    assert offsets(url) == [(0, o) for o in range(20)]
    assert [f.attempt for f in other.files([TP])] == ["a", "b"]


def _race(root: str, url: str, partition: int, run_id: str, barrier: Any, results: Any) -> None:
    """One process of a race: read the marks, wait for the other, commit the next 5 offsets."""
    store = IcebergTableStore(root, catalog_url=url, identifier=IDENTIFIER)
    tp = TopicPartition("orders", partition)
    mark = store.marks(GROUP, [tp])[tp]
    head = mark.head or 0
    change = batch(root, tp, head, head + 5, mark, run_id, attempt=run_id.replace("-", ""))
    barrier.wait()
    try:
        store.commit(change)
        results.put((run_id, "landed"))
    except TableConflictError:
        results.put((run_id, "refused"))
    except Exception as error:  # reported, so that the test fails at once instead of waiting
        results.put((run_id, f"failed: {error}"))


def race(store: IcebergTableStore, url: str, partitions: list[int]) -> dict[str, str]:
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(len(partitions)), context.Queue()
    runs = [f"run-{i}" for i in range(len(partitions))]
    processes = [
        context.Process(target=_race, args=(store.root, url, p, run, barrier, results))
        for p, run in zip(partitions, runs, strict=True)
    ]
    for process in processes:
        process.start()
    outcomes = dict(results.get(timeout=60) for _ in processes)
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    return outcomes


def test_two_processes_racing_on_one_partition_land_exactly_one_batch(store: IcebergTableStore, url: str) -> None:
    store.commit(batch(store.root, TP, 0, 10, PartitionMark(), "run-seed"))
    outcomes = race(store, url, [0, 0])
    assert sorted(outcomes.values()) == ["landed", "refused"]
    winner = next(run for run, outcome in outcomes.items() if outcome == "landed")
    assert offsets(url) == [(0, o) for o in range(15)]
    assert store.marks(GROUP, [TP])[TP] == mark(15, 5)
    record = store.last_batch(GROUP, TP, 15)
    assert record is not None and record.run_id == winner


def test_two_processes_on_different_partitions_both_land_even_creating_the_table(
    store: IcebergTableStore, url: str
) -> None:
    assert race(store, url, [0, 1]) == {"run-0": "landed", "run-1": "landed"}
    assert offsets(url) == [(0, o) for o in range(5)] + [(1, o) for o in range(5)]
    assert store.marks(GROUP, [TP, TP1]) == {TP: mark(5, 5), TP1: mark(5, 5)}


def test_a_commit_whose_answer_was_lost_is_not_applied_twice(store: IcebergTableStore, url: str) -> None:
    change = batch(store.root, TP, 0, 10, PartitionMark(), "run-1")
    store.commit(change)
    snapshots = len(load(url).snapshots())
    store.commit(change)  # the coordinator sends it again
    assert len(load(url).snapshots()) == snapshots and offsets(url) == [(0, o) for o in range(10)]
    again = TableCommit(change.owner, change.expected, change.heads, change.adds, (), BatchRecord("run-2", ()))
    with pytest.raises(TableConflictError):  # the same marks reached by another run: not this batch
        store.commit(again)


def test_after_snapshot_expiry_the_marks_and_the_last_batch_still_answer(store: IcebergTableStore, url: str) -> None:
    marks = [PartitionMark(), mark(10, 5), mark(20, 5)]
    changes = [batch(store.root, TP, 10 * i, 10 * i + 10, marks[i], f"run-{i}") for i in range(3)]
    for change in changes:
        store.commit(change)
    load(url).maintenance.expire_snapshots().older_than(datetime.now(UTC) + timedelta(seconds=1)).commit()
    assert len(load(url).snapshots()) == 1  # the earlier summaries are gone

    assert store.marks(GROUP, [TP])[TP] == mark(30, 5)
    record = store.last_batch(GROUP, TP, 30)
    assert record is not None and record.run_id == "run-2" and store.last_batch(GROUP, TP, 20) is None
    assert [(f.from_offset, f.until_offset) for f in store.files([TP])] == [(0, 10), (10, 20), (20, 30)]
    store.commit(changes[2])  # its answer was lost: recognised from the table's properties
    with pytest.raises(TableConflictError, match="head 30, generation 5; this batch expected head 10"):
        store.commit(changes[1])  # a stale coordinator re-sends an older batch
    assert offsets(url) == [(0, o) for o in range(30)]


def test_a_replay_swaps_files_in_one_snapshot(store: IcebergTableStore, url: str) -> None:
    store.commit(batch(store.root, TP, 0, 10, PartitionMark(), "run-1"))
    store.commit(batch(store.root, TP, 10, 20, mark(10, 5), "run-2"))
    store.commit(batch(store.root, TP1, 0, 5, PartitionMark(), "run-3"))
    old = store.files([TP])
    snapshots = len(load(url).snapshots())

    new = write(store.root, TP, 0, 20, attempt="r")
    ranges = (OffsetRange("orders", 0, 0, 20, records=20),)
    replay = TableCommit(
        Owner(GROUP, 5), {TP: mark(20, 5)}, {TP: 20}, (new,), tuple(old), BatchRecord("replay", ranges)
    )
    store.commit(replay)

    table = load(url)
    assert len(table.snapshots()) == snapshots + 1
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary.operation.value == "overwrite"
    assert [(f.from_offset, f.until_offset, f.attempt) for f in store.files([TP])] == [(0, 20, "r")]
    assert offsets(url) == [(0, o) for o in range(20)] + [(1, o) for o in range(5)]
    store.commit(replay)  # sent again (a lost answer): the marks did not move, the files tell it landed
    assert len(load(url).snapshots()) == snapshots + 1
    other = write(store.root, TP, 0, 20, attempt="s")
    stale = TableCommit(Owner(GROUP, 5), {TP: mark(20, 5)}, {TP: 20}, (other,), tuple(old), replay.batch)
    with pytest.raises(TableConflictError, match=r"0-10-a/part-0\.parquet is no longer in the table"):
        store.commit(stale)  # another replay of the same files, by a stale coordinator
    store.commit(TableCommit(Owner(GROUP, 5), {TP: mark(20, 5)}, removes=tuple(old)))  # a clean-up: done
    assert len(load(url).snapshots()) == snapshots + 1 and len(store.files([TP])) == 1


def test_a_replay_of_earlier_offsets_moves_the_head_back_and_keeps_the_reach(
    store: IcebergTableStore, url: str
) -> None:
    store.commit(batch(store.root, TP, 0, 10, PartitionMark(), "run-1"))
    store.commit(batch(store.root, TP, 10, 20, mark(10, 5), "run-2"))
    first = store.files([TP])[0]
    new = write(store.root, TP, 0, 10, attempt="r")
    record = BatchRecord("replay", (OffsetRange("orders", 0, 0, 10, records=10),))
    store.commit(TableCommit(Owner(GROUP, 5), {TP: mark(20, 5)}, {TP: 10}, (new,), (first,), record))

    assert store.marks(GROUP, [TP])[TP] == PartitionMark(10, 5, 20)
    replayed = store.last_batch(GROUP, TP, 10)
    assert replayed is not None and replayed.run_id == "replay"
    assert [(f.from_offset, f.attempt) for f in store.files([TP])] == [(0, "r"), (10, "a")]
    assert offsets(url) == [(0, o) for o in range(20)]
    with pytest.raises(
        TableConflictError, match="marks are head 10, generation 5, reach 20; this batch expected head 20"
    ):
        store.commit(batch(store.root, TP, 20, 30, mark(20, 5), "run-stale"))


def test_a_new_nullable_column_is_added_and_older_rows_read_null(store: IcebergTableStore, url: str) -> None:
    store.commit(batch(store.root, TP, 0, 2, PartitionMark(), "run-1"))
    wider = SCHEMA.append(pa.field("country", pa.string()))
    data = rows(TP, 2, 4, wider, country=["DE", "FR"])
    store.commit(batch(store.root, TP, 2, 4, mark(2, 5), "run-2", table=data))

    schema = store.schema()
    assert schema is not None and schema.field("country").type == pa.string() and schema.field("country").nullable
    read = load(url).scan().to_arrow().sort_by("id")
    assert read.column("country").to_pylist() == [None, None, "DE", "FR"]
    store.commit(batch(store.root, TP, 4, 6, mark(4, 5), "run-3"))  # files without it still land
    assert offsets(url) == [(0, o) for o in range(6)]


@pytest.mark.parametrize(
    ("field", "values", "message"),
    [
        (pa.field("country", pa.string(), nullable=False), ["DE", "FR"], "'country' .* which is not nullable"),
        (pa.field("name", pa.int64()), [1, 2], "field 'name' is int64 in the batch but string in the table"),
        (pa.field("id", pa.int64()), [2, 3], "has a nullable field 'id', which the table requires"),
    ],
)
def test_a_batch_that_does_not_fit_the_schema_is_refused_and_nothing_lands(
    store: IcebergTableStore, url: str, field: pa.Field, values: list[Any], message: str
) -> None:
    store.commit(batch(store.root, TP, 0, 2, PartitionMark(), "run-1"))
    before = load(url).metadata_location
    index = SCHEMA.get_field_index(field.name)
    schema = SCHEMA.append(field) if index < 0 else SCHEMA.set(index, field)
    data = rows(TP, 2, 4, schema, **{field.name: values})
    with pytest.raises(TableSchemaError, match=message):
        store.commit(batch(store.root, TP, 2, 4, mark(2, 5), "run-2", table=data))
    assert load(url).metadata_location == before and store.schema() == SCHEMA


def test_a_file_that_lets_a_required_nested_field_be_null_is_refused_without_pyiceberg_dump(
    store: IcebergTableStore, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    children = [pa.field(f.name, f.type, nullable=f.name != "offset") for f in KAFKA]
    strict = SCHEMA.set(2, pa.field("kafka", pa.struct(children)))
    store.commit(batch(store.root, TP, 0, 2, PartitionMark(), "run-1", table=rows(TP, 0, 2, strict)))
    before = load(url).metadata_location
    with pytest.raises(TableSchemaError, match=r"has a nullable field 'kafka\.offset', which the table requires"):
        store.commit(batch(store.root, TP, 2, 4, mark(2, 5), "run-2"))
    assert load(url).metadata_location == before and capsys.readouterr().out == ""


def test_missing_or_resized_files_are_refused_before_any_commit(store: IcebergTableStore, url: str) -> None:
    change = batch(store.root, TP, 0, 10, PartitionMark(), "run-1")
    (new,) = change.adds
    resized = NewFile(new.path, new.size + 1, new.records, new.schema)
    with pytest.raises(ValueError, match=rf"{new.path} under .* is {new.size} bytes, the batch wrote {new.size + 1}"):
        store.commit(TableCommit(change.owner, change.expected, change.heads, (resized,), (), change.batch))
    elsewhere = NewFile("data/part-0.parquet", new.size, new.records, new.schema)
    with pytest.raises(ValueError, match="not a data file path of Cohort's layout"):
        store.commit(TableCommit(change.owner, change.expected, change.heads, (elsewhere,), (), change.batch))
    with pytest.raises(ValueError, match="moves the head only of a partition whose marks it expects"):
        store.commit(TableCommit(change.owner, {}, change.heads, change.adds, (), change.batch))
    (Path(store.root) / new.path).unlink()
    with pytest.raises(FileNotFoundError, match=f"{new.path} does not exist under"):
        store.commit(change)
    assert not store.exists()


def test_a_commit_without_files_on_a_missing_table_does_nothing(store: IcebergTableStore) -> None:
    store.commit(TableCommit(Owner(GROUP, 3), {TP: PartitionMark()}))
    assert not store.exists() and store.marks(GROUP, [TP]) == {TP: PartitionMark()}


def test_a_commit_without_files_that_names_a_schema_creates_the_table(store: IcebergTableStore, url: str) -> None:
    store.commit(TableCommit(Owner(GROUP, 3), {TP: PartitionMark()}, schema=SCHEMA))
    assert store.schema() == SCHEMA and store.marks(GROUP, [TP]) == {TP: mark(None, 3)}
    assert store.files([TP]) == [] and load(url).scan().to_arrow().num_rows == 0
    store.commit(batch(store.root, TP, 0, 2, mark(None, 3), "run-1", generation=3))
    assert offsets(url) == [(0, 0), (0, 1)]


def test_files_lists_only_the_given_partitions_sorted(store: IcebergTableStore) -> None:
    store.commit(batch(store.root, TP1, 0, 3, PartitionMark(), "run-1"))
    store.commit(batch(store.root, TP, 0, 4, PartitionMark(), "run-2"))
    store.commit(batch(store.root, TP, 4, 6, mark(4, 5), "run-3"))
    listed = store.files([TP1, TP])
    assert listed == sorted(listed) and [(f.partition, f.from_offset, f.records) for f in listed] == [
        (0, 0, 4),
        (0, 4, 2),
        (1, 0, 3),
    ]
    assert all(isinstance(f, DataFile) for f in listed) and store.files([]) == []


def test_map_columns_and_timestamps_keep_their_arrow_types(tmp_path: Path, url: str) -> None:
    store = IcebergTableStore(str(tmp_path / "maps") + "/", catalog_url=url, identifier="lake.maps")
    assert store.root == str(tmp_path / "maps")
    schema = SCHEMA.append(pa.field("attrs", pa.map_(pa.string(), pa.field("value", pa.int32(), nullable=False))))
    data = rows(TP, 0, 2, schema, attrs=[[("a", 1)], []])
    store.commit(batch(store.root, TP, 0, 2, PartitionMark(), "run-1", table=data))
    assert store.schema() == schema


def test_errors_and_repr_name_the_table_never_the_catalog_url(tmp_path: Path) -> None:
    url = "postgresql+psycopg://cohort:s3cret-pw@127.0.0.1:1/catalog?connect_timeout=2"
    store = IcebergTableStore(str(tmp_path / "table"), catalog_url=url, identifier=IDENTIFIER)
    assert "s3cret" not in repr(store) and IDENTIFIER in repr(store)
    with pytest.raises(RuntimeError, match=r"Iceberg table lake\.orders at .*: the Iceberg catalog failed") as failed:
        store.exists()
    assert "s3cret" not in str(failed.value) and failed.value.__cause__ is None
    with pytest.raises(ValueError, match=r"namespace\.table"):
        IcebergTableStore(str(tmp_path), catalog_url=url, identifier="orders")


def test_a_file_uri_root_is_the_same_table(tmp_path: Path, url: str) -> None:
    store = IcebergTableStore(f"file://{tmp_path}/uri", catalog_url=url, identifier="lake.uri")
    change = batch(str(tmp_path / "uri"), TP, 0, 3, PartitionMark(), "run-1")
    store.commit(change)
    assert [f.path for f in store.files([TP])] == [change.adds[0].path]
    assert SqlCatalog("cohort", uri=url).load_table("lake.uri").scan().to_arrow().num_rows == 3
