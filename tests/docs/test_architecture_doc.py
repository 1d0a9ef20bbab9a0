"""docs/architecture.md against the code: every room (sub-package) of assignment/, pipelines/ and cohort/runtime/
is named, every module of them too, and what it says runs on executors is what the code declares."""

from __future__ import annotations

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
    assert rooms == {"tasks", "formats", "sink"}
