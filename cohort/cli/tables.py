"""How the `cohort` command prints: Rich tables on a terminal (wide when piped), shared with the demo."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from cohort.assignment.ledger.resets import PartitionReset
    from cohort.assignment.views import GroupDescription
    from cohort.cli.ops import DescribeRow, ResetRow

__all__ = ["assignor_cell", "print_describe", "print_reset_plan", "print_table"]


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a Rich table; None cells print as "-", numeric columns right-aligned."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, justify="right" if column in _NUMERIC else "left")
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    console = Console()
    if not console.is_terminal:  # piped: do not truncate names to a guessed 80 columns
        console = Console(width=200)
    console.print(table)


_NUMERIC = {
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "GENERATION",
    "MEMBERS",
    "BEFORE",
    "AFTER",
    "NEW-OFFSET",
    "FROM",
    "TO",
    "RECORDS",
}


def assignor_cell(assignor: str | None, last_assignor: str | None) -> str | None:
    """The assignor a group runs with: the current generation's; while the group is Empty, the latest
    generation's, said so; None (printed "-") for a group that never had a generation with members."""
    if assignor is not None:
        return assignor
    return None if last_assignor is None else f"{last_assignor} (last generation)"


def print_describe(described: GroupDescription, rows: Sequence[DescribeRow], resets: Sequence[ResetRow] = ()) -> None:
    """Print `cohort describe`'s table for a `GroupDescription` and its `DescribeRow`s (the demo uses it)."""
    columns = ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "OWNER", "GENERATION"]
    assignor = assignor_cell(described.assignor, described.last_assignor) or "-"
    configured = ", ".join(described.configured_assignors)
    title = (
        f"Group {described.name}: {described.state.value}, generation {described.generation}, "
        f"assignor {assignor}, {len(described.members)} member(s)"
        + (f"; configured assignors {configured}" if configured else "")
    )
    table = [[r.topic, r.partition, r.current_offset, r.log_end_offset, r.lag, r.owner, r.generation] for r in rows]
    print_table(title, columns, table)
    if resets:
        print_table(
            "Offset resets (latest last)",
            ["AT", "TOPIC", "PARTITION", "FROM", "TO", "BY"],
            [[r.at, r.topic, r.partition, r.from_offset, r.to_offset, r.note] for r in resets],
        )


def print_reset_plan(group: str, plans: Sequence[PartitionReset], *, executed: bool) -> None:
    """Print a reset plan: per partition, the current and new offset and the records replayed or skipped."""
    rows = []
    for p in plans:
        effect = f"replay {p.replayed}" if p.replayed else f"skip {p.skipped}" if p.skipped else "none"
        if p.clamped:
            effect += f" (target outside the log [{p.low}, {p.high}): clamped)"
        rows.append([p.tp.topic, p.tp.partition, p.current, p.new, effect])
    title = f"Offset reset of group {group}" + ("" if executed else " (dry run: nothing changed)")
    print_table(title, ["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "RECORDS"], rows)
