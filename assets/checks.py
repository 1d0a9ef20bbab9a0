"""The asset checks: per partition, offset contiguity and agreement and lag with freshness (on the topic asset),
and the sink against the ledger (on the landed asset).

The checks are declared on the group's batch op (`cohort.assets.group_batch`), so they run after every batch in
the same run, and alone when launched from the asset page. Contiguity fails on any ledger gap or overlap, on a
ledger range without a materialization, on a materialization the ledger does not account for (offsets it never
committed, or no offsets at all: reported by hand or by foreign code, named by its run), and when Kafka's
committed offset differs from the ledger's. Lag fails for a partition more than `lag_threshold` records behind its
end offset whose last commit is older than `freshness_s`: a group that keeps up passes while its producer writes;
a stalled one fails. The sink check drives the sink's auditor as `cohort audit` does (cohort.runtime.sink_audit:
the sink's and the quarantine's range directories and whatever else readers read there, or the tables' files and
marks, against the ledger); a replay an offset reset left pending passes, and is said.
"""

from collections.abc import Collection, Iterator

import dagster as dg

from cohort.assets.audit import PartitionAudit, gather_audits
from cohort.assets.translator import CHECK_CONTIGUOUS, CHECK_LAG, CHECK_SINK, CohortConfig, DagsterCohortTranslator
from cohort.assignment.clock import Clock, SystemClock
from cohort.assignment.coordinator import Coordinator
from cohort.pipelines.tasks.writer import ArrowFs
from cohort.resources.group import CohortGroupResource
from cohort.resources.kafka import KafkaResource
from cohort.runtime.sink_audit import open_auditor, repair_hints

__all__ = ["AUDIT_TAG", "check_results", "lagging", "op_results"]

AUDIT_TAG = "cohort/audit"
"""Run tag: `full` makes the run's offsets checks read the whole ledger and trail, not only what changed."""

_MAX_SHOWN = 20


def lagging(audits: Collection[PartitionAudit], *, threshold: int, freshness_s: float, now: float) -> dict[str, int]:
    """Partition -> lag of the partitions behind by more than `threshold` with no commit for `freshness_s`."""
    stale = {}
    for audit in audits:
        fresh = audit.last_commit_at is not None and now - audit.last_commit_at <= freshness_s
        if audit.lag > threshold and not fresh:
            stale[str(audit.tp.partition)] = audit.lag
    return stale


def check_results(
    instance: dg.DagsterInstance,
    config: CohortConfig,
    translator: DagsterCohortTranslator,
    group: CohortGroupResource,
    kafka: KafkaResource,
    selected: Collection[dg.AssetCheckKey],
    clock: Clock | None = None,
    *,
    full: bool = False,
) -> Iterator[dg.AssetCheckEvaluation]:
    """The evaluations of the `selected` checks of the group's topic assets: the offsets checks read what changed
    since each partition's trail mark, or everything with `full` (a run tagged `cohort/audit: full`).

    Each judges every partition of its asset at once, whatever partitions the run targets; the batch op yields
    each as its result (`op_results`).
    """
    coordinator = group.get_coordinator(clock)
    now = (clock or SystemClock()).now()
    for topic in config.asset_topics:
        landed = translator.get_landed_asset_key(config.group, topic)
        if any(c.asset_key == landed and c.name == CHECK_SINK for c in selected):
            yield _sink_check(coordinator, config, topic, landed, now, full=full)
        key = translator.get_asset_key(config.group, topic)
        wanted = {c.name for c in selected if c.asset_key == key}
        if not wanted:
            continue
        partitions = kafka.partition_counts([topic]).get(topic, 0)
        audits = gather_audits(
            coordinator,
            config.group,
            topic,
            partitions,
            instance=instance,
            asset_key=key,
            kafka=kafka,
            several_instances=config.host_slots is not None,
            host_slots=config.host_slots,
            full=full,
        )
        if CHECK_CONTIGUOUS in wanted:
            problems = [p for a in audits for p in a.problems]
            yield dg.AssetCheckEvaluation(
                check_name=CHECK_CONTIGUOUS,
                asset_key=key,
                passed=not problems,
                metadata={
                    "cohort/partitions": dg.MetadataValue.int(len(audits)),
                    "cohort/ledger_ranges": dg.MetadataValue.int(sum(a.ledger_ranges for a in audits)),
                    "cohort/gaps_recorded": dg.MetadataValue.int(sum(a.gaps for a in audits)),
                    "cohort/problems": dg.MetadataValue.int(len(problems)),
                    "cohort/ranges_of_other_instances": dg.MetadataValue.int(sum(a.elsewhere for a in audits)),
                    "cohort/details": dg.MetadataValue.md(
                        "\n".join(f"- {p}" for p in problems[:_MAX_SHOWN]) or "every partition agrees"
                    ),
                },
            )
        if CHECK_LAG in wanted:
            behind = lagging(audits, threshold=config.lag_threshold, freshness_s=config.freshness_s, now=now)
            table = "\n".join(
                ["| partition | lag | last commit (s ago) |", "|---|---|---|"]
                + [
                    f"| {a.tp.partition} | {a.lag} | "
                    f"{'-' if a.last_commit_at is None else f'{now - a.last_commit_at:.0f}'} |"
                    for a in audits[:_MAX_SHOWN]
                ]
            )
            yield dg.AssetCheckEvaluation(
                check_name=CHECK_LAG,
                asset_key=key,
                passed=not behind,
                metadata={
                    "cohort/max_lag": dg.MetadataValue.int(max((a.lag for a in audits), default=0)),
                    "cohort/total_lag": dg.MetadataValue.int(sum(a.lag for a in audits)),
                    "cohort/threshold": dg.MetadataValue.int(config.lag_threshold),
                    "cohort/freshness_s": dg.MetadataValue.float(config.freshness_s),
                    "cohort/stale_partitions": dg.MetadataValue.json(dict(list(behind.items())[:_MAX_SHOWN])),
                    "cohort/per_partition": dg.MetadataValue.md(table),
                },
            )


