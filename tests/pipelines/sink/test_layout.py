"""The sink's layout, unsafe names, and the publish / replace / withdraw moves on a real Hadoop FileSystem."""

from __future__ import annotations

import pytest

from cohort.common.names import InvalidNameError
from cohort.common.types import TopicPartition
from cohort.pipelines.sink.layout import HadoopFs, SinkError, SinkLayout, parse_range_dir, range_dir_name


def test_range_directory_names_encode_the_range_and_parse_back():
    name = range_dir_name("orders.v2-eu", 7, 1200, 1500)
    assert name == "orders.v2-eu-7-1200-1500.parquet"
    assert parse_range_dir(name) == ("orders.v2-eu", 7, 1200, 1500)
    assert parse_range_dir("part-0000.parquet") is None and parse_range_dir("_SUCCESS") is None


@pytest.mark.parametrize("topic", ["../x", "a/b", "..", "t=1", "", "x\x00"])
def test_unsafe_topic_names_never_reach_a_path(topic):
    layout = SinkLayout("/tmp/lake")
    with pytest.raises(InvalidNameError):
        layout.range_dir(topic, 0, 0, 1)
    with pytest.raises(InvalidNameError):
        layout.staged_range_dir("abc", topic, 0)


@pytest.mark.parametrize("partition", [-1, True, "0", None])
def test_partitions_must_be_non_negative_ints(partition):
    with pytest.raises(ValueError, match="partition must be an int"):
        SinkLayout("/tmp/lake").partition_dir("t", partition)  # type: ignore[arg-type]


def test_attempt_ids_and_roots_are_checked():
    with pytest.raises(ValueError, match="alphanumeric"):
        SinkLayout("/tmp/lake").staging_root("../x")
    with pytest.raises(ValueError, match="non-empty"):
        SinkLayout("  ")
    assert SinkLayout("hdfs://nn:8020/lake/").root == "hdfs://nn:8020/lake"


def _stage(fs: HadoopFs, layout: SinkLayout, attempt: str, topic: str, partition: int) -> None:
    fs.touch(f"{layout.staged_range_dir(attempt, topic, partition)}/part-0.parquet")


def test_publish_moves_staged_ranges_into_place_and_withdraw_is_attempt_scoped(spark, tmp_path):
    fs = HadoopFs(spark)
    layout = SinkLayout(str(tmp_path / "lake"))
    tp = TopicPartition("t", 0)
    _stage(fs, layout, "a1", "t", 0)
    first = list(layout.publish(fs, "a1", {tp: (0, 10)}))
    assert first == [layout.range_dir("t", 0, 0, 10)]
    assert not fs.exists(layout.staged_range_dir("a1", "t", 0))
    _stage(fs, layout, "a2", "t", 0)
    second = list(layout.publish(fs, "a2", {tp: (10, 25)}))
    assert [(f, u) for f, u, _ in layout.range_dirs(fs, "t", 0)] == [(0, 10), (10, 25)]

    layout.withdraw(fs, "a1", second)  # not a1's directory: kept
    assert fs.exists(second[0])
    layout.withdraw(fs, "a2", second)
    assert not fs.exists(second[0]) and fs.exists(first[0])


def test_through_hadoop_a_replay_is_refused_before_the_commit(spark, tmp_path):
    """Hadoop's FileSystem cannot swap directories: replacing offsets the sink holds would leave an instant
    with both or neither, so `prepare` (before the ledger commit) refuses, naming the partition."""
    fs = HadoopFs(spark)
    layout = SinkLayout(str(tmp_path / "lake"))
    tp = TopicPartition("t", 1)
    _stage(fs, layout, "a1", "t", 1)
    list(layout.publish(fs, "a1", {tp: (0, 5)}))
    _stage(fs, layout, "a2", "t", 1)
    layout.prepare(fs, "a2", {tp: (5, 9)})  # new offsets: fine
    with pytest.raises(SinkError, match=r"t-1: offsets \[3, 9\) are already in the sink .* local file system"):
        layout.prepare(fs, "a2", {tp: (3, 9)})


def test_rename_refuses_to_overwrite(spark, tmp_path):
    fs = HadoopFs(spark)
    fs.touch(str(tmp_path / "a" / "x"))
    fs.touch(str(tmp_path / "b" / "y"))
    with pytest.raises(SinkError, match="the target exists"):
        fs.rename(str(tmp_path / "a"), str(tmp_path / "b"))
