"""How a reading task judges what a consume call returned (records, end of partition, errors): the same rules
for confluent-kafka's consumer and the C one, which both report errors as ConsumeError."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cohort.pipelines.tasks.reader import OffsetSpan, ReadError, _triage
from cohort.pipelines.tasks.records import RECORD_SCHEMA, ConsumeError

SPAN = OffsetSpan("t", 0, 10, 20)
EOF_CODE, OUT_OF_RANGE, AUTO_RESET = -191, 1, -140


def _batch(offsets: list[int]) -> pa.RecordBatch:
    n = len(offsets)
    arrays = [pa.array(offsets, pa.int64()) if f.name == "offset" else pa.nulls(n, f.type) for f in RECORD_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=RECORD_SCHEMA)


def test_records_inside_the_span_pass_and_one_past_its_end_proves_it_complete():
    kept, transient, done = _triage(_batch([10, 11, 12]), [], SPAN, 10)
    assert (kept.num_rows, transient, done) == (3, None, False)
    kept, _, done = _triage(_batch([18, 19, 20, 21]), [], SPAN, 18)
    assert (kept.column("offset").to_pylist(), done) == ([18, 19], True)
    kept, _, done = _triage(_batch([22]), [], SPAN, 18)  # holes up to the bound: nothing of the span left
    assert (kept, done) == (None, True)


def test_end_of_partition_completes_the_span_only_at_or_past_its_bound():
    assert _triage(None, [ConsumeError(20, EOF_CODE, "eof")], SPAN, 15)[2] is True
    assert _triage(None, [ConsumeError(15, EOF_CODE, "eof")], SPAN, 15)[2] is False


@pytest.mark.parametrize("code", [OUT_OF_RANGE, AUTO_RESET])
def test_records_gone_from_kafka_fail_at_once(code):
    with pytest.raises(ReadError, match=r"t-0: offset 12 is out of range.*\[12, 20\) are no longer in Kafka"):
        _triage(None, [ConsumeError(12, code, "gone")], SPAN, 12)


def test_fatal_errors_fail_and_others_are_retried():
    with pytest.raises(ReadError, match="reading t-0 at offset 12: fenced"):
        _triage(None, [ConsumeError(-1, -150, "fenced", fatal=True)], SPAN, 12)
    assert _triage(None, [ConsumeError(-1, -195, "transport down")], SPAN, 12) == (None, "transport down", False)
