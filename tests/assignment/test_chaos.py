"""The chaos simulation in CI: >10,000 seeded steps over the real coordinator and assignors, a SQLite run
that must replay the in-memory trace exactly, determinism, the CLI, and proof that the checker catches
forged violations."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.group_state import GroupConfig, GroupState
from cohort.assignment.protocol.messages import JoinRequest
from cohort.assignment.store.memory import MemoryGroupStore
from cohort.common.types import TopicPartition
from harness.reliability.chaos_members import Phase, SimMember
from tests.assignment.chaos import Simulation, SimulationReport, main, simulate
from tests.assignment.chaos_invariants import InvariantViolation, Snapshot

ROOT = Path(__file__).resolve().parents[2]

# (assignor, seed, steps): 22,000 in-memory steps, eager and cooperative assignors.
RUNS = [
    ("cooperative-sticky", 11, 5000),
    ("cooperative-sticky", 12, 5000),
    ("sticky", 13, 4000),
    ("range", 14, 4000),
    ("roundrobin", 15, 4000),
]


def _assert_chaos_happened(report: SimulationReport, steps: int) -> None:
    """The run exercised what it claims: many generations, Stable periods, commits both ways, zombies."""
    assert report.steps == steps
    assert report.max_generation >= steps // 100
    assert report.stable_steps >= steps // 20
    assert report.commits_accepted >= steps // 100
    assert report.commits_refused.get("ILLEGAL_GENERATION", 0) > 0
    assert report.zombie_commits_refused > 0
    for event in ("crash", "pause", "resume", "restart_static", "leave", "long_tick", "grow_topics"):
        assert report.events.get(event, 0) > 0, event


@pytest.mark.parametrize(("assignor", "seed", "steps"), RUNS, ids=[f"{a}-seed{s}" for a, s, _ in RUNS])
def test_chaos_in_memory(assignor: str, seed: int, steps: int) -> None:
    report = simulate(seed, steps, assignor=assignor)
    _assert_chaos_happened(report, steps)
    assert report.assignor == assignor and report.store == "memory"


@pytest.mark.parametrize("assignor", ["cooperative-sticky", "range"])
@pytest.mark.slow
def test_chaos_on_sqlite_replays_the_in_memory_trace(assignor: str, sqlite_url: str) -> None:
    """The same seed on SQLite takes exactly the same path as in memory: same answers, same digest."""
    on_sqlite = simulate(21, 800, store_url=sqlite_url, assignor=assignor)
    in_memory = simulate(21, 800, assignor=assignor)
    assert on_sqlite.store == "sqlite"
    assert on_sqlite.max_generation >= 8 and on_sqlite.commits_accepted > 0
    assert dataclasses.replace(on_sqlite, store="memory") == in_memory


def test_a_seed_replays_identically() -> None:
    first, second = simulate(5, 600), simulate(5, 600)
    assert first == second
    assert simulate(6, 600).digest != first.digest


# ----------------------------------------------------------------------------------- the checker


def _settled(seed: int) -> Simulation:
    """A simulation stepped until its group is Stable with at least two members owning partitions."""
    sim = Simulation(seed)
    for _ in range(3000):
        sim.step()
        view = sim.coordinator.describe_group("chaos")
        owners = [m for m in view.members if m.owned]
        histories = sim.snapshot().histories
        if view.state is GroupState.STABLE and len(owners) >= 2 and any(len(h) >= 2 for h in histories.values()):
            return sim
    raise AssertionError("the simulation never reached a Stable group with two owners and a ledger")


def _double_owner(snapshot: Snapshot) -> Snapshot:
    first, second, *_ = [m for m in snapshot.view.members if m.owned]
    stolen = dataclasses.replace(second, owned=tuple(sorted({*second.owned, first.owned[0]})))
    members = tuple(stolen if m is second else m for m in snapshot.view.members)
    return dataclasses.replace(snapshot, view=dataclasses.replace(snapshot.view, members=members))


def _ledger_gap(snapshot: Snapshot) -> Snapshot:
    tp, history = next((tp, h) for tp, h in snapshot.histories.items() if len(h) >= 2)
    last = history[-1]
    shifted = dataclasses.replace(last, from_offset=last.from_offset + 3, until_offset=last.until_offset + 3)
    histories = {**snapshot.histories, tp: [*history[:-1], shifted]}
    return dataclasses.replace(snapshot, histories=histories, heads={**snapshot.heads, tp: shifted.until_offset})


def _head_backwards(snapshot: Snapshot) -> Snapshot:
    tp = next(tp for tp, h in snapshot.histories.items() if len(h) >= 2)
    return dataclasses.replace(snapshot, heads={**snapshot.heads, tp: snapshot.histories[tp][0].until_offset})


def _orphan_in_stable(snapshot: Snapshot) -> Snapshot:
    owner = next(m for m in snapshot.view.members if m.owned)
    dropped = dataclasses.replace(owner, owned=owner.owned[1:], assigned=owner.assigned[1:])
    members = tuple(dropped if m is owner else m for m in snapshot.view.members)
    return dataclasses.replace(snapshot, view=dataclasses.replace(snapshot.view, members=members))


def _generation_back(snapshot: Snapshot) -> Snapshot:
    return dataclasses.replace(snapshot, view=dataclasses.replace(snapshot.view, generation=0))


FORGERIES: dict[str, tuple[Callable[[Snapshot], Snapshot], str]] = {
    "double-owner": (_double_owner, "owned by two members at once"),
    "ledger-gap": (_ledger_gap, "not contiguous: gap"),
    "head-backwards": (_head_backwards, "went backward"),
    "orphan-in-stable": (_orphan_in_stable, "owned by nobody"),
    "generation-back": (_generation_back, "generation went back"),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_the_checker_catches_a_forged_violation(forgery: str) -> None:
    sim = _settled(31)
    forge, fragment = FORGERIES[forgery]
    real = sim.snapshot()
    sim.check(real)  # the real state passes
    with pytest.raises(AssertionError) as caught:
        sim.check(forge(real))
    message = str(caught.value)
    assert message.startswith(f"chaos seed=31 step={sim.step_no}: ")
    assert fragment in message
    assert f"python -m tests.assignment.chaos --seed 31 --steps {sim.step_no}" in message
    assert message.count("\n  #") >= 10  # the last events, for the replay


def test_a_phantom_ledger_entry_is_a_lost_or_forged_update() -> None:
    """An entry the simulation never saw accepted (same offsets, another member) is caught."""
    sim = _settled(32)
    real = sim.snapshot()
    tp, history = next((tp, h) for tp, h in real.histories.items() if h)
    forged = dataclasses.replace(history[-1], member_id="someone-else", instance_id=None)
    with pytest.raises(AssertionError, match=r"chaos seed=32 .*differs from the accepted commits"):
        sim.check(dataclasses.replace(real, histories={**real.histories, tp: [*history[:-1], forged]}))


# --------------------------------------------------------------------------------------------- CLI


def test_cli_replays_a_seed_as_a_module() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.assignment.chaos", "--seed", "3", "--steps", "150", "--assignor", "range"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["seed"] == 3 and report["steps"] == 150 and report["assignor"] == "range"
    assert report == json.loads(json.dumps(dataclasses.asdict(simulate(3, 150, assignor="range"))))


def test_cli_prints_the_failing_seed_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(self: object, snapshot: Snapshot) -> None:
        raise InvariantViolation("forged for the test")

    monkeypatch.setattr("tests.assignment.chaos_invariants.InvariantChecker.check", broken)
    assert main(["--seed", "8", "--steps", "5"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("chaos seed=8 step=1: forged for the test")
    assert "python -m tests.assignment.chaos --seed 8 --steps 1" in err


# ------------------------------------------------------------------------------- bugs found by chaos


def test_evaluating_the_timers_twice_at_one_instant_changes_nothing() -> None:
    """Found by chaos seed 2: a cooperative member rejoins in time and keeps its partitions, and its
    progress deadline passes while the join phase waits for a silent member. The evaluation that completes
    the phase restarts its progress clock, so a second evaluation at the same instant evicts nobody."""
    clock = ManualClock(1000.0)
    coordinator = Coordinator(MemoryGroupStore(), clock=clock, config=GroupConfig(initial_rebalance_delay=0))
    coordinator.report_topic_metadata("g", {"t": 4})

    def member(name: str) -> SimMember:
        request = JoinRequest(
            client_id=name,
            topics=("t",),
            assignors=("cooperative-sticky",),
            session_timeout=10,
            rebalance_timeout=30,
            progress_timeout=20,
        )
        return SimMember(coordinator, "g", name, request)

    a, b = member("a"), member("b")
    for _ in range(20):
        a.step()
        b.step()
    assert a.phase is Phase.STABLE and b.phase is Phase.STABLE and a.owned and b.owned
    c = member("c")
    c.step()  # MEMBER_ID_REQUIRED
    c.step()  # admitted: PreparingRebalance, waiting for a and b
    a.step()  # heartbeat: REBALANCE_IN_PROGRESS
    a.step()  # rejoins in time, keeping its partitions (cooperative); b stays silent
    clock.advance(31)  # b's session and the join phase end; a's progress deadline passed while it waited
    shown = coordinator.describe_group("g")
    assert shown.state is GroupState.COMPLETING_REBALANCE
    assert coordinator.describe_group("g").member(str(a.member_id)).owned == a.owned
    coordinator.expire("g")  # persists exactly what describe_group showed...
    assert coordinator.describe_group("g") == shown  # ...so showing it again must not differ
    assert coordinator.expire("g") == ()


def test_partition_counts_are_checked_against_every_topic() -> None:
    """The 'owned by nobody' check resolves pattern subscriptions: a topic no member subscribes to is
    not required to be owned."""
    sim = _settled(33)
    real = sim.snapshot()
    extra = {**real.view.partitions_per_topic, "unsubscribed": 3}
    view = dataclasses.replace(real.view, partitions_per_topic=extra)
    sim.check(dataclasses.replace(real, view=view))
    assert TopicPartition("unsubscribed", 0) not in {tp for m in view.members for tp in m.owned}
