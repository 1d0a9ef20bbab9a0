"""The titled code blocks of a page of docs/, for the tests that run what the pages show.

A runnable block carries a title in its info string (```bash title="master"```); `titled_blocks` returns
title -> body, refusing two blocks of one page with the same title. `replace_all` swaps values a test must
change (a port, a path) and fails when the page no longer holds one, so a test never runs a block it did
not adapt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

__all__ = ["DOCS", "replace_all", "titled_blocks"]

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r'^```(?P<lang>\w+) title="(?P<title>[^"]+)"\n(?P<body>.*?)^```$', re.MULTILINE | re.DOTALL)


def titled_blocks(page: str) -> dict[str, str]:
    """title -> body of every titled code block of docs/<page>."""
    blocks: dict[str, str] = {}
    for match in BLOCK.finditer((DOCS / page).read_text(encoding="utf-8")):
        title = match["title"]
        assert title not in blocks, f"two blocks of docs/{page} are titled {title!r}"
        blocks[title] = match["body"]
    return blocks


def replace_all(text: str, replacements: Mapping[str, str], *, what: str, required: bool = True) -> str:
    """`text` with each key replaced by its value where it stands as a whole word (numbers) or as written
    (anything else); AssertionError naming `what` when a key does not occur (unless not `required`)."""
    for old, new in replacements.items():
        pattern = rf"(?<![\w.]){re.escape(old)}(?!\w)" if old.isdigit() else re.escape(old)
        text, count = re.subn(pattern, new, text)
        assert count or not required, f"{what} no longer holds {old!r}"
    return text
