"""The Delta table store's errors: `DeltaStoreError`, and delta-rs's long messages cut to one line."""

from __future__ import annotations

import re

__all__ = ["DeltaStoreError", "short_error"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FRAME = re.compile(r"(\d+: |at )")  # the lines of a Rust backtrace


class DeltaStoreError(RuntimeError):
    """delta-rs failed on the table (unreachable storage, a damaged log...): the message names the table."""


def short_error(error: BaseException) -> str:
    """An error in one line of at most 240 characters: delta-rs messages are nested cause chains over many
    lines, with terminal colours and sometimes a backtrace; the first line says what failed, the last one why."""
    lines = [_ANSI.sub("", line).strip().lstrip("↳").strip() for line in str(error).splitlines()]
    lines = [line for line in lines if line and not _FRAME.match(line)]
    if not lines:
        return type(error).__name__
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return text if len(text) <= 240 else text[:237] + "..."
