"""Which broker a benchmark runs on: the embedded Tansu broker, Apache Kafka, or both in one run (`--broker`).

`--broker both` (the default of the benchmarks that take it) starts both brokers for the whole run and measures the
same cases on each, alternating between them where the benchmark repeats (A B, then B A: `in_turn`), so the
machine's speed of the moment weighs on both alike. Kafka is the single KRaft node of harness/kafka_broker.py on the
jars harness/kafka/pom.xml pins (`make kafka-jars` caches them); Tansu is cohort.devtools.embedded_broker, as the
demo uses.

A benchmark's summary (its last line, one JSON object) keeps its keys for the first broker measured (the embedded
one whenever it runs) and adds `broker` (that broker's name), `brokers` ({name: that broker's figures}) and, with
both, `kafka_over_embedded` ({figure: Kafka's over Tansu's}): see `summary`.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

__all__ = [
    "BROKERS",
    "LABELS",
    "add_broker_option",
    "broker_names",
    "broker_pid",
    "in_turn",
    "ratio",
    "rotated",
    "round_order",
    "start_brokers",
    "summary",
]

BROKERS = ("embedded", "kafka")
"""In the order a run measures them."""

LABELS = {"embedded": "embedded Tansu broker", "kafka": "Apache Kafka 4.4 (KRaft, one node)"}

T = TypeVar("T")


def add_broker_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker",
        choices=(*BROKERS, "both"),
        default="both",
        help="the embedded Tansu broker, Apache Kafka (harness/kafka_broker.py), or both in one run, alternating "
        "(default: both)",
    )


def broker_names(choice: str) -> tuple[str, ...]:
    """The brokers a `--broker` choice measures, in order."""
    if choice == "both":
        return BROKERS
    if choice not in BROKERS:
        raise ValueError(f"--broker takes {', '.join(BROKERS)} or both, not {choice!r}")
    return (choice,)


def start_brokers(names: Sequence[str], stack: contextlib.ExitStack) -> dict[str, Any]:
    """Start each named broker, stopped when `stack` closes: {name: broker, with `bootstrap_servers`}."""
    started: dict[str, Any] = {}
    for name in names:
        if name == "embedded":
            from cohort.devtools.embedded_broker import EmbeddedBroker

            started[name] = stack.enter_context(EmbeddedBroker())
        elif name == "kafka":
            from harness.kafka_broker import KafkaBroker

            started[name] = stack.enter_context(KafkaBroker())
        else:
            raise ValueError(f"unknown broker {name!r}")
    return started


def broker_pid(broker: Any) -> int | None:
    """The broker's own process id (Tansu's binary, Kafka's JVM), to count its CPU; None when not running."""
    process = getattr(broker, "_process", None)
    return None if process is None else int(process.pid)


def rotated(items: Sequence[T], turn: int) -> list[T]:
    """`items` starting at `turn` (modulo their number)."""
    if not items:
        return []
    start = turn % len(items)
    return [*items[start:], *items[:start]]


def in_turn(names: Sequence[T], turn: int) -> list[T]:
    """The brokers in order on even turns, reversed on odd ones (A B, B A, A B, ...): over two turns each broker
    goes first once and follows the other once, so neither always runs right after the other's step."""
    return list(names) if turn % 2 == 0 else list(reversed(names))


def round_order(modes: Sequence[str], names: Sequence[str], turn: int) -> list[tuple[str, str]]:
    """The (mode, broker) cases of round `turn` of a benchmark that repeats its modes: the modes rotated by one each
    round (as with one broker), each mode's brokers side by side, `in_turn`."""
    return [(mode, name) for mode in rotated(modes, turn) for name in in_turn(names, turn)]


def ratio(kafka: float | None, embedded: float | None, digits: int = 3) -> float | None:
    """Kafka's figure over Tansu's, rounded; None when either is missing or Tansu's is zero."""
    if kafka is None or embedded is None or embedded == 0:
        return None
    return round(kafka / embedded, digits)


def summary(
    common: Mapping[str, Any], per_broker: Mapping[str, Mapping[str, Any]], ratio_keys: Sequence[str]
) -> dict[str, Any]:
    """One JSON summary for a run over one or both brokers: `common` (the run's own figures), then the first
    broker's figures under their usual keys, `broker` naming it, `brokers` with every broker's, and, when both
    ran, `kafka_over_embedded`: Kafka's over Tansu's for each of `ratio_keys`."""
    if not per_broker:
        raise ValueError("no broker measured")
    first = next(iter(per_broker))
    found: dict[str, Any] = {**common, **per_broker[first], "broker": first}
    found["brokers"] = {name: dict(figures) for name, figures in per_broker.items()}
    if "embedded" in per_broker and "kafka" in per_broker:
        found["kafka_over_embedded"] = {
            key: ratio(per_broker["kafka"].get(key), per_broker["embedded"].get(key)) for key in ratio_keys
        }
    return found
