"""What `cohort gc GROUP --sink PATH` does: delete what killed batch attempts left behind (a dry run unless
--execute). The command and its options are declared in cohort.cli.main with the others.

The staging areas under the sink's and the quarantine's `_staging` (or a table sink's two tables') are judged by
`cohort.pipelines.sink.staging_gc`: an attempt's area goes once its run is not a live member of the group, nothing
under it changed for the grace period and no committed range waits in it to be published. For a Delta or
Iceberg sink, the data files no version of the table references (found as `cohort audit` finds them,
`cohort.pipelines.tables.files`: older than its own grace period) go too, except those of a live member's run,
which may still commit them. Unlike `cohort audit --repair` it runs while the group has members, so a
deployment can schedule it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from cohort.pipelines.sink.layout import attempt_run_tag, default_quarantine_root, run_tag
from cohort.pipelines.sink.staging_collect import StagingCollection, collect_staging, group_view, staging_roots
from cohort.pipelines.sink.staging_gc import STAGING_GRACE_S
from cohort.pipelines.tables.store import parse_data_path
from cohort.pipelines.tasks.writer import ArrowFs, arrow_filesystem

if TYPE_CHECKING:
    from cohort.assignment.coordinator import Coordinator
    from cohort.cli.audit import SinkTarget
    from cohort.pipelines.tables.store import TableStore

__all__ = ["GcOutcome", "gc_group", "parse_grace"]


def parse_grace(text: str) -> float:
    """`--grace`: an ISO 8601 duration (`PT1H`, `P1D`), in seconds."""
    from cohort.assignment.ledger.resets import parse_duration

    try:
        return parse_duration(text).total_seconds()
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--grace'") from None


@dataclass(frozen=True)
class GcOutcome:
    """What `gc_group` found and did: the staging areas, and for a table sink the unreferenced data files it
    deletes (`data_files`), those it leaves to a live member's run, and how many are too young to judge."""

    staging: StagingCollection
    executed: bool
    data_files: tuple[str, ...] = ()
    live_data_files: int = 0
    young_data_files: int = 0


def gc_group(
    coordinator: Coordinator,
    group: str,
    target: SinkTarget,
    *,
    now: float,
    grace_s: float = STAGING_GRACE_S,
    execute: bool,
    as_json: bool,
) -> GcOutcome:
    """Collect GROUP's staging areas (and a table sink's unreferenced data files), deleting with `execute`, and
    print the result; `now` in epoch seconds (the clock the file system's modification times follow)."""
    for root, option in ((target.sink, "--sink"), (target.quarantine, "--quarantine")):
        if root is not None and arrow_filesystem(root) is None:
            message = f"pyarrow cannot reach {root!r} (give a local path or a pyarrow URI)"
            raise click.BadParameter(message, param_hint=f"'{option}'")
    view = group_view(coordinator, group)
    if view is None:  # pragma: no cover - a Coordinator always has the methods the view calls
        raise click.ClickException("this coordinator cannot show the group's members")
    fs = ArrowFs()
    table_format = target.resolved_format(fs)
    tables = target.tables(table_format) if table_format != "parquet" else None
    quarantine = target.quarantine or default_quarantine_root(target.sink)
    if tables is not None:
        roots = staging_roots(tables[0].root, tables[1].root, table_format)
    else:
        roots = staging_roots(target.sink, quarantine)
    staging = collect_staging(fs, roots, view, now=now, grace_s=grace_s, execute=execute)
    outcome = GcOutcome(staging, execute)
    if tables is not None:
        outcome = _table_files(fs, tables, view.live_runs().run_ids, outcome, now=now)
    _print(group, outcome, as_json)
    return outcome


def _table_files(
    fs: ArrowFs, tables: tuple[TableStore, TableStore], live: frozenset[str], outcome: GcOutcome, *, now: float
) -> GcOutcome:
    """The tables' data files no version references (`cohort audit`'s rule and code), less a live run's."""
    from cohort.pipelines.tables.audit import delete_unreferenced, unreferenced_table_files

    found = unreferenced_table_files(tables, now=now)
    live_tags = {run_tag(run) for run in live}
    paths, kept = [], 0
    for where, files in found.old.items():
        for f in files:
            parsed = parse_data_path(f.path, 0)
            if parsed is not None and attempt_run_tag(parsed.attempt) in live_tags:
                kept += 1
            else:
                paths.append(f"{found.roots[where]}/{f.path}")
    if outcome.executed and paths:
        delete_unreferenced(fs, paths)
    young = sum(found.young.values())
    return GcOutcome(outcome.staging, outcome.executed, tuple(sorted(paths)), kept, young)


def _print(group: str, outcome: GcOutcome, as_json: bool) -> None:
    staging = outcome.staging
    if as_json:
        payload = {
            "group": group,
            "executed": outcome.executed,
            "staging": [
                {"path": v.path, "delete": v.delete, "reason": v.reason, "detail": v.detail} for v in staging.verdicts
            ],
            "deleted": list(staging.deleted),
            "failed": [{"path": p, "error": e} for p, e in staging.failed],
            "left_alone": list(staging.foreign),
            "data_files": list(outcome.data_files),
            "live_data_files": outcome.live_data_files,
            "young_data_files": outcome.young_data_files,
        }
        click.echo(json.dumps(payload))
        return
    from cohort.cli.tables import print_table

    print_table(
        f"Staging areas of group {group}",
        ["PATH", "ACTION", "WHY"],
        [[v.path, "delete" if v.delete else "keep", v.detail] for v in staging.verdicts],
    )
    for path in staging.foreign:
        click.echo(f"left alone (not a batch attempt's staging area): {path}")
    for path, error in staging.failed:
        click.echo(f"could not delete {path}: {error}")
    if outcome.data_files:
        verb = "deleted" if outcome.executed else "would delete"
        click.echo(f"{verb} {len(outcome.data_files)} data file(s) no table version references")
    if outcome.live_data_files or outcome.young_data_files:
        click.echo(
            f"left alone: {outcome.live_data_files} unreferenced data file(s) of live runs, "
            f"{outcome.young_data_files} too young to judge"
        )
    condemned = sum(1 for v in staging.verdicts if v.delete)
    if not outcome.executed and (condemned or outcome.data_files):
        click.echo("Dry run: nothing changed. Add --execute to delete.")
    elif outcome.executed:
        click.echo(f"Deleted {len(staging.deleted)} staging area(s).")
