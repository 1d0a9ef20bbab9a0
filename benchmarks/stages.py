"""Where a plain batch's CPU goes, stage by stage: the reading tasks' work redone in one process, each stage timed.

A batch's reading tasks read, decode, check and write inside Spark's Python workers, where their CPU is one
figure. `stage_cpu` runs the same work in this process over the same records, one stage at a time, with the
batch's own functions (cohort.pipelines.tasks.reader.read_range, the spec's RecordChecker, ArrowStagedWriter,
cohort.pipelines.sink.digest), and returns each stage's CPU seconds (of this process, librdkafka's threads included):

- `read`: the raw Arrow batches as the tasks read them (cohort.pipelines.tasks.reader: the consumer in C where it was
  built); `read_python` is the same read through confluent-kafka's Python consumer, the peer (not in the sum);
- `decode`: the value decoder over every batch (for a flat JSON schema the C fast path,
  cohort.pipelines.formats.flat_json); `decode_msgspec` is the same decoding with msgspec alone, the peer (not in
  the sum);
- `check`: the model's checks and assembling the checked batch (RecordChecker.check less its decode);
- `write`: both outputs' Parquet files (ArrowStagedWriter.write_span);
- `digest`: the replay digest of every range (reading the staged files back and hashing them).

What the batch spends beyond their sum is Spark's: scheduling, the Python workers, moving each span's stats.
"""

from __future__ import annotations

import gc
import inspect
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow.fs as pafs

from cohort.pipelines.replay.check import read_dirs
from cohort.pipelines.sink.digest import digest
from cohort.pipelines.sink.layout import SinkLayout
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.reader import OffsetSpan, open_consumer, read_range
from cohort.pipelines.tasks.writer import ArrowStagedWriter

STAGES = ("read", "decode", "check", "write", "digest")
PEERS = ("read_python", "decode_msgspec")
"""Figures printed beside the stages, not part of their sum."""


def stage_cpu(spec: PipelineSpec, kafka_config: Mapping[str, Any], spans: Sequence[OffsetSpan]) -> dict[str, float]:
    """CPU seconds of each of STAGES (and PEERS) over `spans`, run one after the other in this process, with Python's
    cyclic garbage collector paused as the reading tasks pause it (cohort.pipelines.tasks.reader)."""
    gc.collect()
    gc.disable()
    try:
        return _stage_cpu(spec, kafka_config, spans)
    finally:
        gc.enable()


def _stage_cpu(spec: PipelineSpec, kafka_config: Mapping[str, Any], spans: Sequence[OffsetSpan]) -> dict[str, float]:
    config = {**kafka_config, **spec.consumer_config}
    checker = spec.checker
    cpu: dict[str, float] = {}

    started = time.process_time()
    raw = {span: list(read_range(config, span, batch_size=spec.consume_batch_size)) for span in spans}
    cpu["read"] = time.process_time() - started

    started = time.process_time()
    for span in spans:
        consumer = open_consumer(config, span, native=False)
        for _batch in read_range(config, span, batch_size=spec.consume_batch_size, consumer=consumer):
            pass
    cpu["read_python"] = time.process_time() - started

    started = time.process_time()
    for batches in raw.values():
        for batch in batches:
            checker.decoder.decode(batch.column("value"))
    cpu["decode"] = time.process_time() - started

    if "fast" in inspect.signature(checker.decoder.decode).parameters:  # JSON: its C fast path has a peer
        started = time.process_time()
        for batches in raw.values():
            for batch in batches:
                checker.decoder.decode(batch.column("value"), fast=False)
        cpu["decode_msgspec"] = time.process_time() - started

    started = time.process_time()
    checked = {span: [checker.check(batch) for batch in batches] for span, batches in raw.items()}
    cpu["check"] = max(0.0, time.process_time() - started - cpu["decode"])

    with tempfile.TemporaryDirectory(prefix="cohort-stages-") as root:
        sink, quarantine = SinkLayout(f"{root}/sink"), SinkLayout(f"{root}/sink/_quarantine")
        writer = ArrowStagedWriter(sink, quarantine, "stages", spec.compression, checker)
        started = time.process_time()
        for span, batches in checked.items():
            writer.write_span(span, iter(batches))
        cpu["write"] = time.process_time() - started

        started = time.process_time()
        local = pafs.LocalFileSystem()
        for span in spans:
            staged = [
                read_dirs(local, [layout.staged_range_dir("stages", span.topic, span.partition)])
                for layout in (sink, quarantine)
            ]
            digest(staged[0], staged[1], span.from_offset, span.until_offset)
        cpu["digest"] = time.process_time() - started
    return cpu


def reference_cpu() -> float:
    """CPU seconds of a fixed pure-Python loop (10M additions, best of 3): how fast this machine runs Python today,
    to compare figures taken on different days of a shared machine."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        total = 0
        for i in range(10_000_000):
            total += i
        best = min(best, time.process_time() - started)
    return best
