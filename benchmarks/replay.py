"""Replay throughput: landing N records, then replaying all of them after an offset reset, in one run.

On the embedded broker: produce N JSON records over 8 partitions (batched, as benchmarks/pipeline.py does),
start Spark and run one warm-up batch (a throwaway group), then, `--repeats` times with a fresh group and
sink: land every record (`run_batch`), reset the group to the earliest offsets through the ledger
(`Coordinator.reset_offsets`) and replay them (`run_batch` again). The replay does what the first landing
does, plus what a replay adds: digesting the output it replaces and comparing (the replay guard), building
each partition's next state (hard links; no cut range here, the replay covers whole ranges) and swapping it
in. Each replay is checked: every offset once in the sink and the quarantine, the guard's verdict
"unchanged".

Usage:
    python -m benchmarks.replay                 # 1M records, 3 repeats
    python -m benchmarks.replay --records 200000 --repeats 1

Prints the medians (rates, seconds, CPU seconds of the driver and the JVM with its Python workers) and the
ratio replay rate / first landing rate; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import pyarrow.dataset as ds

from benchmarks.pipeline import SCHEMA, TOPIC, Event, _tree_cpu_s, events
from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.devtools.embedded_broker import EmbeddedBroker
from cohort.devtools.topics import create_topic, produce
from cohort.pipelines import PipelineSpec, build_session, run_batch
from cohort.pipelines.batch.results import BatchResult


def _offsets_once(root: str, expected: int) -> None:
    """Every offset exactly once under a sink root (sink or quarantine), or stop."""
    table = ds.dataset(root, format="parquet", partitioning="hive").to_table(columns=["kafka"])
    coordinates = {(k["partition"], k["offset"]) for k in table.column("kafka").to_pylist()}
    if len(coordinates) != table.num_rows or table.num_rows != expected:
        raise SystemExit(f"{root}: {table.num_rows} rows, {len(coordinates)} distinct, expected {expected}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    count = args.records

    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="cohort-replay-") as tmp:
        config = {"bootstrap.servers": broker.bootstrap_servers}
        create_topic(config, TOPIC, args.partitions)
        produce(config, TOPIC, events(count, args.partitions))
        spark = build_session(app_name="cohort-replay-bench")
        spark.sparkContext.setLogLevel("ERROR")
        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        coordinator = Coordinator.from_url(f"sqlite:///{tmp}/cohort.db")
        partitions = [TopicPartition(TOPIC, p) for p in range(args.partitions)]

        def timed(name: str, spec: PipelineSpec, group: str) -> tuple[float, float, BatchResult]:
            cpu = _tree_cpu_s(jvm_pid) + time.process_time()
            started = time.perf_counter()
            result = run_batch(spark, spec, config, partitions, coordinator.standalone_ledger(group), run_id=name)
            return time.perf_counter() - started, _tree_cpu_s(jvm_pid) + time.process_time() - cpu, result

        timed("warm-up", PipelineSpec(sink_path=f"{tmp}/warm-up", value_schema=SCHEMA, model=Event), "warm-up")
        firsts, replays = [], []
        for repeat in range(args.repeats):
            group, sink = f"bench-replay-{repeat}", f"{tmp}/lake-{repeat}"
            spec = PipelineSpec(sink_path=sink, value_schema=SCHEMA, model=Event)
            firsts.append(timed(f"land-{repeat}", spec, group))
            coordinator.reset_offsets(
                group, dict.fromkeys(partitions, 0), actor="benchmark", reason="replay everything"
            )
            replays.append(timed(f"replay-{repeat}", spec, group))
            result = replays[-1][2]
            if result.records + result.quarantined != count:
                raise SystemExit(f"the replay read {result.records + result.quarantined} records, not {count}")
            if any(p.replay_changed is not False for p in result.partitions):
                raise SystemExit("the replay guard did not find every partition's output unchanged")
            _offsets_once(sink, result.records)
            _offsets_once(spec.quarantine_root, result.quarantined)
        spark.stop()
        coordinator.close()

    first_s = statistics.median(s for s, _cpu, _r in firsts)
    replay_s = statistics.median(s for s, _cpu, _r in replays)
    first_cpu = statistics.median(c for _s, c, _r in firsts)
    replay_cpu = statistics.median(c for _s, c, _r in replays)
    ratios = [f[0] / r[0] for f, r in zip(firsts, replays, strict=True)]
    print(f"records                   {count:>12,} over {args.partitions} partitions, {args.repeats} repeats")
    print(f"first landing (median)    {count / first_s:>12,.0f} records/s  ({first_s:.2f} s, {first_cpu:.1f} CPU s)")
    print(f"replay (median)           {count / replay_s:>12,.0f} records/s  ({replay_s:.2f} s, {replay_cpu:.1f} CPU s)")
    stages = replays[len(replays) // 2][2].stage_seconds
    for stage, seconds in stages.items():
        print(f"  {stage:<23} {seconds:>8.2f} s")
    print(
        f"ratio replay/first        {statistics.median(ratios):>12.2f}  (each repeat: {[round(r, 2) for r in ratios]})"
    )
    print(f"load average (1 min)      {os.getloadavg()[0]:>12.2f} ({os.cpu_count()} cores)")
    summary = {
        "records": count,
        "first_rate": round(count / first_s),
        "replay_rate": round(count / replay_s),
        "ratio": round(statistics.median(ratios), 3),
        "first_cpu_s": round(first_cpu, 1),
        "replay_cpu_s": round(replay_cpu, 1),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
