"""The `--broker` option of the pipeline and freshness benchmarks (benchmarks/brokers.py): both parsers take it (both
brokers by default, `--quick` unchanged), a run alternates the brokers, and the reports print each broker's figures
and Kafka's over Tansu's, the summary keeping its keys for the first broker. On made-up figures, without a broker or
a JVM; the end-to-end run at a tiny scale is marked `slow`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import freshness, pipeline
from benchmarks.brokers import BROKERS, broker_names, in_turn, ratio, round_order, start_brokers, summary

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", [pipeline, freshness], ids=["pipeline", "freshness"])
def test_both_benchmarks_take_the_broker_option_and_measure_both_by_default(module: Any) -> None:
    assert module.parser().parse_args([]).broker == "both"
    quick = module.parser().parse_args(["--quick"])
    assert (quick.quick, quick.broker) == (True, "both")
    for choice in ("embedded", "kafka", "both"):
        assert module.parser().parse_args(["--quick", "--broker", choice]).broker == choice
    with pytest.raises(SystemExit), contextlib.redirect_stderr(None):
        module.parser().parse_args(["--broker", "tansu"])


def test_broker_names_and_unknown_brokers() -> None:
    assert broker_names("both") == BROKERS == ("embedded", "kafka")
    assert broker_names("kafka") == ("kafka",)
    with pytest.raises(ValueError, match="--broker"):
        broker_names("redpanda")
    with contextlib.ExitStack() as stack, pytest.raises(ValueError, match="unknown broker"):
        start_brokers(["redpanda"], stack)  # refused before anything starts


def test_the_brokers_take_turns_first_so_neither_always_follows_the_other() -> None:
    assert [in_turn(BROKERS, step) for step in range(3)] == [
        ["embedded", "kafka"],
        ["kafka", "embedded"],
        ["embedded", "kafka"],
    ]
    assert in_turn(["kafka"], 1) == ["kafka"]
    modes = ("cold", "warm")
    assert freshness.cases_of(modes, BROKERS) == round_order(modes, BROKERS, 0)
    sequence = [case for turn in range(4) for case in round_order(modes, BROKERS, turn)]
    assert sequence[:8] == [
        ("cold", "embedded"),
        ("cold", "kafka"),
        ("warm", "embedded"),
        ("warm", "kafka"),
        ("warm", "kafka"),
        ("warm", "embedded"),
        ("cold", "kafka"),
        ("cold", "embedded"),
    ]
    follows = [(a, b) for a, b in itertools.pairwise(sequence) if a[0] == b[0] and a[1] != b[1]]
    for mode in modes:  # each broker's run of a mode follows the other's as often as it leads it
        assert follows.count(((mode, "embedded"), (mode, "kafka"))) == follows.count(
            ((mode, "kafka"), (mode, "embedded"))
        )
    # one broker: the modes rotate every round, as before the option
    assert [round_order(("cold", "warm", "kept"), ("embedded",), t)[0][0] for t in range(3)] == ["cold", "warm", "kept"]


def test_summary_keeps_the_first_brokers_keys_and_adds_each_broker_and_the_ratios() -> None:
    per_broker = {"embedded": {"pipeline_rate": 100_000, "cpu_s_per_1m": 8.0}, "kafka": {"pipeline_rate": 80_000}}
    found = summary({"records": 1000}, per_broker, ["pipeline_rate", "cpu_s_per_1m"])
    assert found["records"] == 1000 and found["pipeline_rate"] == 100_000 and found["broker"] == "embedded"
    assert found["brokers"] == per_broker
    assert found["kafka_over_embedded"] == {"pipeline_rate": 0.8, "cpu_s_per_1m": None}  # Kafka's is missing
    alone = summary({}, {"kafka": {"pipeline_rate": 80_000}}, ["pipeline_rate"])
    assert alone["broker"] == "kafka" and alone["pipeline_rate"] == 80_000 and "kafka_over_embedded" not in alone
    assert ratio(3.0, 0.0) is None and ratio(1.0, 3.0, 2) == 0.33


def _pipeline_run(name: str, seconds: float, cpu: float) -> pipeline.BrokerRun:
    stages = {"read_and_write": seconds / 2, "commit": 0.05}
    spans = [("bench-events", p, 0, 25_000) for p in range(8)]
    run = pipeline.BrokerRun(name, {"bootstrap.servers": "127.0.0.1:1"}, None, produce_s=1.0)
    run.raw = {"default": (0.5, 0.4), "tuned": (0.4, 0.4)}
    run.startup_s = 9.0
    run.batches = [
        pipeline.Batch(seconds, stages, 1.5, cpu, 0.3, spans),
        pipeline.Batch(seconds / 2, stages, 1.2, cpu / 2, 0.2, spans),
    ]
    run.by_stage = {"read": 0.1, "decode": 0.07, "check": 0.03, "write": 0.07, "digest": 0.06}
    run.by_stage |= {"read_python": 0.25, "decode_msgspec": 0.2}
    return run


def test_the_pipeline_report_prints_each_broker_and_kafka_over_tansu(capsys: pytest.CaptureFixture[str]) -> None:
    runs = {"embedded": _pipeline_run("embedded", 2.0, 2.0), "kafka": _pipeline_run("kafka", 2.5, 3.0)}
    per_broker = {name: pipeline.report(run, 200_000, 8) for name, run in runs.items()}
    pipeline.print_ratios(per_broker)
    out = capsys.readouterr().out
    assert "== broker: embedded" in out and "== broker: kafka" in out and "== Kafka / Tansu" in out
    assert per_broker["embedded"]["pipeline_rate"] == 100_000 and per_broker["kafka"]["pipeline_rate"] == 80_000
    found = json.loads(json.dumps(summary({"records": 200_000}, per_broker, pipeline.RATIO_KEYS)))
    assert found["kafka_over_embedded"]["pipeline_rate"] == 0.8
    assert found["kafka_over_embedded"]["cpu_s_per_1m"] == 1.5
    today = {"raw_rate", "tuned_raw_rate", "pipeline_rate", "ratio", "ratio_vs_tuned", "cpu_s_per_1m"}
    assert today | {"spark_startup_s", "warm_cpu_s_per_1m", "stage_cpu_s_per_1m"} <= set(found["brokers"]["kafka"])
    assert {key: found[key] for key in today} == {key: per_broker["embedded"][key] for key in today}


def _freshness_run(mode: str, broker: str, launch_s: float) -> freshness.Run:
    report = {
        "stage_seconds": {"read": 0.5, "mirror": 0.1},
        "task_seconds": [0.3, 0.4],
        "batch": [0.0, 10.0 + launch_s],
    }
    return freshness.Run(
        mode=mode,
        broker=broker,
        label="run0",
        spawn=10.0,
        exited=11.0 + launch_s,
        committed_at=10.0 + launch_s,
        report=report,
        produce_to_commit=[launch_s + 0.1],
        readable=True,
        cpu_s=5.0,
        server_cpu_s=1.0,
        load=2.0,
        split={part: launch_s / len(freshness.SPLIT) for part in freshness.SPLIT},
    )


def test_the_freshness_table_has_a_column_per_mode_and_broker_and_their_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    launch = {("cold", "embedded"): 20.0, ("cold", "kafka"): 22.0, ("warm", "embedded"): 8.0, ("warm", "kafka"): 6.0}
    measured = [_freshness_run(mode, broker, s + extra) for (mode, broker), s in launch.items() for extra in (0, 1)]
    per_broker = freshness.print_results(measured, ("cold", "warm"), BROKERS, 2)
    out = capsys.readouterr().out
    assert "cold embedded" in out and "warm kafka" in out
    assert "Kafka / Tansu, median launch -> commit: cold 1.10, warm 0.77" in out
    assert per_broker["embedded"]["warm_launch_to_commit_s"] == 8.5 and per_broker["kafka"]["target_met"] is False
    found = summary({"runs": 2}, per_broker, ["cold_launch_to_commit_s", "warm_launch_to_commit_s"])
    assert found["warm_launch_to_commit_s"] == 8.5 and found["broker"] == "embedded"
    assert found["kafka_over_embedded"] == {"cold_launch_to_commit_s": 1.098, "warm_launch_to_commit_s": 0.765}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_tiny_pipeline_run_measures_both_brokers_in_one_process() -> None:
    """Both brokers started, each with its own Spark JVM, and one JSON line with both and their ratios."""
    command = [sys.executable, "-m", "benchmarks.pipeline", "--records", "4000", "--partitions", "2"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=850)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["broker"] == "embedded" and set(found["brokers"]) == {"embedded", "kafka"}
    assert found["pipeline_rate"] == found["brokers"]["embedded"]["pipeline_rate"] > 0
    assert found["brokers"]["kafka"]["pipeline_rate"] > 0
    assert all(value is not None and value > 0 for value in found["kafka_over_embedded"].values()), found
