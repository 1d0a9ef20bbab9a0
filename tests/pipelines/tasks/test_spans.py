"""How a batch's spans are dealt to a given number of reading tasks, the garbage collector's pause while a task
computes its rows, and which Parquet columns the tasks dictionary-encode."""

from __future__ import annotations

import gc

import pyarrow as pa
import pytest

from cohort.pipelines.tasks.reader import OffsetSpan, _gc_paused_within, span_groups
from cohort.pipelines.tasks.writer import dictionary_columns


def _span(partition: int, length: int) -> OffsetSpan:
    return OffsetSpan("t", partition, 100, 100 + length)


def test_every_span_lands_in_exactly_one_group_of_near_equal_offsets():
    spans = [_span(p, n) for p, n in enumerate([50, 10, 40, 30, 20, 60, 5, 5])]
    groups = span_groups(spans, 3)
    assert len(groups) == 3
    assert sorted(s.partition for g in groups for s in g) == list(range(8))
    loads = [sum(s.until_offset - s.from_offset for s in g) for g in groups]
    assert max(loads) - min(loads) <= 10
    assert all([spans.index(s) for s in g] == sorted(spans.index(s) for s in g) for g in groups)


def test_fewer_spans_than_tasks_gives_one_group_per_span():
    spans = [_span(0, 5), _span(1, 0)]
    assert span_groups(spans, 8) == [[spans[0]], [spans[1]]]
    assert span_groups([], 2) == []
    with pytest.raises(ValueError, match="tasks must be >= 1"):
        span_groups(spans, 0)


def test_only_string_columns_are_dictionary_encoded():
    schema = pa.schema(
        [
            pa.field("kafka", pa.struct([pa.field("topic", pa.string()), pa.field("offset", pa.int64())])),
            pa.field("user", pa.large_string()),
            pa.field("id", pa.int64()),
            pa.field("raw", pa.binary()),
            pa.field("tags", pa.list_(pa.string())),
        ]
    )
    assert dictionary_columns(schema) == ["kafka.topic", "user"]


def test_the_collector_is_paused_while_rows_are_computed_and_back_between_them():
    def rows():
        for _ in range(2):
            yield pa.record_batch({"collecting": [gc.isenabled()]})

    assert gc.isenabled()
    seen = []
    for row in _gc_paused_within(rows()):
        seen.append(row.column(0)[0].as_py())
        assert gc.isenabled()
    assert seen == [False, False]
    next(_gc_paused_within(rows()))  # a reader that stops early
    assert gc.isenabled()
