"""`CohortGroupComponent`: a group declared in a dg project's YAML builds what the Python factory builds.

In process (a dg defs-folder sandbox): the definitions of a YAML group equal those `build_cohort_definitions`
builds for the same group; two groups load side by side, sharing the Kafka and Spark resources (declared in both
YAML files, or by the project); every refused setting names the file, the line and the attribute; the
scaffolded defs.yaml loads as written. Through dg itself (subprocesses in a project environment): `dg list
components` lists the component; `dg check defs` refuses bad YAML with that one line, the only line of its report
(no component tree, no stack), and prints for the user guide's defs.yaml what the guide shows; each attribute of
the defs.yaml `dg scaffold defs` writes is documented with its own description.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pydantic
import pytest
import yaml
from dagster.components.testing import create_defs_folder_sandbox

from cohort.assets import CohortConfig, CohortGroupComponent, build_cohort_definitions
from cohort.assets.component.scaffold import scaffolded_yaml
from cohort.assets.component.settings import COMPONENT_SETTINGS
from cohort.pipelines.ddl import parse_ddl_schema
from cohort.pipelines.spec import PipelineSpec
from cohort.resources import CohortGroupResource, KafkaResource, SparkResource
from tests.support.dg_projects import activated, describe, install_cohort
from tests.support.doc_blocks import replace_all, titled_blocks

TYPE = "cohort.assets.component.CohortGroupComponent"
DG_DEFS_YAML = "src/orders_dg/defs/orders_ingest/defs.yaml"
SCHEMA = "order_id BIGINT NOT NULL, customer STRING, amount DOUBLE, created_at TIMESTAMP"
MODELS = """
import pandera.pyspark as pa
import pyspark.sql.types as T


class Order(pa.DataFrameModel):
    order_id: T.LongType() = pa.Field(gt=0)
    amount: T.DoubleType() = pa.Field(ge=0, nullable=True)


def keep(frame):
    return frame
"""


def _group(name: str, topic: str, project: str, **extra: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "group": name,
        "topics": [topic],
        "worker_slots": 2,
        "store_url": "{{ env.COHORT_STORE_URL }}",
        "schedule": "*/10 * * * *",
        "lag_threshold": 5,
        "host_slots": [1, 2],
        "assignors": ["sticky", "range"],
        "session_timeout_s": 45,
        "pipeline": {
            "sink_path": f"/lake/{topic}",
            "value_format": "json",
            "value_schema": SCHEMA,
            "model": f"{project}.models:Order",
            "transform": f"{project}.models:keep",
            "quarantine_limit": 0.25,
        },
        "kafka": {"bootstrap_servers": "{{ env.COHORT_BOOTSTRAP_SERVERS }}", "sasl_password": "{{ env.KAFKA_PW }}"},
        "spark": {"master": "local[2]"},
    }
    attributes.update(extra)
    return {"type": TYPE, "attributes": attributes}


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """A dg defs folder with a `models` module beside it, and the environment its YAML reads."""
    monkeypatch.setenv("COHORT_STORE_URL", f"sqlite:///{tmp_path / 'cohort.db'}")
    monkeypatch.setenv("COHORT_BOOTSTRAP_SERVERS", "localhost:19092")
    with create_defs_folder_sandbox() as box:
        (box.defs_folder_path.parent / "models.py").write_text(MODELS, encoding="utf-8")
        yield box


def _write(box: Any, name: str, document: dict[str, Any] | str) -> Path:
    folder = box.defs_folder_path / name
    folder.mkdir(parents=True, exist_ok=True)
    text = document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False)
    (folder / "defs.yaml").write_text(text, encoding="utf-8")
    return folder


def _python_built(box: Any, name: str, topic: str) -> dg.Definitions:
    """The same group as Python code writes it (docs/user-guide.md), sensors named per group."""
    models = importlib.import_module(f"{box.project_name}.models")
    group = CohortGroupResource(
        group=name,
        topics=[topic],
        worker_slots=2,
        store_url=dg.EnvVar("COHORT_STORE_URL"),
        assignors=["sticky", "range"],
        session_timeout_s=45,
    )
    pipeline = PipelineSpec(
        sink_path=f"/lake/{topic}",
        value_format="json",
        value_schema=parse_ddl_schema(SCHEMA),
        model=models.Order,
        transform=models.keep,
        quarantine_limit=0.25,
    )
    return build_cohort_definitions(
        [CohortConfig(group, pipeline=pipeline, schedule="*/10 * * * *", lag_threshold=5, host_slots=(1, 2))],
        kafka=KafkaResource(bootstrap_servers="localhost:19092", sasl_password=dg.EnvVar("KAFKA_PW")),
        spark=SparkResource(master="local[2]"),
        sensors_per_group=True,
    )


def test_a_yaml_group_defines_what_the_python_factory_defines(sandbox: Any) -> None:
    _write(sandbox, "orders_ingest", _group("orders-ingest", "orders", sandbox.project_name))
    with sandbox.build_all_defs() as from_yaml:
        built = describe(from_yaml)
        python = describe(_python_built(sandbox, "orders-ingest", "orders"))
    assert built == python
    assert sorted(built["sensors"]) == [
        "cohort_membership_sensor__orders_ingest",
        "cohort_topic_sensor__orders_ingest",
    ]
    assert set(built["assets"]) == {"cohort/orders_ingest/orders", "cohort/orders_ingest/orders_landed"}
    assert built["resources"]["kafka"]["sasl_password"] == {"env": "KAFKA_PW"}  # the secret stays a variable
    assert built["resources"]["cohort_group_orders_ingest"]["store_url"] == {"env": "COHORT_STORE_URL"}
    assert [check[1] for check in built["checks"]] == [
        "lag_under_threshold",
        "offsets_contiguous",
        "sink_matches_ledger",
    ]


def test_one_groups_own_sensors_are_the_shared_sensors_renamed() -> None:
    """For one group, `sensors_per_group` (what the component builds) changes the two sensors' names only."""

    def built(per_group: bool) -> dict[str, Any]:
        group = CohortGroupResource(group="orders-ingest", topics=["orders"], worker_slots=2)
        pipeline = PipelineSpec(sink_path="/lake/orders", value_schema=parse_ddl_schema(SCHEMA))
        return describe(
            build_cohort_definitions(
                [CohortConfig(group, pipeline=pipeline)],
                kafka=KafkaResource(bootstrap_servers="localhost:19092"),
                sensors_per_group=per_group,
            )
        )

    shared, own = built(False), built(True)
    assert {k: v for k, v in shared.items() if k != "sensors"} == {k: v for k, v in own.items() if k != "sensors"}
    assert sorted(shared["sensors"]) == ["cohort_membership_sensor", "cohort_topic_sensor"]
    for kind in ("membership", "topic"):
        assert own["sensors"][f"cohort_{kind}_sensor__orders_ingest"] == shared["sensors"][f"cohort_{kind}_sensor"]