def op_results(
    assets_def: dg.AssetsDefinition, evaluation: dg.AssetCheckEvaluation
) -> Iterator[dg.Output[None] | dg.AssetCheckEvaluation]:
    """The evaluation of a check the batch op declares, as that op's result: the check's output (so Dagster knows
    the op ran it) and the evaluation. This is what Dagster makes of an `AssetCheckResult`, which the op cannot
    yield itself: to find the materialization a result checks, Dagster reads the topic asset (the landed asset's
    input in the op) for the run's partition, and fails in a run that targets none (the schedule's, the
    sensors', the checks job's)."""
    yield dg.Output(None, output_name=assets_def.get_output_name_for_asset_check_key(evaluation.asset_check_key))
    yield evaluation


def _sink_check(
    coordinator: Coordinator, config: CohortConfig, topic: str, key: dg.AssetKey, now: float, *, full: bool = False
) -> dg.AssetCheckEvaluation:
    """The sink and the quarantine of `topic` against the ledger, partition by partition, names only (`cohort
    audit` also counts the range directories' rows), as it runs after every batch: of a Parquet sink, the ranges
    committed since each partition's mark (cohort.runtime.sink_since), everything with `full`; the rest of
    each tree around the partition folders. `now` judges the age of a table's unreferenced files."""
    assert config.pipeline is not None  # the check is declared only with a pipeline
    everything = coordinator.ledger_partitions(config.group)
    tps = [tp for tp in everything if tp.topic == topic]
    auditor = open_auditor(config.pipeline, ArrowFs(), now=now, after_batch=True, full=full)
    reports = auditor.audit(coordinator, config.group, tps)
    findings = [f for r in reports for f in r.findings]
    outside = auditor.outside(everything, topic=topic)
    pending = [(r.tp, r.records.pending) for r in reports if r.records.pending is not None]
    auditor.settle(coordinator, config.group, [r for r in reports if r.records.pending is None and not r.findings])
    hints = repair_hints()
    lines = [f"- {f.tp} {f.where}: {f.message}{f' ({hints[f.repair]})' if f.repair else ''}" for f in findings]
    lines += [f"- {f.where}: {f.message}{f' ({hints[f.repair]})' if f.repair else ''}" for f in outside]
    notes = [f"- {tp}: pending: {p.describe()}" for tp, p in pending]
    details = "\n".join(lines[:_MAX_SHOWN] or ["the sink holds what the ledger committed"])
    if notes:
        details += "\n\nPending (no divergence):\n" + "\n".join(notes[:_MAX_SHOWN])
    return dg.AssetCheckEvaluation(
        check_name=CHECK_SINK,
        asset_key=key,
        passed=not lines,
        metadata={
            "cohort/partitions": dg.MetadataValue.int(len(tps)),
            "cohort/problems": dg.MetadataValue.int(len(lines)),
            "cohort/pending_replays": dg.MetadataValue.int(len(pending)),
            "cohort/details": dg.MetadataValue.md(details),
        },
    )
