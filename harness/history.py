"""Fast-forward a group's history: the ledger ranges, materializations and sink directories of N batches, in bulk.

A group scheduled every minute leaves hundreds of thousands of committed ranges per partition within a year;
running that many batches is out of the question, so this writes what they would have left:

- **Ledger.** The slot joins the group as its static member through the real protocol (`GroupMember.join`), then
  the ranges go through the coordinator's own commit decision (`decide_commit`: fencing by member and generation,
  contiguity) inside the store's transaction (`GroupStore.transact`, which writes the rows), many runs' ranges
  as one commit per transaction (the ledger takes several contiguous ranges of a partition in one commit). Each
  entry gets its own run's id and time (`committed_at`: runs `interval_s` apart, the last one now) between the
  decision and the write: one commit per run would cost a millisecond a range, and the decision must take the
  real clock for the member's session and progress deadlines. All runs share the one membership (member id,
  generation), where real runs that leave the group rejoin with new ones.
- **Materializations.** Built by the worker's own builder (`cohort.assets.worker.materializations`, from a
  `WorkerOutcome` of the simulated batch) and wrapped in the envelope a worker run's step gives them
  (`step_event`). The serializer costs about a millisecond an event, so one sentinel batch is serialized and
  every other batch's rows are that text with its run id, offsets and times put in (`_RunTemplate`), checked
  equal to the storage's own rows (`_event_to_row`) of the really built events of batches 1, N/2 and N-2. The
  rows go in bulk into the event log's cross-run index; batch 0's are built for real, and the last batch's
  events go through `store_event` (the whole path), which also moves the asset index's latest materialization.
  Runs get no run record; run-lifecycle events, planned materializations and check evaluations are not written.
- **Sink.** A Parquet range directory per committed range, holding a hard link to one one-row Parquet file
  (each range consumes `records` offsets, all landed: `records` rows), as `cohort audit` reads the sink.

Nothing here talks to Kafka: `mirror_heads` (the real mirror) and the broker's records are the caller's.
"""

from __future__ import annotations

import datetime
import functools
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
from dagster._core.definitions.dependency import NodeHandle
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.events.log import EventLogEntry
from dagster._core.execution.plan.handle import StepHandle
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage

from cohort.assets.translator import CohortConfig, DagsterCohortTranslator
from cohort.assets.worker import WorkerOutcome, landed_root, materializations, op_name
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.ledger.ranges import decide_commit
from cohort.assignment.protocol.group_state import GroupRecord
from cohort.assignment.protocol.messages import CommitRequest, Decision, LedgerEntry
from cohort.assignment.protocol.rebalance import Context
from cohort.assignment.store.protocol import HeadReader
from cohort.assignment.worker_group import WorkerGroup
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.batch.results import BatchResult, PartitionResult
from cohort.pipelines.kafka.mirror import KafkaOffsetMirror
from cohort.pipelines.sink.layout import SinkLayout

__all__ = [
    "FastForward",
    "HistorySpec",
    "Membership",
    "commit_history",
    "fast_forward",
    "mirror_heads",
    "record_materializations",
    "run_events",
    "step_event",
    "write_sink",
]

_RUN_NAMESPACE = uuid.UUID("5f1c1b8e-3c55-4a8e-9a57-2f0c2a1d0b7e")
_EVENTS_PER_INSERT = 2_000
_LINKS_PER_FILE = 50_000


@dataclass(frozen=True)
class HistorySpec:
    """N batches of one worker slot over `partitions` partitions of `topic`: batch k consumes offsets
    [k * records, (k + 1) * records) of every partition, `interval_s` after batch k - 1; the last ends `end_at`."""

    group: str
    topic: str
    partitions: int
    batches: int
    records: int = 1
    interval_s: float = 60.0
    slot: int = 1
    end_at: float | None = None

    @property
    def tps(self) -> list[TopicPartition]:
        return [TopicPartition(self.topic, p) for p in range(self.partitions)]

    @property
    def head(self) -> int:
        """Every partition's committed offset once the history is written."""
        return self.batches * self.records

    def run_id(self, k: int) -> str:
        """Batch k's run id, shaped as Dagster's (a UUID): the slot's own prefix, then k (the same for the same k)."""
        return f"{_run_prefix(self.group, self.slot)}{k:012x}"

    def ending_now(self) -> HistorySpec:
        """This history with its end fixed (now, when it has none): every part written from it agrees on times."""
        return self if self.end_at is not None else replace(self, end_at=time.time())

    def at(self, k: int) -> float:
        """When batch k committed."""
        end = self.end_at if self.end_at is not None else time.time()
        return end - (self.batches - 1 - k) * self.interval_s

    def ranges(self, k: int) -> tuple[OffsetRange, ...]:
        low = k * self.records
        return tuple(
            OffsetRange(self.topic, p, low, low + self.records, records=self.records) for p in range(self.partitions)
        )


