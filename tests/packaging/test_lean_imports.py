"""A Spark reading task loads only what it needs: confluent-kafka, pyarrow, msgspec, pyspark and the data path's
executor modules, never the coordinator, its SQL store, Dagster or pandera.

Each check runs in a fresh interpreter (cwd: a temporary directory) that records, for every module it
imports, the module that imported it, so a failure names the whole import chain.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from textwrap import dedent

from cohort.pipelines.tasks import EXECUTOR_MODULES
from tests.packaging.support import DEV_PYTHON, clean_env, run

ALLOWED_COHORT = frozenset(
    {
        "cohort",
        "cohort.common",
        "cohort.common.lazy",
        "cohort.common.ledger",
        "cohort.common.names",
        "cohort.common.types",
        "cohort.common.validation",
        "cohort.pipelines",
        *EXECUTOR_MODULES,
        *(m.rpartition(".")[0] for m in EXECUTOR_MODULES),  # their packages (rooms: tasks, formats, sink)
    }
)
"""The Cohort modules a reading task may load."""

ALLOWED_THIRD_PARTY = frozenset(
    {"confluent_kafka", "msgspec", "typing_extensions", "pyarrow", "numpy", "cython_runtime", "pyspark", "py4j"}
)
"""Top-level third-party modules a reading task may load (msgspec brings typing_extensions, pyarrow numpy and
Cython's `cython_runtime`, pyspark py4j)."""

PYARROW_WARM_UP = "import pyarrow\npyarrow.array([1])\n"
"""Run before the probe of a running task: pyarrow's first conversion of Python objects (`pa.array(list)`, which
the reader runs for every batch) imports pandas when it is installed, whoever calls it; a PySpark worker has
done that before it runs a task, so it is no import of Cohort's."""

FORBIDDEN = ("sqlalchemy", "dagster", "pandera", "pandas", "psycopg", "cohort.assignment", "cohort.assets")
"""Named for the failure message: what must never reach an executor through Cohort."""

TRACER = dedent(
    """
    import json, sys

    IMPORTED_BY = {}


    class _Tracer:
        # Records, for each module imported, the modules on the stack at its first import; finds nothing itself.
        @staticmethod
        def find_spec(fullname, path=None, target=None):
            if fullname not in IMPORTED_BY:
                stack, frame = [], sys._getframe(1)
                while frame is not None:
                    name = frame.f_globals.get("__name__", "?")
                    if not name.startswith(("importlib", "_frozen")) and (not stack or stack[-1] != name):
                        stack.append(name)
                    frame = frame.f_back
                IMPORTED_BY[fullname] = stack
            return None


    BEFORE = set(sys.modules)
    sys.meta_path.insert(0, _Tracer)


    def report():
        new = sorted(set(sys.modules) - BEFORE)
        chains = {name: " <- ".join([name, *IMPORTED_BY.get(name, [])]) for name in new}
        print(json.dumps({"new": new, "chains": chains}))
    """
)
"""Prepended to each probe: `report()` prints the modules loaded since start and who imported each."""


@dataclass(frozen=True)
class Report:
    """The modules a probe loaded (beyond its start) and, for each, its import chain."""

    new: list[str]
    chains: dict[str, str]


def _probe(code: str, cwd: Path, *, prelude: str = "") -> Report:
    """Run `prelude`, TRACER, `code` and report() in a fresh development interpreter; the report (modules
    the prelude loads are not counted)."""
    source = prelude + TRACER + dedent(code) + "\nreport()\n"
    done = run([DEV_PYTHON, "-c", source], cwd=cwd, env=clean_env(), timeout=120)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return Report(new=found["new"], chains=found["chains"])


def _offenders(report: Report, allowed_cohort: frozenset[str], allowed_third_party: frozenset[str]) -> str:
    """A readable list of the modules loaded outside what is allowed, each with its import chain ('' if none)."""
    new, chains = report.new, report.chains
    bad = []
    for name in new:
        top = name.split(".", 1)[0]
        if top == "cohort":
            if name not in allowed_cohort:
                bad.append(name)
        elif top not in sys.stdlib_module_names and not top.startswith("_") and top not in allowed_third_party:
            bad.append(name)
    # Only the first module of each package that got in: its chain says why; the rest follows.
    firsts = [n for n in bad if not any(n.startswith(f"{other}.") for other in bad if other != n)]
    forbidden = sorted(n for n in new if n.startswith(FORBIDDEN))
    lines = [chains.get(n, n) for n in firsts]
    if forbidden:
        lines.append(f"(forbidden modules loaded: {forbidden[:20]}{' ...' if len(forbidden) > 20 else ''})")
    return "\n".join(lines)


def test_the_executor_modules_import_nothing_heavy(tmp_path: Path) -> None:
    report = _probe("\n".join(f"import {m}" for m in EXECUTOR_MODULES), tmp_path)
    offenders = _offenders(report, ALLOWED_COHORT, ALLOWED_THIRD_PARTY)
    assert not offenders, f"importing the reading task's modules loads more than it needs:\n{offenders}"


def test_the_worker_daemon_preloads_reading_modules_only(tmp_path: Path) -> None:
    """Spark's Python worker daemon (cohort.pipelines.tasks.python_daemon) imports, before it forks the workers, what a
    reading task imports and nothing heavier; each module it names exists."""
    code = "import importlib\nfrom cohort.pipelines.tasks import python_daemon\n"
    code += "for name in python_daemon.PRELOADED:\n    importlib.import_module(name)\n"
    report = _probe(code, tmp_path)
    offenders = _offenders(report, ALLOWED_COHORT, ALLOWED_THIRD_PARTY)
    assert not offenders, f"the worker daemon preloads more than a reading task needs:\n{offenders}"
    from cohort.pipelines.tasks.python_daemon import PRELOADED

    assert {m for m in PRELOADED if m.startswith("cohort.")} <= set(EXECUTOR_MODULES)


DRIVER = """
import sys
from pathlib import Path

import pandera.pyspark as pa
import pyspark.sql.types as T
from pyspark.serializers import CloudPickleSerializer

from cohort.pipelines.tasks.writer import ArrowStagedWriter
from cohort.pipelines.batch.frames import checked_frame
from cohort.pipelines.tasks.reader import OffsetSpan
from cohort.pipelines.sink.layout import SinkLayout
from cohort.pipelines.spec import PipelineSpec

sink, out = sys.argv[1], sys.argv[2]


class Order(pa.DataFrameModel):
    id: T.LongType() = pa.Field(gt=0)
    amount: T.DoubleType() = pa.Field(nullable=True)


spec = PipelineSpec(
    sink_path=sink,
    value_format="json",
    value_schema=T.StructType([T.StructField("id", T.LongType(), False), T.StructField("amount", T.DoubleType())]),
    model=Order,
)
captured = []


class Plan:  # what spark.range returns: only mapInArrow is called on it
    def mapInArrow(self, function, schema):
        captured.append(function)


class Context:
    defaultParallelism = 2


class Spark:
    sparkContext = Context()

    def range(self, *args, **kwargs):
        return Plan()


kafka = {"bootstrap.servers": "127.0.0.1:9"}
spans = [OffsetSpan("orders", 0, 5, 5)]  # empty: the read imports the Kafka client, then ends at once
layouts = SinkLayout(sink), SinkLayout(spec.quarantine_root)
writer = ArrowStagedWriter(*layouts, "attempt1", spec.compression, spec.checker)
checked_frame(Spark(), spec, kafka, spans, None)  # Spark writes: the tasks decode and check
checked_frame(Spark(), spec, kafka, spans, None, writer=writer)  # the tasks decode, check and write Parquet
Path(out).write_bytes(CloudPickleSerializer().dumps(captured))
"""

EXECUTOR = """
import pickle
from pathlib import Path

check_task, write_task = pickle.loads(Path(PICKLED).read_bytes())
import pyarrow as pa

ids = pa.record_batch({"id": pa.array([0], pa.int64())})  # spark.range's rows: the span index
assert list(check_task(iter([ids]))) == []
assert [b.num_rows for b in write_task(iter([ids]))] == [1]  # the empty span's report: nothing written


def process_of(task):
    # the span processor the task closes over, through the reader's nested functions
    functions = [task]
    while functions:
        function = functions.pop()
        cells = dict(zip(function.__code__.co_freevars, (c.cell_contents for c in function.__closure__ or ())))
        if "process" in cells:
            return cells["process"]
        functions += [v for v in cells.values() if hasattr(v, "__code__")]
    raise LookupError("no span processor in the task's closures")


reader = sys.modules["cohort.pipelines.tasks.reader"]
span = reader.OffsetSpan("orders", 0, 0, 3)
values = [b'{"id": 1, "amount": 2.5}', b'{"id": -1}', b"not json"]
raw = pa.RecordBatch.from_pylist(
    [
        {"topic": "orders", "partition": 0, "offset": i, "timestamp": 1, "key": None, "value": v,
         "headers": None, "error": None}
        for i, v in enumerate(values)
    ],
    schema=reader.RECORD_SCHEMA,
)
checked = pa.Table.from_batches(list(process_of(check_task)(span, iter([raw]))))
assert checked.num_rows == 3, checked
reports = list(process_of(write_task)(span, iter([raw])))  # one row: what the task wrote for the span
assert len(reports) == 1 and reports[0].num_rows == 1, reports
written = sorted(p.name for p in Path(SINK).rglob("*.parquet"))
assert len(written) == 2, written  # the valid row to the sink's staging, the two failures to quarantine
"""


def test_the_pickled_reading_tasks_load_nothing_heavy(tmp_path: Path) -> None:
    """The mapInArrow functions exactly as Spark ships them (cloudpickle, a pandera model in the spec),
    unpickled and run in a fresh interpreter: reading a span, decoding, checking and writing Parquet."""
    sink, pickled = tmp_path / "lake", tmp_path / "tasks.pickle"
    run([DEV_PYTHON, "-c", DRIVER, sink, pickled], cwd=tmp_path, env=clean_env(), timeout=120)
    code = f"PICKLED, SINK = {str(pickled)!r}, {str(sink)!r}\n" + EXECUTOR
    report = _probe(code, tmp_path, prelude=PYARROW_WARM_UP)
    offenders = _offenders(report, ALLOWED_COHORT, ALLOWED_THIRD_PARTY)
    assert not offenders, f"a reading task loads more than it needs:\n{offenders}"
    loaded = {n for n in report.new if n.startswith("cohort.")}
    assert {
        "cohort.pipelines.tasks.reader",
        "cohort.pipelines.tasks.checked",
        "cohort.pipelines.tasks.writer",
    } <= loaded, loaded


def test_the_layer_packages_load_neither_sqlalchemy_nor_spark_sql(tmp_path: Path) -> None:
    for package in ("cohort.assignment", "cohort.pipelines", "cohort.common"):
        report = _probe(f"import {package}", tmp_path)
        heavy = [
            n for n in report.new if n == "sqlalchemy" or n == "pyspark.sql" or n in ("dagster", "pandera", "pandas")
        ]
        assert not heavy, f"`import {package}` loads {heavy}:\n" + "\n".join(report.chains[n] for n in heavy)
