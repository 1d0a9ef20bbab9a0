"""The repository's text cites nothing outside the repository.

Docstrings, comments and pages explain themselves or point at files of this repository (docs/, a module, a
test). References to documents that live elsewhere (a specification or a style guide kept next to the
repository, numbered reference articles) mean nothing to a reader of the repository, so
every tracked (or new, not ignored) `.py` and `.md` file is scanned for them. Public references such as
Kafka's KIPs are fine. Random and property-test seeds are not citations: only the shapes below are.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Written with character classes so that this file does not match itself.
CITATIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a specification document", re.compile(r"\bS[P]EC\b")),
    ("a style guide", re.compile(r"\bS[T]YLE\b")),
    ("a path into a folder of reference articles", re.compile(r"\bse[e]ds?/", re.IGNORECASE)),
    ("a numbered reference article", re.compile(r"(?<![A-Za-z])se[e]ds?[ _-]?0\d\d\b", re.IGNORECASE)),
    ("a reference article's content", re.compile(r"\bse[e]d's\b|\bas in the se[e]d\b", re.IGNORECASE)),
    (
        "a reference article",
        re.compile(r"\bse[e]d (?:articles?|documents?|posts?|blog|examples?|scenarios?)\b", re.IGNORECASE),
    ),
)


def _text_files() -> list[Path]:
    """Tracked and new (not ignored) .py and .md files; a walk of the tree when git is unavailable."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "*.py", "*.md"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        skipped = {".git", ".venv", "build", "dist", "node_modules"}
        return sorted(
            p
            for p in ROOT.rglob("*")
            if p.suffix in (".py", ".md") and p.is_file() and not skipped.intersection(p.relative_to(ROOT).parts)
        )
    return sorted(ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file())


def find_citations(path: Path) -> list[str]:
    """`file:line: what (the line)` for each citation in one file."""
    found = []
    relative = path.relative_to(ROOT)
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        for what, pattern in CITATIONS:
            if pattern.search(line):
                found.append(f"{relative}:{number}: {what}: {line.strip()[:120]}")
    return found


def test_the_patterns_catch_citations_and_spare_random_seeds() -> None:
    # split so that this file holds none of them whole
    cited = [
        "as S" + "PEC section 4 says",
        "ST" + "YLE pattern 2",
        "se" + "eds/001 shows it",
        "Se" + "ed 003's scenarios",
        "as in the se" + "ed, the answer is lost",
        "the se" + "ed examples",
    ]
    spared = [
        "replayable from its seed",
        "chaos seed=31 step=4",
        "@settings(derandomize=True)  # seed 14, 3 topics",
        "report shows the seed, which reproduces the cluster",
        "SPEC_ARGS = {}",
        "_MSGSPEC_TYPES",
    ]
    for line in cited:
        assert any(p.search(line) for _w, p in CITATIONS), line
    for line in spared:
        assert not any(p.search(line) for _w, p in CITATIONS), line


def test_no_docstring_comment_or_page_cites_a_document_outside_the_repository() -> None:
    files = _text_files()
    assert files, "no .py or .md file found"
    found = [hit for path in files for hit in find_citations(path)]
    assert not found, "citations of documents outside the repository:\n" + "\n".join(found)
