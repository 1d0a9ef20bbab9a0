"""The retention decisions of the table sinks (pure): which old versions expire, and when the clean-up runs."""

from __future__ import annotations

import pytest

from cohort.pipelines.tables.retention import (
    DEFAULT_RETENTION,
    TableRetention,
    delta_configuration,
    expired_versions,
    maintenance_due,
    vacuum_hours,
)

HOUR_MS = 3_600_000


def test_versions_older_than_the_retention_expire_but_the_newest_and_the_current_stay() -> None:
    now = 100 * HOUR_MS
    versions = [(i, now - (20 - i) * HOUR_MS) for i in range(20)]  # one an hour, version 19 the newest (now)
    retention = TableRetention(keep_s=5 * 3600, min_versions=3)
    assert expired_versions(versions, 19, frozenset(), now_ms=now, retention=retention) == list(range(15))
    # the newest `min_versions` stay whatever their age
    old = TableRetention(keep_s=0, min_versions=3)
    assert expired_versions(versions, 19, frozenset(), now_ms=now, retention=old) == list(range(17))
    # the current version and protected ones (branch, tag heads) never expire, even when older (a roll-back)
    assert 2 not in expired_versions(versions, 2, frozenset({4}), now_ms=now, retention=old)
    assert 4 not in expired_versions(versions, 2, frozenset({4}), now_ms=now, retention=old)
    # a version exactly at the cutoff is kept
    assert (
        expired_versions(
            [(1, now - HOUR_MS), (2, now)],
            2,
            frozenset(),
            now_ms=now,
            retention=TableRetention(keep_s=3600, min_versions=1),
        )
        == []
    )


def test_the_clean_up_runs_when_the_version_passes_a_multiple() -> None:
    assert [v for v in range(0, 200) if maintenance_due(v, v + 1, 50)] == [49, 99, 149, 199]
    assert maintenance_due(48, 52, 50)  # a commit rebased over others' still counts the multiple it passed
    assert not maintenance_due(50, 51, 50)
    assert not maintenance_due(1, 2, 50)


def test_delta_keeps_removed_files_longer_than_the_vacuum_and_the_log_as_long_as_history() -> None:
    retention = TableRetention(keep_s=5400, history_s=86400)
    config = delta_configuration(retention)
    assert config["delta.logRetentionDuration"] == "interval 86400 seconds"
    assert config["delta.deletedFileRetentionDuration"] == f"interval {5400 + 86400} seconds"
    assert vacuum_hours(retention) == 2  # rounded up: a file is never deleted before `keep_s`
    assert vacuum_hours(TableRetention(keep_s=0, history_s=0)) == 0


def test_the_default_keeps_an_hour_and_the_newest_ten() -> None:
    assert (DEFAULT_RETENTION.keep_s, DEFAULT_RETENTION.min_versions) == (3600.0, 10)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keep_s": -1}, "keep_s must be a number of seconds >= 0"),
        ({"keep_s": float("nan")}, "keep_s must be a number of seconds >= 0"),
        ({"keep_s": 7200, "history_s": 3600}, "history_s (3600) must be at least keep_s"),
        ({"min_versions": 0}, "min_versions must be an integer >= 1"),
        ({"every_commits": True}, "every_commits must be an integer >= 1"),
    ],
)
def test_bad_retention_settings_are_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TableRetention(**kwargs)  # type: ignore[arg-type]


def test_the_spec_takes_a_retention_or_none_and_refuses_anything_else(tmp_path: object) -> None:
    from cohort.pipelines.spec import PipelineSpec

    assert (
        PipelineSpec(sink_path="/tmp/x", table_format="delta", value_format="utf8").table_retention == DEFAULT_RETENTION
    )
    assert (
        PipelineSpec(
            sink_path="/tmp/x", table_format="delta", value_format="utf8", table_retention=None
        ).table_retention
        is None
    )
    with pytest.raises(ValueError, match="table_retention must be a TableRetention or None, got int"):
        PipelineSpec(sink_path="/tmp/x", table_format="delta", value_format="utf8", table_retention=3600)  # type: ignore[arg-type]
