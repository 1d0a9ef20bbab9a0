"""docs/architecture.md against the code: every room (sub-package) of assignment/, pipelines/ and cohort/runtime/
is named, every module of them too, and what it says runs on executors is what the code declares."""

from __future__ import annotations

import re
from pathlib import Path

from cohort.pipelines.tasks import EXECUTOR_MODULES

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
LAYERS = ("assignment", "pipelines", "cohort/runtime")


def test_every_room_and_module_is_named() -> None:
    missing = []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            if path.name != "__init__.py" and f"`{path.name}`" not in DOC and f"{path.stem}.py" not in DOC:
                missing.append(str(path.relative_to(ROOT)))
        for room in sorted(p for p in (ROOT / layer).iterdir() if (p / "__init__.py").exists()):
            if f"`{room.name}/`" not in DOC:
                missing.append(f"room {room.relative_to(ROOT)}/")
    assert not missing, f"docs/architecture.md does not name: {missing}"


def test_the_executor_modules_are_the_declared_ones() -> None:
    """The doc points at the one declared list, and each room it names there holds modules of that list."""
    assert "cohort.pipelines.tasks.EXECUTOR_MODULES" in DOC
    rooms = {m.split(".")[2] for m in EXECUTOR_MODULES if m.startswith("cohort.pipelines.")}
    assert rooms == {"tasks", "formats", "sink", "storage"}


def test_the_readme_lists_every_document() -> None:
    """README's documentation list names every page under docs/."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"docs/{p.name}" not in readme]
    assert not missing, f"README.md does not list {missing}"


def _written_keys() -> set[str]:
    """The `cohort/` metadata keys the code writes: string literals and `METADATA_PREFIX` f-strings in the Dagster
    and Airflow faces and the runtime, and every field of a consumed range (each becomes a key)."""
    import ast
    import dataclasses

    from cohort.runtime.lineage import METADATA_PREFIX, ConsumedRange

    keys = {f"{METADATA_PREFIX}{f.name}" for f in dataclasses.fields(ConsumedRange)}
    for folder in ("assets", "resources", "cohort/airflow", "cohort/runtime"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if node.value.startswith(METADATA_PREFIX) and node.value[len(METADATA_PREFIX) :].isidentifier():
                        keys.add(node.value)
                elif isinstance(node, ast.JoinedStr) and len(node.values) == 2:
                    head, tail = node.values
                    if (
                        isinstance(head, ast.FormattedValue)
                        and ast.unparse(head.value) == "METADATA_PREFIX"
                        and isinstance(tail, ast.Constant)
                        and str(tail.value).isidentifier()
                    ):
                        keys.add(f"{METADATA_PREFIX}{tail.value}")
    return keys


def test_metadata_doc_names_every_key_the_code_writes() -> None:
    doc = (ROOT / "docs" / "metadata.md").read_text(encoding="utf-8") + (ROOT / "docs" / "airflow.md").read_text(
        encoding="utf-8"
    )
    keys = _written_keys()
    assert {"cohort/records", "cohort/partitions", "cohort/content_hash"} <= keys  # the scan finds keys
    missing = sorted(k for k in keys if not re.search(re.escape(k) + r"(?![A-Za-z0-9_])", doc))
    assert not missing, f"docs/metadata.md does not describe {missing}"
