"""Typed, JSON-serializable cursors of the Cohort sensors (what each sensor last saw, per group).

Example:
    >>> cursor = MembershipCursor({"g": GroupCursor(last_event=7, members={"m-1": (2, "run-a")})})
    >>> MembershipCursor.from_json(cursor.to_json()) == cursor
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["GroupCursor", "MembershipCursor", "TopicCursor"]


@dataclass(frozen=True)
class GroupCursor:
    """One group as the membership sensor last saw it.

    `last_event` is the id of the last group event handled; `members` maps the member ids seen alive to
    (worker slot or None, Dagster run id or None), so a member removed between two ticks can still be
    traced to its slot and run; `runs_scanned_until` is the wall-clock time up to which failed and
    canceled worker runs were looked at (0: never); `rerun_runs` are the latest runs whose slot was already
    rerun (a run removed at its deadline that fails later is not rerun a second time).
    """

    last_event: int = 0
    members: Mapping[str, tuple[int | None, str | None]] = field(default_factory=dict)
    runs_scanned_until: float = 0.0
    rerun_runs: tuple[str, ...] = ()


@dataclass(frozen=True)
class MembershipCursor:
    """The membership sensor's cursor: per group what was handled, and where a budget-cut tick stopped."""

    groups: Mapping[str, GroupCursor] = field(default_factory=dict)
    next_group: int = 0

    def to_json(self) -> str:
        """Serialize (stable key order)."""
        return json.dumps(
            {
                "groups": {
                    name: {
                        "last_event": g.last_event,
                        "members": {m: list(v) for m, v in g.members.items()},
                        "runs_scanned_until": g.runs_scanned_until,
                        "rerun_runs": list(g.rerun_runs),
                    }
                    for name, g in sorted(self.groups.items())
                },
                "next_group": self.next_group,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | None) -> MembershipCursor:
        """Parse a cursor; None or '' is the empty cursor."""
        if not text:
            return cls()
        raw = json.loads(text)
        groups = {
            name: GroupCursor(
                last_event=int(g.get("last_event", 0)),
                members={m: (v[0], v[1]) for m, v in g.get("members", {}).items()},
                runs_scanned_until=float(g.get("runs_scanned_until", 0.0)),
                rerun_runs=tuple(g.get("rerun_runs", ())),
            )
            for name, g in raw.get("groups", {}).items()
        }
        return cls(groups, int(raw.get("next_group", 0)))


@dataclass(frozen=True)
class TopicCursor:
    """The topic sensor's cursor: per group, the partition count of each subscribed topic last seen."""

    counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def to_json(self) -> str:
        """Serialize (stable key order)."""
        return json.dumps({"counts": {g: dict(sorted(c.items())) for g, c in sorted(self.counts.items())}})

    @classmethod
    def from_json(cls, text: str | None) -> TopicCursor:
        """Parse a cursor; None or '' is the empty cursor."""
        if not text:
            return cls()
        raw = json.loads(text)
        return cls({g: {t: int(n) for t, n in c.items()} for g, c in raw.get("counts", {}).items()})