@functools.cache
def _run_prefix(group: str, slot: int) -> str:
    return str(uuid.uuid5(_RUN_NAMESPACE, f"{group}/{slot}"))[:24]


@dataclass(frozen=True)
class Membership:
    """The member the slot's batches committed as (all of them: see the module's docstring)."""

    member_id: str
    generation: int
    instance_id: str


def commit_history(
    group: WorkerGroup, coordinator: Coordinator, spec: HistorySpec, *, ranges_per_transaction: int = 10_000
) -> Membership:
    """Join as the slot's member, commit `spec.batches` runs' ranges through `decide_commit` (many runs per store
    transaction), leave. The group must have no ledger for the partitions yet (batch 0 starts at offset 0)."""
    if spec.batches < 1 or spec.partitions < 1 or spec.records < 1:
        raise ValueError(f"a history needs batches, partitions and records >= 1, got {spec}")
    member = group.member(
        coordinator, spec.slot, run_id=spec.run_id(0), topic_metadata=lambda: {spec.topic: spec.partitions}
    )
    try:
        owned = set(member.join())
        missing = sorted(set(spec.tps) - owned)
        if missing:
            raise ValueError(f"slot {spec.slot} owns {len(owned)} partitions, not {missing[:5]}: use one worker slot")
        assert member.member_id is not None
        joined = Membership(member.member_id, member.generation, group.instance_id(spec.slot))
        runs = max(1, ranges_per_transaction // spec.partitions)
        for first in range(0, spec.batches, runs):
            _commit_runs(coordinator, spec, joined, range(first, min(first + runs, spec.batches)))
    finally:
        member.close(leave=True)
    return joined


def _commit_runs(coordinator: Coordinator, spec: HistorySpec, member: Membership, runs: range) -> None:
    """One store transaction, one commit decision for the ranges of `runs` (the ledger takes several contiguous
    ranges of a partition in one commit); each entry then gets its own run's id and time."""
    partitions = spec.tps
    request = CommitRequest(
        tuple(r for k in runs for r in spec.ranges(k)), member.member_id, member.generation, member.instance_id
    )

    def step(current: GroupRecord | None, heads: HeadReader) -> Decision[tuple[LedgerEntry, ...]]:
        ctx = Context(now=coordinator.clock.now(), config=coordinator.config)
        decision = decide_commit(current, spec.group, request, heads(partitions), ctx)
        if decision.error is not None:
            raise decision.error
        if len(decision.entries) != len(request.ranges):
            raise AssertionError(f"{len(request.ranges)} ranges committed, {len(decision.entries)} recorded")
        entries = tuple(
            replace(e, run_id=spec.run_id(k), committed_at=spec.at(k))
            for e, k in zip(decision.entries, (k for k in runs for _ in partitions), strict=True)
        )
        return replace(decision, response=entries, entries=entries)

    coordinator.store.transact(spec.group, step)


def mirror_heads(kafka_config: dict[str, object], spec: HistorySpec) -> None:
    """Commit the ledger's heads to Kafka under the group id, as the batches' mirror would have (the real mirror)."""
    head = spec.head
    ranges = [OffsetRange(spec.topic, p, head, head) for p in range(spec.partitions)]
    KafkaOffsetMirror(kafka_config).mirror(spec.group, ranges, run_id=spec.run_id(spec.batches - 1))


# -- materializations ---------------------------------------------------------------------------------------


def step_event(
    materialization: dg.AssetMaterialization, *, run_id: str, job_name: str, step_key: str, timestamp: float
) -> EventLogEntry:
    """The event log entry a run's step stores for a materialization it yields (the shape `execute_in_process`
    leaves; tests/assets/test_long_history.py compares the two)."""
    node = NodeHandle(step_key, None)
    message = materialization.description or ""
    event = DagsterEvent(
        event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
        job_name=job_name,
        step_handle=StepHandle(node, step_key),
        node_handle=node,
        step_kind_value="COMPUTE",
        logging_tags={
            "job_name": job_name,
            "op_name": step_key,
            "resource_fn_name": "None",
            "resource_name": "None",
            "run_id": run_id,
            "step_key": step_key,
        },
        event_specific_data=StepMaterializationData(materialization, asset_lineage=[]),
        message=message,
        pid=os.getpid(),
        step_key=step_key,
    )
    return EventLogEntry(
        error_info=None,
        level=logging.DEBUG,
        user_message=message,
        run_id=run_id,
        timestamp=timestamp,
        step_key=step_key,
        job_name=job_name,
        dagster_event=event,
    )


def _outcome(spec: HistorySpec, member: Membership, k: int) -> WorkerOutcome:
    """What the worker's batch k would hand to `materializations`."""
    parts = tuple(
        PartitionResult(
            r.topic,
            r.partition,
            r.from_offset,
            r.until_offset,
            records=r.records,
            bytes=100 * r.records,
            seconds=0.05,
            start="earliest" if k == 0 else "committed",
        )
        for r in spec.ranges(k)
    )
    result = BatchResult(spec.run_id(k), parts, committed=spec.ranges(k))
    return WorkerOutcome(
        group=spec.group,
        slot=spec.slot,
        instance_id=member.instance_id,
        member_id=member.member_id,
        generation=member.generation,
        assignment=tuple(spec.tps),
        result=result,
        lag_after={tp: 0 for tp in spec.tps},
        attempts=1,
    )


def run_events(
    spec: HistorySpec,
    member: Membership,
    config: CohortConfig,
    translator: DagsterCohortTranslator,
    k: int,
    at: float | None = None,
) -> list[EventLogEntry]:
    """Batch k's events as its run stores them (at `at`, by default the batch's time), a millisecond apart."""
    run_id, at = spec.run_id(k), spec.at(k) if at is None else at
    job, step = translator.get_job_name(config.group), op_name(config)
    built = materializations(_outcome(spec, member, k), translator, run_id, landed_root(config.pipeline))
    return [
        step_event(m, run_id=run_id, job_name=job, step_key=step, timestamp=_time(at, i)) for i, m in enumerate(built)
    ]


def _time(at: float, i: int) -> float:
    """The time of a batch's i-th event."""
    return at + 0.001 * i


class _RunTemplate:
    """Batch k's event rows from one serialized sentinel batch, its run id, offsets and times substituted: the
    serializer costs about a millisecond an event, the substitution a few microseconds. `check` compares the result
    with the storage's own rows of the really built events."""

    def __init__(self, spec: HistorySpec, build: Callable[[int, float | None], list[EventLogEntry]], storage: Any):
        self.spec, self.build, self.storage = spec, build, storage
        self.rows = [storage._event_to_row(e) for e in build(_SENTINEL_BATCH, _SENTINEL_TIME)]
        sentinels = self._values(_SENTINEL_BATCH, _SENTINEL_TIME)
        pattern = re.compile("|".join(re.escape(s) for s in sentinels))
        self.pieces: list[tuple[list[str], list[int]]] = []  # per row: the literal text and the values between
        for row in self.rows:
            text: str = row["event"]
            literal, slots, at = [], [], 0
            for match in pattern.finditer(text):
                literal.append(text[at : match.start()])
                slots.append(sentinels.index(match.group()))
                at = match.end()
            literal.append(text[at:])
            self.pieces.append((literal, slots))

    def _values(self, k: int, at: float) -> list[str]:
        spec = self.spec
        low = k * spec.records
        times = [repr(_time(at, i)) for i in range(len(self.rows))]
        return [spec.run_id(k), str(low), str(low + spec.records), *times]

    def rows_of(self, k: int) -> list[dict[str, Any]]:
        at = self.spec.at(k)
        values = self._values(k, at)
        rows = []
        for i, (row, (literal, slots)) in enumerate(zip(self.rows, self.pieces, strict=True)):
            parts = [literal[0]]
            for slot, text in zip(slots, literal[1:], strict=True):
                parts += (values[slot], text)
            rows.append(
                {
                    **row,
                    "run_id": values[0],
                    "event": "".join(parts),
                    "timestamp": datetime.datetime.fromtimestamp(_time(at, i), datetime.UTC).replace(tzinfo=None),
                }
            )
        return rows

    def check(self, k: int) -> None:
        built = [self.storage._event_to_row(e) for e in self.build(k, None)]
        if built != self.rows_of(k):
            raise AssertionError(f"the templated events of batch {k} differ from the built ones: {built[0]['event']}")


_SENTINEL_BATCH = 7_919_191_919
_SENTINEL_TIME = 1_234_567_890.123457
"""The template's batch number and time: its offsets and times are digit strings found nowhere else in an event."""


def record_materializations(
    instance: dg.DagsterInstance,
    config: CohortConfig,
    spec: HistorySpec,
    member: Membership,
    *,
    translator: DagsterCohortTranslator | None = None,
) -> int:
    """Store every batch's materializations (topic and landed asset, per partition) in `instance`'s event log, as
    the worker's runs would have; registers the partition keys. Returns how many events were stored.

    Batch 0 and a few others are built and serialized for real; the rest come from a template checked against
    them. The last batch's events go through `store_event`."""
    translator = translator or DagsterCohortTranslator()
    storage = instance.event_log_storage
    if not isinstance(storage, SqlEventLogStorage):
        raise TypeError(f"{type(storage).__name__} is not a SQL event log storage: no bulk insert")
    name = translator.get_partitions_def_name(config.group)
    keys = [str(p) for p in range(spec.partitions) if not instance.has_dynamic_partition(name, str(p))]
    if keys:
        instance.add_dynamic_partitions(name, keys)

    def build(k: int, at: float | None = None) -> list[EventLogEntry]:
        return run_events(spec, member, config, translator, k, at)

    template = _RunTemplate(spec, build, storage)
    last = spec.batches - 1
    for k in sorted({1, last // 2, last - 1} & set(range(1, last))):
        template.check(k)
    stored = 0
    pending: list[dict[str, Any]] = []
    with storage.index_transaction() as conn:
        for k in range(last):
            pending.extend(template.rows_of(k) if k else [storage._event_to_row(e) for e in build(0)])
            if len(pending) >= _EVENTS_PER_INSERT:
                conn.execute(SqlEventLogStorageTable.insert(), pending)
                stored += len(pending)
                pending = []
        if pending:
            conn.execute(SqlEventLogStorageTable.insert(), pending)
            stored += len(pending)
    for event in build(last):
        storage.store_event(event)  # the whole path: the asset index's latest materialization moves too
        stored += 1
    return stored


# -- the sink -----------------------------------------------------------------------------------------------


def write_sink(sink_root: str | Path, spec: HistorySpec) -> int:
    """A Parquet range directory per committed range under `sink_root` (hard links to a file of `records` rows);
    returns how many. The quarantine stays empty (nothing was quarantined)."""
    root = Path(sink_root)
    root.mkdir(parents=True, exist_ok=True)
    table = pa.table({"n": pa.array(range(spec.records), pa.int64())})
    layout = SinkLayout(str(root))
    made = 0
    model = root
    for p in range(spec.partitions):
        for k in range(spec.batches):
            if made % _LINKS_PER_FILE == 0:  # a file takes so many links (ext4: 65,000)
                model = root / f"_history_part_{made // _LINKS_PER_FILE}.parquet"  # '_': listings skip it
                pq.write_table(table, model)
            low = k * spec.records
            directory = Path(layout.range_dir(spec.topic, p, low, low + spec.records))
            directory.mkdir(parents=True)
            os.link(model, directory / "part-00000.parquet")
            made += 1
    return made


# -- all of it ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FastForward:
    """What `fast_forward` wrote and how long each part took (seconds)."""

    membership: Membership
    events: int
    sink_dirs: int
    ledger_s: float
    events_s: float
    sink_s: float


def fast_forward(
    group: WorkerGroup,
    coordinator: Coordinator,
    instance: dg.DagsterInstance,
    config: CohortConfig,
    spec: HistorySpec,
    *,
    sink: bool = False,
) -> FastForward:
    """The ledger and the materializations (and with `sink`, the Parquet sink under the pipeline's sink path)."""
    spec = spec.ending_now()
    started = time.perf_counter()
    member = commit_history(group, coordinator, spec)
    ledger_s = time.perf_counter() - started
    events = record_materializations(instance, config, spec, member)
    events_s = time.perf_counter() - started - ledger_s
    made = 0
    if sink:
        assert config.pipeline is not None
        made = write_sink(config.pipeline.sink_path, spec)
    return FastForward(member, events, made, ledger_s, events_s, time.perf_counter() - started - ledger_s - events_s)
