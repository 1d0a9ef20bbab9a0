"""benchmarks/peers.py: its same-rows check refuses outputs that differ by one value, one row or one offset, and its
smoke run (a few thousand records, one round, run as a person runs it: a subprocess) lands the same rows in every
case and prints every headline figure.

The smoke run is marked `slow` (Kafka, a registry and Spark with its Kafka source): `make test-all` runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.peer_cases import Landing
from benchmarks.peer_rows import fingerprints

ROOT = Path(__file__).resolve().parents[2]
HEADLINES = {
    "same_rows",
    "rate_vs_spark_json",
    "cpu_vs_spark_json",
    "rate_vs_spark_avro",
    "cpu_vs_spark_avro",
    "transform_rate_vs_spark",
    "increment_latency_vs_available_now",
}


def _spark_output(root: Path, rows: list[tuple[int, int, str]]) -> Landing:
    """A peer's output: flat partition, offset and value columns in one Parquet file."""
    root.mkdir(parents=True)
    partition, offset, user = (list(column) for column in zip(*rows, strict=True))
    table = pa.table({"partition": pa.array(partition, pa.int32()), "offset": offset, "user": user})
    pq.write_table(table, root / "part-0.parquet")
    return Landing("spark-batch", 1.0, 1.0, 0.0, str(root), {})


def _cohort_output(root: Path, rows: list[tuple[int, int, str]]) -> Landing:
    """Cohort's sink layout: the offsets in the `kafka` struct, one range directory per partition."""
    for p in sorted({row[0] for row in rows}):
        mine = [row for row in rows if row[0] == p]
        folder = root / "topic=t" / f"partition={p}" / f"t-{p}-0-{len(mine)}.parquet"
        folder.mkdir(parents=True)
        kafka = pa.array(
            [{"partition": p, "offset": o} for _, o, _ in mine],
            pa.struct([("partition", pa.int32()), ("offset", pa.int64())]),
        )
        pq.write_table(pa.table({"user": [u for _, _, u in mine], "kafka": kafka}), folder / "a.parquet")
    return Landing("cohort", 1.0, 1.0, 0.0, str(root), {})


ROWS = [(0, 0, "a"), (0, 1, "b"), (1, 0, "c")]


@pytest.mark.parametrize(
    "changed",
    [
        [(0, 0, "a"), (0, 1, "B"), (1, 0, "c")],  # a value
        [(0, 0, "a"), (1, 0, "c")],  # a row missing
        [(0, 0, "a"), (0, 2, "b"), (1, 0, "c")],  # an offset
        [(0, 0, "a"), (0, 1, "b"), (1, 0, "c"), (1, 0, "c")],  # a row twice
    ],
)
def test_fingerprints_agree_across_layouts_and_catch_one_difference(
    tmp_path: Path, changed: list[tuple[int, int, str]]
) -> None:
    landed = {
        "spark-batch": _spark_output(tmp_path / "spark", ROWS),
        "cohort": _cohort_output(tmp_path / "cohort", ROWS),
        "other": _cohort_output(tmp_path / "other", changed),
    }
    landed["other"] = Landing("cohort-other", 1.0, 1.0, 0.0, landed["other"].root, {})
    found = fingerprints(landed, {name: ["user"] for name in landed})
    assert found["spark-batch"] == found["cohort"]
    assert found["spark-batch"][:2] == (3, 3)
    assert found["other"] != found["spark-batch"]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_smoke_run_lands_the_same_rows_everywhere_and_prints_the_headlines() -> None:
    command = [sys.executable, "-m", "benchmarks.peers", "--records", "4000", "--repeats", "1", "--skip-cold"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1100)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert set(report) >= HEADLINES, report
    assert report["same_rows"] is True
    assert (report["json_records"], report["avro_records"]) == (4000, 2000)
    assert all(report[key] > 0 for key in HEADLINES - {"same_rows"}), report
    for fmt in ("json", "avro"):
        assert set(report["stages"][fmt]) == {"spark", "cohort"}, report
        assert set(report["stages"][fmt]["spark"]) == {"read", "decode", "write"}, report