def test_two_groups_load_side_by_side_sharing_the_yaml_resources(sandbox: Any) -> None:
    _write(sandbox, "orders_ingest", _group("orders-ingest", "orders", sandbox.project_name))
    _write(sandbox, "payments_ingest", _group("payments-ingest", "payments", sandbox.project_name, worker_slots=3))
    with sandbox.build_all_defs() as defs:
        built = describe(defs)
        kafka = (defs.resources or {})["kafka"]
    assert sorted(built["sensors"]) == [
        "cohort_membership_sensor__orders_ingest",
        "cohort_membership_sensor__payments_ingest",
        "cohort_topic_sensor__orders_ingest",
        "cohort_topic_sensor__payments_ingest",
    ]
    assert built["sensors"]["cohort_topic_sensor__payments_ingest"]["jobs"] == ["cohort_worker__payments_ingest"]
    assert {"cohort_group_orders_ingest", "cohort_group_payments_ingest", "kafka", "spark"} == set(built["resources"])
    assert isinstance(kafka, KafkaResource) and kafka.bootstrap_servers == "localhost:19092"
    assert sorted(built["jobs"]) == [
        "cohort_checks__orders_ingest",
        "cohort_checks__payments_ingest",
        "cohort_worker__orders_ingest",
        "cohort_worker__payments_ingest",
    ]


def test_groups_without_resource_blocks_use_the_projects_resources(sandbox: Any) -> None:
    for name, topic in (("orders-ingest", "orders"), ("payments-ingest", "payments")):
        document = _group(name, topic, sandbox.project_name)
        del document["attributes"]["kafka"], document["attributes"]["spark"]
        _write(sandbox, name.replace("-", "_"), document)
    (sandbox.defs_folder_path / "resources.py").write_text(
        textwrap.dedent(
            """
            import dagster as dg

            from cohort.resources import KafkaResource, SparkResource


            @dg.definitions
            def resources() -> dg.Definitions:
                return dg.Definitions(
                    resources={"kafka": KafkaResource(bootstrap_servers="kafka-1:9093"), "spark": SparkResource()}
                )
            """
        ),
        encoding="utf-8",
    )
    with sandbox.build_all_defs() as defs:
        built = describe(defs)
    assert built["resources"]["kafka"]["bootstrap_servers"] == "kafka-1:9093"
    assert len(built["sensors"]) == 4 and len(built["assets"]) == 4


