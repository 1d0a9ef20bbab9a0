"""A deterministic chaos simulation of the real coordinator and assignors, replayable from its seed.

`simulate(seed, steps)` drives simulated members (`chaos_members.SimMember`, dynamic and static) against a
real `Coordinator` over a `ManualClock`; a seeded `random.Random` picks each step's event: a member's next
protocol call, everyone's next call, a commit (of an owned partition, sometimes a foreign or
non-contiguous one), a join, a clean leave, a crash, a pause (the member later resumes as a zombie and
commits with what it last knew), a static restart (the new incarnation fences the old one), clock ticks
(sessions, progress deadlines and the initial rebalance delay come due), a sensor's `expire` or eviction,
and topic growth (more partitions, then a new topic matched by pattern subscriptions).

After every step the coordinator's own view is checked (`chaos_invariants`); a commit's acceptance is
predicted from that view before the call and compared with the answer, and a refused commit must change
nothing. A violation raises an AssertionError starting `chaos seed=<seed> step=<n>:` with the last events
and the command that replays it:

    python -m tests.assignment.chaos --seed 7 --steps 3000 --assignor cooperative-sticky
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import sys
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import CoordinatorError
from cohort.assignment.protocol.group_state import GroupConfig, GroupState
from cohort.assignment.protocol.messages import JoinRequest
from cohort.assignment.store.memory import MemoryGroupStore
from cohort.assignment.store.sql import SqlGroupStore
from cohort.assignment.views import GroupDescription
from cohort.common.types import OffsetRange, TopicPartition
from harness.reliability.chaos_members import Phase, SimMember, Status
from tests.assignment.chaos_invariants import InvariantChecker, InvariantViolation, Snapshot

__all__ = ["GROUP", "Simulation", "SimulationReport", "main", "simulate"]

GROUP = "chaos"
SLOTS = ("chaos/w-0", "chaos/w-1", "chaos/w-2")
PATTERN = r"t\d+"
MAX_LIVE = 6
SESSION, REBALANCE, PROGRESS = 10.0, 20.0, 45.0
MAX_T0, MAX_T1 = 12, 6


@dataclass(frozen=True)
class SimulationReport:
    """What a simulation did (so a test can check that the chaos really happened) and a digest of its
    event trace (equal for equal seeds: the run is deterministic)."""

    seed: int
    steps: int
    assignor: str
    store: str
    max_generation: int
    stable_steps: int
    members_started: int
    events: Mapping[str, int]
    commits_accepted: int
    commits_refused: Mapping[str, int]
    zombie_commits_refused: int
    fenced: int
    partitions_per_topic: Mapping[str, int]
    digest: str


class Simulation:
    """One seeded run; `step()` performs one event and checks every invariant."""

    def __init__(self, seed: int, *, store_url: str | None = None, assignor: str = "cooperative-sticky") -> None:
        self.seed = seed
        self.assignor = assignor
        self.store_name = "memory" if store_url is None else store_url.split(":", 1)[0]
        self.rng = random.Random(seed)
        self.clock = ManualClock(1000.0)
        store = MemoryGroupStore() if store_url is None else SqlGroupStore.from_url(store_url)
        config = GroupConfig(initial_rebalance_delay=self.rng.choice([0.0, 3.0]))
        self.coordinator = Coordinator(store, clock=self.clock, config=config)
        self.topics: dict[str, int] = {"t0": self.rng.randint(1, 6)}
        self.coordinator.report_topic_metadata(GROUP, self.topics)
        self.members: list[SimMember] = []
        self.checker = InvariantChecker()
        self.log: deque[str] = deque(maxlen=20)
        self.step_no = 0
        self._names = itertools.count()
        self._digest = hashlib.sha256()
        self._events: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()
        self._accepted = self._zombie_refused = self._stable_steps = self._started = 0

    # ------------------------------------------------------------------------------------ driving

    def run(self, steps: int) -> SimulationReport:
        """Perform `steps` steps (bounded), then close the store and report."""
        try:
            for _ in range(steps):
                self.step()
        finally:
            self.coordinator.close()
        return self.report()

    def step(self) -> None:
        """One random event, then every invariant; a violation raises AssertionError naming seed and step."""
        self.step_no += 1
        action = self._choose()
        self._events[action.__name__.strip("_")] += 1
        try:
            action()
        except InvariantViolation as violation:
            raise self._failure(str(violation)) from None
        except (AssertionError, CoordinatorError, RuntimeError, ValueError, KeyError, TypeError) as exc:
            raise self._failure(f"unexpected {type(exc).__name__}: {exc}") from exc
        self.check()

    def check(self, snapshot: Snapshot | None = None) -> None:
        """Check `snapshot` (default: the coordinator's current view) against everything seen so far."""
        snapshot = snapshot if snapshot is not None else self.snapshot()
        try:
            self.checker.check(snapshot)
        except InvariantViolation as violation:
            raise self._failure(str(violation)) from None
        if snapshot.view.state is GroupState.STABLE:
            self._stable_steps += 1

    def snapshot(self) -> Snapshot:
        """The coordinator's view of the group and of every partition's ledger now."""
        view = self.coordinator.describe_group(GROUP)
        partitions = [TopicPartition(t, p) for t, n in sorted(self.topics.items()) for p in range(n)]
        heads = self.coordinator.fetch_offsets(GROUP, partitions)
        histories = {tp: self.coordinator.ledger_history(GROUP, tp.topic, tp.partition) for tp in partitions}
        return Snapshot(view, heads, histories)

    def report(self) -> SimulationReport:
        """The counters so far."""
        return SimulationReport(
            seed=self.seed,
            steps=self.step_no,
            assignor=self.assignor,
            store=self.store_name,
            max_generation=self.checker.generation,
            stable_steps=self._stable_steps,
            members_started=self._started,
            events=dict(sorted(self._events.items())),
            commits_accepted=self._accepted,
            commits_refused=dict(sorted(self._refused.items())),
            zombie_commits_refused=self._zombie_refused,
            fenced=sum(1 for m in self.members if m.status is Status.FENCED) + self._events["fenced_pruned"],
            partitions_per_topic=dict(self.topics),
            digest=self._digest.hexdigest(),
        )

    def _failure(self, problem: str) -> AssertionError:
        replay = (
            f"python -m tests.assignment.chaos --seed {self.seed} --steps {self.step_no} --assignor {self.assignor}"
        )
        events = "\n  ".join(self.log)
        return AssertionError(
            f"chaos seed={self.seed} step={self.step_no}: {problem}\nreplay: {replay}\nlast events:\n  {events}"
        )

    def _note(self, text: str) -> None:
        line = f"#{self.step_no} t={self.clock.now() - 1000.0:.1f} {text}"
        self.log.append(line)
        self._digest.update(line.encode())

    # ------------------------------------------------------------------------------------- choosing

    def _with(self, status: Status) -> list[SimMember]:
        return [m for m in self.members if m.status is status]

    def _choose(self) -> Callable[[], None]:
        live = self._with(Status.LIVE)
        due = [m for m in self._with(Status.PAUSED) if m.paused_until <= self.clock.now()]
        static_live = [m for m in live if m.instance_id is not None]
        committers = [m for m in live if m.member_id is not None]
        options: Sequence[tuple[Callable[[], None], float]] = (
            (self._member_step, 40.0 if live else 0.0),
            (self._everyone_steps, 10.0 if live else 0.0),
            (self._commit, 15.0 if committers else 0.0),
            (self._tick, 12.0),
            (self._long_tick, 1.5),
            (self._start_member, (3.0 if len(live) < MAX_LIVE else 0.0) + (30.0 if not live else 0.0)),
            (self._leave, 1.0 if live else 0.0),
            (self._crash, 0.7 if live else 0.0),
            (self._pause, 1.0 if live else 0.0),
            (self._restart_static, 0.7 if static_live else 0.0),
            (self._resume, 6.0 if due else 0.0),
            (self._grow_topics, 0.3),
            (self._expire, 2.0),
            (self._evict_stopped, 1.0 if self._with(Status.CRASHED) else 0.0),
        )
        actions, weights = zip(*options, strict=True)
        return self.rng.choices(actions, weights=weights)[0]

    # ---------------------------------------------------------------------------------------- events

    def _step_member(self, member: SimMember) -> None:
        result = member.step(progress=self.rng.random() < 0.5)
        self._note(f"{member.name} {result.call} -> {result.outcome}")

    def _member_step(self) -> None:
        self._step_member(self.rng.choice(self._with(Status.LIVE)))

    def _everyone_steps(self) -> None:
        for member in self._with(Status.LIVE):
            if member.status is Status.LIVE:
                self._step_member(member)

    def _tick(self) -> None:
        self.clock.advance(self.rng.choice([0.1, 0.5, 1.0, 2.0, 3.0]))

    def _long_tick(self) -> None:
        seconds = self.rng.choice([6.0, 11.0, 21.0, 46.0])
        self.clock.advance(seconds)
        self._note(f"clock +{seconds:g} s")

    def _start_member(self, instance_id: str | None = None) -> None:
        name = f"run-{next(self._names):04d}"  # fixed width: member ids sort the same way in every replay
        if instance_id is None and self.rng.random() < 0.35:
            taken = {m.instance_id for m in self._with(Status.LIVE)}
            free = [s for s in SLOTS if s not in taken]
            instance_id = self.rng.choice(free) if free else None
        pattern = self.rng.random() < 0.3
        request = JoinRequest(
            client_id=name,
            instance_id=instance_id,
            topics=() if pattern else ("t0",),
            topic_pattern=PATTERN if pattern else None,
            assignors=(self.assignor,),
            session_timeout=SESSION,
            rebalance_timeout=REBALANCE,
            progress_timeout=PROGRESS,
        )
        member = SimMember(self.coordinator, GROUP, name, request)
        self._started += 1
        self.members.append(member)
        self._note(f"{name} starts (slot {instance_id}, {'pattern' if pattern else 't0'})")
        self._step_member(member)
        self._prune()

    def _prune(self) -> None:
        """Forget members that can never act again (keeps the per-step cost bounded)."""
        if len(self.members) > 40:
            gone = [m for m in self.members if m.status in (Status.LEFT, Status.FENCED)][:10]
            self._events["fenced_pruned"] += sum(1 for m in gone if m.status is Status.FENCED)
            self.members = [m for m in self.members if m not in gone]

    def _leave(self) -> None:
        member = self.rng.choice(self._with(Status.LIVE))
        self._note(f"{member.name} leaves -> {member.leave()}")

    def _crash(self) -> None:
        member = self.rng.choice(self._with(Status.LIVE))
        member.status = Status.CRASHED
        self._note(f"{member.name} crashes")

    def _pause(self) -> None:
        member = self.rng.choice(self._with(Status.LIVE))
        seconds = self.rng.choice([2.0, 8.0, 15.0, 30.0, 60.0])
        member.status, member.paused_until = Status.PAUSED, self.clock.now() + seconds
        self._note(f"{member.name} pauses for {seconds:g} s")

    def _restart_static(self) -> None:
        """A static member's process is replaced (new run of the slot) while the old one hangs."""
        old = self.rng.choice([m for m in self._with(Status.LIVE) if m.instance_id is not None])
        old.status, old.paused_until = Status.PAUSED, self.clock.now() + self.rng.choice([0.0, 5.0, 20.0])
        self._note(f"{old.name} hangs; its slot restarts")
        self._start_member(old.instance_id)

    def _resume(self) -> None:
        """A paused member wakes up and, before noticing anything, commits what it processed meanwhile."""
        member = self.rng.choice([m for m in self._with(Status.PAUSED) if m.paused_until <= self.clock.now()])
        member.status = Status.LIVE
        self._note(f"{member.name} resumes")
        if member.member_id is not None and member.owned:
            self._commit_as(member, zombie=True)

    def _commit(self) -> None:
        committers = [m for m in self._with(Status.LIVE) if m.member_id is not None]
        settled = [m for m in committers if m.phase is Phase.STABLE]
        self._commit_as(self.rng.choice(settled if settled and self.rng.random() < 0.9 else committers))

    def _grow_topics(self) -> None:
        if self.topics["t0"] < MAX_T0 and self.rng.random() < 0.6:
            self.topics["t0"] = min(MAX_T0, self.topics["t0"] + self.rng.randint(1, 3))
        elif "t1" not in self.topics:
            self.topics["t1"] = self.rng.randint(1, 4)
        elif self.topics["t1"] < MAX_T1:
            self.topics["t1"] += 1
        started = self.coordinator.report_topic_metadata(GROUP, dict(self.topics))
        self._note(f"topics {self.topics} -> rebalance={started}")

    def _expire(self) -> None:
        events = self.coordinator.expire(GROUP)
        if events:
            self._note(f"sensor expire -> {len(events)} events")

    def _evict_stopped(self) -> None:
        """A sensor notices a crashed run and evicts its member."""
        member = self.rng.choice(self._with(Status.CRASHED))
        member.status = Status.LEFT  # the run is over either way
        if member.member_id is None:
            return
        try:
            self.coordinator.evict_member(GROUP, member.member_id, "run failed")
            self._note(f"sensor evicts {member.name}")
        except CoordinatorError as exc:
            self._note(f"sensor evicts {member.name} -> {exc.code}")

    # --------------------------------------------------------------------------------------- commits

    def _commit_as(self, member: SimMember, *, zombie: bool = False) -> None:
        """Commit one range as `member` believes it may; predict acceptance from the coordinator's view."""
        assert member.member_id is not None
        every = [TopicPartition(t, p) for t, n in sorted(self.topics.items()) for p in range(n)]
        foreign = not member.owned or self.rng.random() < 0.1
        tp = self.rng.choice(every if foreign else list(member.owned))
        before = self.snapshot()
        head = before.heads[tp]
        start = max(0, (head if head is not None else self.rng.randint(0, 50)) + self.rng.choice([0] * 9 + [-1, 1]))
        length = self.rng.choice([0, 1, 1, 2, 5, 10])
        expected = _commit_allowed(before.view, member, tp, start, head)
        ranges = [OffsetRange(tp.topic, tp.partition, start, start + length, records=length)]
        who = f"{'zombie ' if zombie else ''}{member.name} gen={member.generation}"
        try:
            entries = self.coordinator.commit_offsets(
                GROUP,
                ranges,
                member_id=member.member_id,
                generation=member.generation,
                instance_id=member.instance_id,
                run_id=member.name,
            )
        except CoordinatorError as exc:
            self._note(f"{who} commits {tp} [{start}, {start + length}) -> {exc.code}")
            if expected:
                raise InvariantViolation(f"a valid commit by {who} of {tp} was refused: {exc}") from None
            after = self.snapshot()
            if after != before:
                problem = f"a refused commit by {who} ({exc.code}) changed the group or ledger"
                raise InvariantViolation(problem) from None
            self._refused[exc.code] += 1
            self._zombie_refused += zombie
            return
        self._note(f"{who} commits {tp} [{start}, {start + length}) -> accepted")
        if not expected:
            raise InvariantViolation(f"a stale, fenced or foreign commit by {who} of {tp} at {start} was accepted")
        self.checker.record_accepted(entries)
        self._accepted += 1


def _commit_allowed(
    view: GroupDescription, member: SimMember, tp: TopicPartition, start: int, head: int | None
) -> bool:
    """Whether the coordinator must accept `member`'s commit of `tp` from `start`, per its own view."""
    current = {m.member_id: m for m in view.members}
    holder = next((m.member_id for m in view.members if m.instance_id == member.instance_id), None)
    return (
        member.member_id in current
        and (member.instance_id is None or holder == member.member_id)
        and member.generation == view.generation
        and view.state is not GroupState.COMPLETING_REBALANCE
        and tp in current[member.member_id].owned
        and (head is None or start == head)
    )


def simulate(
    seed: int, steps: int, *, store_url: str | None = None, assignor: str = "cooperative-sticky"
) -> SimulationReport:
    """Run a seeded chaos simulation of `steps` steps (in memory by default, or on `store_url`).

    Example:
        >>> simulate(1, 50).steps
        50
    """
    return Simulation(seed, store_url=store_url, assignor=assignor).run(steps)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: replay a seed; prints the report as JSON, or the violation and exit status 1."""
    parser = argparse.ArgumentParser(prog="python -m tests.assignment.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--assignor", default="cooperative-sticky")
    parser.add_argument("--store-url", default=None, help="SQLAlchemy URL (default: in-memory store)")
    args = parser.parse_args(argv)
    try:
        report = simulate(args.seed, args.steps, store_url=args.store_url, assignor=args.assignor)
    except AssertionError as failure:
        print(failure, file=sys.stderr)
        return 1
    print(json.dumps(asdict(report), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
