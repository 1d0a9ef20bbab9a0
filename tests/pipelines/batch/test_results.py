"""A batch's consumed ranges as materialization metadata and Airflow event extras: a transform's filtered and
expanded counts are there when not 0, and the counts add up to the records consumed."""

from cohort.assets.translator import RangeMetadata
from cohort.common.types import OffsetRange
from cohort.pipelines.batch.results import BatchResult, PartitionResult
from cohort.runtime.lineage import consumed_ranges, reported_range


def _ranges(part: PartitionResult) -> list:
    result = BatchResult(run_id="r", partitions=(part,))
    who = {"group": "g", "generation": 3, "member": "m", "instance_id": "g/worker-1", "run_id": "r"}
    return consumed_ranges(result, **who, lag_after={})


def test_a_transforms_counts_reach_the_materialization_and_the_event_only_when_not_zero():
    plain, shaped = (
        PartitionResult("t", 0, 0, 10, records=9, quarantined=1),
        PartitionResult("t", 0, 0, 10, records=12, quarantined=1, filtered=3, expanded=6),
    )
    assert plain.consumed == shaped.consumed == 10
    [plain_range], [shaped_range] = _ranges(plain), _ranges(shaped)
    assert "cohort/filtered" not in plain_range.as_extra() and "cohort/expanded" not in plain_range.as_extra()
    extra = shaped_range.as_extra()
    assert (extra["cohort/records"], extra["cohort/filtered"], extra["cohort/expanded"]) == (12, 3, 6)
    metadata = RangeMetadata.of(shaped_range).to_metadata()
    assert (metadata["cohort/filtered"].value, metadata["cohort/expanded"].value) == (3, 6)


def test_a_range_reported_from_the_ledger_keeps_its_counts():
    entry = OffsetRange("t", 0, 0, 10, records=12, quarantined=1, filtered=3, expanded=6)
    assert entry.consumed == 10
    reported = reported_range(
        entry, group="g", generation=3, member="m", instance_id="g/worker-1", run_id="r", reported_by="r2"
    )
    assert (reported.filtered, reported.expanded, reported.records) == (3, 6, 12)