REFUSED = {
    "type": ({"worker_slots": "many"}, "attributes.worker_slots: Input should be a valid integer"),
    "assignor": ({"assignors": ["cooperative-stiky"]}, "attributes.assignors: unknown assignor 'cooperative-stiky'"),
    "group name": ({"group": "orders ingest"}, "attributes.group: "),
    "store url": ({"store_url": "not a url"}, "attributes.store_url: store_url is not a SQLAlchemy URL"),
    "store url variable": ({"store_url": "{{ env.NO_SUCH_VARIABLE }}"}, "NO_SUCH_VARIABLE is not set"),
    "host slots": ({"host_slots": [3]}, "attributes.host_slots: group 'orders-ingest' has worker slots 1..2"),
    "model": ({"pipeline": {"model": "{p}.models:Ordr"}}, "attributes.pipeline.model: cannot import '{p}.models:Ordr'"),
    "transform": ({"pipeline": {"transform": "nowhere.at_all:f"}}, "transform: cannot import 'nowhere.at_all:f'"),
    "ddl": ({"pipeline": {"value_schema": "id BIG"}}, "attributes.pipeline.value_schema: not a Spark DDL schema"),
    "table format": ({"pipeline": {"table_format": "orc"}}, "attributes.pipeline.table_format: table_format must be"),
    "kafka": ({"kafka": {"bootstrap_servers": "nohost"}}, "attributes.kafka.bootstrap_servers: bootstrap_servers must"),
}


def _line_of(text: str, path: list[str]) -> int:
    """The 1-based line of the YAML key at `path` (each key searched below the previous one)."""
    lines, at = text.splitlines(), 0
    for key in path:
        at = next(i for i in range(at, len(lines)) if lines[i].strip().startswith(f"{key}:"))
    return at + 1


@pytest.mark.parametrize("change, message", REFUSED.values(), ids=REFUSED.keys())
def test_a_refused_setting_names_the_file_line_and_attribute(
    sandbox: Any, change: dict[str, Any], message: str
) -> None:
    document = _group("orders-ingest", "orders", sandbox.project_name)
    for key, value in change.items():
        if isinstance(value, dict):
            document["attributes"][key].update({k: v.format(p=sandbox.project_name) for k, v in value.items()})
        else:
            document["attributes"][key] = value
    folder = _write(sandbox, "orders_ingest", document)
    key, value = next(iter(change.items()))
    line = _line_of(
        (folder / "defs.yaml").read_text(), ["attributes", key, *(value if isinstance(value, dict) else [])]
    )
    with pytest.raises(Exception) as raised, sandbox.build_all_defs():
        pass
    cause = raised.value
    while cause.__cause__ is not None:
        cause = cause.__cause__
    text = str(cause)
    assert "\n" not in text, text
    assert text.startswith(f"{folder / 'defs.yaml'}:{line} - "), text
    assert message.format(p=sandbox.project_name) in text, text


