"""Content digests of a range's output: the same rows give the same digest whatever their order, their file
split or their writer's metadata; any change of a value, a type, a column or the quarantine changes it."""

from __future__ import annotations

import pyarrow as pa

from cohort.pipelines.sink.digest import digest

ROWS = pa.table({"kafka": [{"offset": o} for o in range(6)], "amount": [1.5, 2.0, None, 4.0, 5.0, 6.25]})
BAD = pa.table({"kafka": [{"offset": 6}], "_cohort_reason": ["value is not valid JSON"]})


def test_order_split_and_metadata_do_not_count():
    shuffled = ROWS.take([5, 3, 0, 1, 4, 2])
    halves = [ROWS.slice(3).replace_schema_metadata({"writer": "spark"}), ROWS.slice(0, 3)]
    assert digest([ROWS], [BAD], 0, 10) == digest([shuffled], [BAD], 0, 10) == digest(halves, [BAD], 0, 10)


def test_only_the_offsets_of_the_window_count():
    other = ROWS.set_column(1, "amount", pa.array([9.0, 2.0, None, 4.0, 5.0, 6.25]))  # offset 0 differs
    assert digest([ROWS], [], 1, 6) == digest([other], [], 1, 6)
    assert digest([ROWS], [], 0, 6) != digest([other], [], 0, 6)


def test_a_value_a_type_a_column_or_the_quarantine_changes_the_digest():
    base = digest([ROWS], [BAD], 0, 10)
    changed_value = ROWS.set_column(1, "amount", pa.array([1.5, 2.0, None, 4.0, 5.0, 6.5]))
    changed_type = ROWS.set_column(1, "amount", pa.array([1.5, 2.0, None, 4.0, 5.0, 6.25], pa.float32()))
    extra_column = ROWS.append_column("user", pa.array(["u"] * 6))
    null_filled = ROWS.set_column(1, "amount", pa.array([1.5, 2.0, 0.0, 4.0, 5.0, 6.25]))
    for rows in (changed_value, changed_type, extra_column, null_filled):
        assert digest([rows], [BAD], 0, 10) != base
    assert digest([ROWS], [], 0, 10) != base  # the bad record passed this time: no quarantine row
    assert digest([ROWS.slice(0, 5)], [BAD], 0, 10) != base  # a record missing