def test_the_scaffolded_yaml_loads_and_shows_every_attribute(sandbox: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COHORT_SINK", "/lake")
    text = scaffolded_yaml(TYPE, "orders_ingest")
    shown = {line.strip().lstrip("# ").split(":")[0] for line in text.splitlines()}
    for name, info in COMPONENT_SETTINGS.model_fields.items():
        assert name in shown, name
        nested = getattr(info.annotation, "__args__", (info.annotation,))[0]
        for inner in getattr(nested, "model_fields", {}):
            assert inner in shown, f"{name}.{inner}"
    _write(sandbox, "orders_ingest", text)
    with sandbox.load_component_and_build_defs(sandbox.defs_folder_path / "orders_ingest") as (component, defs):
        assert isinstance(component, CohortGroupComponent)
        assert component.config.group == "orders_ingest" and component.config.pipeline is not None
        assert component.config.pipeline.sink_path == "/lake/orders_ingest"
        assert defs.resolve_job_def("cohort_worker__orders_ingest").name == "cohort_worker__orders_ingest"


# ------------------------------------------------------------------------------------------- through dg


@pytest.fixture(scope="module")
def dg_project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A project made by create-dagster, with Cohort installed in its .venv and a group scaffolded by `dg scaffold
    defs`, and the project's activated environment."""
    root = tmp_path_factory.mktemp("dg")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COHORT_", "DAGSTER_"))}
    env["PYTHONWARNINGS"] = "ignore"  # dg warns that its version differs from Dagster's by a patch release
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # create-dagster
    bin_dir = Path(install_cohort_into_new_project(root, env))
    project = bin_dir.parent.parent
    env = activated(bin_dir, env)
    (project / ".env").write_text(
        f"COHORT_STORE_URL=sqlite:///{project / 'cohort.db'}\nCOHORT_SINK={project / 'lake'}\n"
        "COHORT_BOOTSTRAP_SERVERS=localhost:19092\n",
        encoding="utf-8",
    )
    scaffolded = _dg(project, env, "scaffold", "defs", TYPE, "orders_ingest")
    assert scaffolded.returncode == 0, scaffolded.stderr[-3000:]
    assert (project / DG_DEFS_YAML).is_file()
    return project, env


def install_cohort_into_new_project(root: Path, env: dict[str, str]) -> Path:
    """`create-dagster project orders_dg` in `root`, then Cohort installed in its environment."""
    done = subprocess.run(
        ["create-dagster", "project", "--no-uv-sync", "orders_dg"], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return install_cohort(root / "orders_dg")


def _dg(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["dg", *args], cwd=project, env=env, capture_output=True, text=True, timeout=300)


DG_REFUSED = {
    "unknown attribute": (
        "  # worker_slots: 3",
        "  worker_slotz: 3",
        "attributes.worker_slotz Additional properties are not allowed",
    ),
    "model": ("    # model: null", '    model: "orders_dg.models:Order"', "attributes.pipeline.model: cannot import"),
    "type": ("  # worker_slots: 3", "  worker_slots: many", "attributes.worker_slots: Input should be a valid integer"),
    "assignor": (
        "  # assignors: [",
        '  assignors: ["cooperative-stiky"]\n  # [',
        "attributes.assignors: unknown assignor",
    ),
    "store url": (
        '  store_url: "{{ env.COHORT_STORE_URL }}"',
        '  store_url: "not a url"',
        "attributes.store_url: store_url",
    ),
}
"""Edits of the scaffolded defs.yaml and the line `dg check defs` must print for each: the first two run by
default (dg's schema check, a load-time refusal), the others with the slow tests (each check takes ~10 s)."""


def _refused(project: Path, env: dict[str, str], change: tuple[str, str, str]) -> None:
    old, new, message = change
    defs_yaml = project / DG_DEFS_YAML
    good = defs_yaml.read_text(encoding="utf-8")
    assert old in good, old
    defs_yaml.write_text(good.replace(old, new, 1), encoding="utf-8")
    try:
        refused = _dg(project, env, "check", "defs")
    finally:
        defs_yaml.write_text(good, encoding="utf-8")
    output = _plain(refused.stdout + refused.stderr)
    assert refused.returncode == 1, output[-3000:]
    lines = [line for line in output.splitlines() if str(defs_yaml) in line and message in line]
    assert len(lines) == 1, (message, output[-5000:])
    assert "Traceback (most recent call last)" not in output and "Stack Trace" not in output, output[-5000:]
    if LOAD_FAILED in output:  # refused by the component as it loads: its line is all dg reports of the load
        assert _load_report(output) == lines, output[-5000:]


LOAD_FAILED = "Validation failed for code location"
"""dg's header over a failed load's report (`... - dagster - ERROR - Validation failed for code location X:`); its
footer is `... - dagster - ERROR - Validation for N code locations failed.`"""


def _plain(output: str) -> str:
    """dg's output without its colour codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", output)


def _load_report(output: str) -> list[str]:
    """The non-blank lines dg prints between its header and its footer of a failed load."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if LOAD_FAILED in line)
    end = next(i for i in range(start, len(lines)) if "code locations failed." in lines[i])
    return [line for line in lines[start + 1 : end] if line.strip()]


def test_dg_lists_scaffolds_and_checks_the_component(dg_project: tuple[Path, dict[str, str]]) -> None:
    project, env = dg_project
    listed = _dg(project, env, "list", "components", "--json")
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert TYPE in listed.stdout
    checked = _dg(project, env, "check", "defs")  # the scaffolded defs.yaml loads as written
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-5000:]
    for what in ("unknown attribute", "model"):
        _refused(project, env, DG_REFUSED[what])


def test_dg_check_defs_prints_what_the_user_guide_shows(dg_project: tuple[Path, dict[str, str]]) -> None:
    """docs/user-guide.md shows what `dg check defs` prints for its own defs.yaml with the model misspelt: dg's
    schema check, dg's header, Cohort's line naming the file, the line and the attribute, dg's footer; nothing
    else (the timestamps and the project's directory aside)."""
    project, env = dg_project
    guide = titled_blocks("user-guide.md")
    defs_yaml, models = project / DG_DEFS_YAML, project / "src/orders_dg/models.py"
    scaffolded = defs_yaml.read_text(encoding="utf-8")
    defs_yaml.write_text(replace_all(guide[DG_DEFS_YAML], {MODEL: MISSPELT}, what="its defs.yaml"), encoding="utf-8")
    models.write_text(guide["src/orders_dg/models.py"], encoding="utf-8")
    try:
        checked = _dg(project, env, "check", "defs")
    finally:
        defs_yaml.write_text(scaffolded, encoding="utf-8")
        models.unlink()
    assert checked.returncode == 1, checked.stdout[-3000:] + checked.stderr[-3000:]

    def shown(text: str, project_dir: str) -> list[str]:
        text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}", "<time>", text.replace(project_dir, "<project>"))
        return [line.rstrip() for line in text.strip().splitlines()]

    printed = shown(_plain(checked.stdout + checked.stderr), str(project))
    assert printed == shown(guide[GUIDE_REFUSAL], GUIDE_PROJECT), "\n".join(printed)


GUIDE_REFUSAL = "dg check: a refused setting"
"""The guide's block showing what `dg check defs` prints for a refused setting."""
GUIDE_PROJECT = "/home/me/orders_dg"
"""The project directory the guide's block shows."""
MODEL, MISSPELT = "orders_dg.models:Order", "orders_dg.models:Ordr"


def _block_model(info: Any) -> type[pydantic.BaseModel] | None:
    """The model of an attribute that is a block of its own (`pipeline`, `kafka` ...), else None."""
    for candidate in (info.annotation, *getattr(info.annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, pydantic.BaseModel):
            return candidate
    return None


def _comments_above(
    lines: list[str], model: type[pydantic.BaseModel], at: int, indent: str
) -> tuple[dict[str, str], int]:
    """Attribute path -> the comment right above its line (set or commented out) in a scaffolded defs.yaml, for
    `model`'s fields from line `at` on at `indent` (a block's attributes as `block.attribute`); and the line after."""
    found: dict[str, str] = {}
    for name, info in model.model_fields.items():
        line = next(i for i in range(at, len(lines)) if re.match(rf"{indent}(# )?{name}:( |$)", lines[i]))
        found[name] = " ".join(text.strip().removeprefix("# ") for text in lines[at:line])
        at = line + 1
        block = _block_model(info)
        if block is not None:
            inner, at = _comments_above(lines, block, at, indent + "  ")
            found.update({f"{name}.{key}": text for key, text in inner.items()})
    return found, at


def _descriptions(model: type[pydantic.BaseModel]) -> dict[str, str]:
    """Attribute path -> its field's description ('' when it has none), a block's attributes as `block.attribute`."""
    found: dict[str, str] = {}
    for name, info in model.model_fields.items():
        found[name] = info.description or ""
        block = _block_model(info)
        if block is not None:
            found.update({f"{name}.{key}": text for key, text in _descriptions(block).items()})
    return found


def _unwrapped(text: str) -> str:
    return "".join(text.split())  # the scaffold wraps comments at spaces and hyphens


def test_each_scaffolded_attribute_is_documented_with_its_own_description(
    dg_project: tuple[Path, dict[str, str]],
) -> None:
    """In the defs.yaml `dg scaffold defs` wrote, the comment above each attribute is that attribute's own
    description: the one its field declares, and no other attribute's of its block (a docstring describing several
    settings at once, `key_format, key_schema, key_subject: ...`, still gives each its own text)."""
    project, _ = dg_project
    lines = (project / DG_DEFS_YAML).read_text(encoding="utf-8").splitlines()
    documented, _ = _comments_above(lines, COMPONENT_SETTINGS, lines.index("attributes:") + 1, "  ")
    described = _descriptions(COMPONENT_SETTINGS)
    assert {path: _unwrapped(text) for path, text in documented.items()} == {
        path: _unwrapped(text) for path, text in described.items()
    }
    by_block: dict[str, dict[str, str]] = {}
    for path, text in documented.items():
        block, _, name = path.rpartition(".")
        by_block.setdefault(block, {})[name] = text
    shared = {
        f"{block or 'attributes'}.{name}": text
        for block, texts in by_block.items()
        for name, text in texts.items()
        if text and list(texts.values()).count(text) > 1
    }
    assert not shared, f"attributes documented with another attribute's text: {shared}"
    assert "subject" in documented["pipeline.key_subject"] and "format" in documented["pipeline.key_format"]


@pytest.mark.slow
@pytest.mark.parametrize("what", ["type", "assignor", "store url"])
def test_dg_check_defs_names_each_refused_setting(dg_project: tuple[Path, dict[str, str]], what: str) -> None:
    _refused(*dg_project, DG_REFUSED[what])
