"""The record bad-input corpus: raw Kafka records (key, value, headers) with where each must land.

Each `RecordCase` is one record as a producer sends it and its expected outcome: `Sink` with the decoded
value columns, or `Quarantined` with a fragment of the reason. The value schema is `CORPUS_SCHEMA`
(`id` required) checked by `CorpusModel` (`name` at most 100,000 characters). The decoder
(cohort.pipelines.formats.decode) is a strict RFC 8259 parser: trailing text, a second object, single quotes, NaN, raw
control characters and lone surrogate escapes are quarantined, and a field takes only JSON of its type.

`produce_corpus` sends the cases one record per batch (exact end offsets on Tansu) and returns where each
landed; a record whose header key is not valid UTF-8 (which confluent-kafka cannot send) goes through
kafka-python, as a hostile or buggy client would send it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandera.pyspark as pa
import pyspark.sql.types as T

__all__ = [
    "CASES",
    "CORPUS_SCHEMA",
    "CorpusModel",
    "Quarantined",
    "RecordCase",
    "Sink",
    "produce_corpus",
]

CORPUS_SCHEMA = T.StructType(
    [
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("name", T.StringType()),
        T.StructField("count", T.LongType()),
        T.StructField("score", T.DoubleType()),
        T.StructField("payload", T.StringType()),
    ]
)
VALUE_COLUMNS: tuple[str, ...] = tuple(CORPUS_SCHEMA.names)
NAME_LIMIT = 100_000


class CorpusModel(pa.DataFrameModel):
    """A name longer than NAME_LIMIT characters is refused row by row."""

    name: T.StringType() = pa.Field(str_length={"max_value": NAME_LIMIT}, nullable=True)  # type: ignore[valid-type]


@dataclass(frozen=True)
class Sink:
    """The record reaches the sink with these value columns (the others are null)."""

    values: Mapping[str, Any]


@dataclass(frozen=True)
class Quarantined:
    """The record is quarantined with a reason containing `reason`."""

    reason: str


Header = tuple[str, bytes | None]


class RawHeaderKey(str):
    """A header key that kafka-python encodes as arbitrary bytes (not UTF-8), as a hostile client could."""

    raw: bytes = b""

    def __new__(cls, raw: bytes) -> RawHeaderKey:
        made = super().__new__(cls, raw.decode("latin-1"))
        made.raw = raw
        return made

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return self.raw


@dataclass(frozen=True)
class RecordCase:
    """One raw record and its expected outcome. `key` defaults to `key-<id>`."""

    id: str
    value: bytes | None
    expect: Sink | Quarantined
    key: bytes | Literal["auto"] | None = "auto"
    headers: Sequence[Header] | None = None
    raw_header_key: bytes | None = None

    @property
    def record_key(self) -> bytes | None:
        return f"key-{self.id}".encode() if self.key == "auto" else self.key

    @property
    def expected_headers(self) -> list[Header] | None:
        """The headers a consumer sees (None for none, or when they cannot be read at all)."""
        if self.raw_header_key is not None:
            return None
        return list(self.headers) if self.headers else None


def js(**fields: Any) -> bytes:
    """A JSON object value."""
    return json.dumps(fields, ensure_ascii=False).encode()


def ok(**values: Any) -> Sink:
    return Sink(values)


def bad(reason: str) -> Quarantined:
    return Quarantined(reason)


NOT_JSON = "not valid JSON"
NOT_OBJECT = "not a JSON object"
MISMATCH = "JSON does not match the value schema"
ID_MISSING = "field 'id' is missing or null but the schema requires it"
NOT_UTF8 = "value is not valid UTF-8"
TOO_LONG = "name: str_length"
DEEP = "[" * 2000 + "]" * 2000
BIG = "x" * 4_000_000 + "<end>"

CASES: tuple[RecordCase, ...] = (
    RecordCase("valid", js(id=1, name="ann", count=3, score=1.5), ok(id=1, name="ann", count=3, score=1.5)),
    # malformed JSON
    RecordCase("truncated", b'{"id": 2, "name": "tr', bad(NOT_JSON)),
    RecordCase("truncated-after-colon", b'{"id":', bad(NOT_JSON)),
    RecordCase("trailing-comma", b'{"id": 3,}', bad(NOT_JSON)),
    RecordCase("not-json", b"hello world", bad(NOT_JSON)),
    RecordCase("byte-order-mark", b'\xef\xbb\xbf{"id": 4}', ok(id=4)),  # RFC 8259 lets a parser skip it
    RecordCase("unquoted-field-name", b"{id: 5}", bad(NOT_JSON)),
    RecordCase("comment", b'/* c */ {"id": 6}', bad(NOT_JSON)),
    RecordCase("empty-value", b"", bad(NOT_JSON)),
    RecordCase("whitespace-value", b" \n\t ", bad(NOT_JSON)),
    RecordCase("number", b"42", bad(NOT_OBJECT)),
    RecordCase("string", b'"text"', bad(NOT_OBJECT)),
    RecordCase("boolean", b"true", bad(NOT_OBJECT)),
    RecordCase("json-null", b"null", bad(NOT_OBJECT)),
    RecordCase("array-of-numbers", b"[1, 2]", bad(NOT_OBJECT)),
    RecordCase("array-of-objects", b'[{"id": 7}, {"id": 8}]', bad(NOT_OBJECT)),
    RecordCase("empty-array", b"[]", bad(NOT_OBJECT)),
    RecordCase("empty-object", b"{}", bad(ID_MISSING)),
    # text after the object: a second object in the same value would otherwise be silently dropped
    RecordCase("trailing-garbage", b'{"id": 9} trailing', bad(NOT_JSON)),
    RecordCase("two-objects", b'{"id": 10}{"id": 11}', bad(NOT_JSON)),
    RecordCase("single-quotes", b"{'id': 12, 'name': 'sq'}", bad(NOT_JSON)),
    RecordCase("nan-token", b'{"id": 13, "score": NaN}', bad(NOT_JSON)),
    # wrong types
    RecordCase("string-for-long", b'{"id": "14"}', bad(MISMATCH)),
    RecordCase("float-for-long", b'{"id": 15.5}', bad(MISMATCH)),
    RecordCase("exponent-for-long", b'{"id": 1e2}', bad(MISMATCH)),
    RecordCase("bool-for-long", b'{"id": true}', bad(MISMATCH)),
    RecordCase("object-for-long", b'{"id": {"v": 16}}', bad(MISMATCH)),
    RecordCase("string-for-double", b'{"id": 17, "score": "1.5"}', bad(MISMATCH)),
    RecordCase("string-for-nullable-long", b'{"id": 18, "count": "3"}', bad(MISMATCH)),
    RecordCase("int-for-double", b'{"id": 19, "score": 2}', ok(id=19, score=2.0)),
    RecordCase("wrong-case-field", b'{"ID": 20}', bad(ID_MISSING)),
    RecordCase("object-for-string", b'{"id": 21, "name": {"first": "a"}}', bad(MISMATCH)),
    RecordCase("number-for-string", b'{"id": 22, "name": 5}', bad(MISMATCH)),
    RecordCase("array-for-string", b'{"id": 23, "name": [1, 2]}', bad(MISMATCH)),
    RecordCase("duplicate-field", b'{"id": 24, "id": 25}', bad("duplicate JSON key 'id'")),  # no silent last-wins
    # nulls
    RecordCase("tombstone", None, bad("null value (tombstone)")),
    RecordCase("null-in-nullable", b'{"id": 26, "name": null}', ok(id=26)),
    RecordCase("null-in-required", b'{"id": null, "name": "x"}', bad(ID_MISSING)),
    RecordCase("missing-nullable", b'{"id": 27}', ok(id=27)),
    RecordCase("missing-required", b'{"name": "no id"}', bad(ID_MISSING)),
    RecordCase("null-key", js(id=28), ok(id=28), key=None),
    RecordCase("empty-key", js(id=29), ok(id=29), key=b""),
    # huge values
    RecordCase("several-mb-value", js(id=30, payload=BIG), ok(id=30, payload=BIG)),
    RecordCase("long-string-field", js(id=31, name="y" * (NAME_LIMIT + 1)), bad(TOO_LONG)),
    RecordCase("string-at-the-limit", js(id=32, name="z" * NAME_LIMIT), ok(id=32, name="z" * NAME_LIMIT)),
    RecordCase("int64-max", b'{"id": 9223372036854775807}', ok(id=2**63 - 1)),
    RecordCase("int64-min", b'{"id": -9223372036854775808}', ok(id=-(2**63))),
    RecordCase("beyond-int64", b'{"id": 9223372036854775808}', bad(MISMATCH)),
    RecordCase("below-int64-nullable", b'{"id": 33, "count": -9223372036854775809}', bad(MISMATCH)),
    RecordCase("thousand-digits", ('{"id": 34, "count": ' + "7" * 1000 + "}").encode(), bad(MISMATCH)),
    RecordCase("double-overflow", b'{"id": 35, "score": 1e400}', bad(MISMATCH)),
    RecordCase("deep-nesting", ('{"id": 36, "extra": ' + DEEP + "}").encode(), bad(NOT_JSON)),
    RecordCase(
        "ten-thousand-unknown-fields",
        json.dumps({"id": 37, **{f"f{i}": i for i in range(10_000)}}).encode(),
        ok(id=37),
    ),
    # not UTF-8
    RecordCase("non-utf8-key", js(id=38), ok(id=38), key=b"\xff\xfe\x00\x80k"),
    RecordCase("non-utf8-value", b'{"id": 39, "name": "\xff"}', bad(NOT_UTF8)),
    RecordCase("latin1-value", b'{"id": 40, "name": "caf\xe9"}', bad(NOT_UTF8)),
    RecordCase("overlong-utf8", b'{"id": 41, "name": "\xc0\xaf"}', bad(NOT_UTF8)),
    RecordCase("utf8-encoded-surrogate", b'{"id": 42, "name": "\xed\xa0\x80"}', bad(NOT_UTF8)),
    # headers
    RecordCase("many-headers", js(id=43), ok(id=43), headers=[(f"h{i}", f"v{i}".encode()) for i in range(500)]),
    RecordCase("binary-header-values", js(id=44), ok(id=44), headers=[("bin", b"\x00\xff\xfe"), ("empty", b"")]),
    RecordCase("duplicate-header-keys", js(id=45), ok(id=45), headers=[("dup", b"1"), ("dup", b"2"), ("dup", b"1")]),
    RecordCase("null-header-value", js(id=46), ok(id=46), headers=[("nothing", None), ("after", b"x")]),
    RecordCase("unicode-header-key", js(id=47), ok(id=47), headers=[("ключ-🔑", "значение".encode())]),
    RecordCase("headers-on-a-bad-record", b"{oops", bad(NOT_JSON), headers=[("trace", b"\x01\x02")]),
    RecordCase(
        "non-utf8-header-key",
        js(id=48),
        bad("header key that is not valid UTF-8"),
        headers=[("ok", b"1")],
        raw_header_key=b"\xff\xfe-key",
    ),
    # unicode
    RecordCase("emoji", js(id=49, name="😀👍🏽🇫🇷"), ok(id=49, name="😀👍🏽🇫🇷")),
    RecordCase("right-to-left", js(id=50, name="שלום עולם مرحبا"), ok(id=50, name="שלום עולם مرحبا")),
    RecordCase("escaped-nul", b'{"id": 51, "name": "a\\u0000b"}', ok(id=51, name="a\x00b")),
    RecordCase("raw-nul-in-string", b'{"id": 52, "name": "a\x00b"}', bad(NOT_JSON)),
    RecordCase("escaped-surrogate-pair", b'{"id": 53, "name": "\\ud83d\\ude00"}', ok(id=53, name="😀")),
    # a lone surrogate escape names no character: UTF-8 cannot hold it
    RecordCase("lone-surrogate-escape", b'{"id": 54, "name": "\\ud800"}', bad(NOT_JSON)),
    RecordCase("control-characters-escaped", js(id=55, name="\t\r\n\x1b"), ok(id=55, name="\t\r\n\x1b")),
)


def _send_hostile(bootstrap: str, topic: str, partition: int, case: RecordCase) -> None:
    """Send a record whose first header key is raw bytes, through kafka-python (one record, one batch)."""
    from kafka import KafkaProducer

    assert case.raw_header_key is not None
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    try:
        headers = [(RawHeaderKey(case.raw_header_key), b"hostile"), *(case.headers or [])]
        producer.send(topic, value=case.value, key=case.record_key, headers=headers, partition=partition).get(30)
    finally:
        producer.close()


def produce_corpus(
    config: Mapping[str, Any], topic: str, partitions: int, cases: Sequence[RecordCase] = CASES
) -> dict[tuple[int, int], RecordCase]:
    """Send case i to partition i % partitions, each in a batch of its own; (partition, offset) -> case."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({**config, "linger.ms": 0, "message.max.bytes": 16_000_000, "enable.idempotence": False})
    placed: dict[tuple[int, int], RecordCase] = {}
    next_offset = [0] * partitions
    failures: list[str] = []
    for i, case in enumerate(cases):
        partition = i % partitions
        if case.raw_header_key is not None:
            producer.flush(30)
            _send_hostile(config["bootstrap.servers"], topic, partition, case)
        else:
            producer.produce(
                topic,
                value=case.value,
                key=case.record_key,
                headers=list(case.headers) if case.headers else None,
                partition=partition,
                on_delivery=lambda err, _msg, case=case: failures.append(f"{case.id}: {err}") if err else None,
            )
            if producer.flush(30):
                raise KafkaException(f"record {case.id!r} was not delivered")
        placed[(partition, next_offset[partition])] = case
        next_offset[partition] += 1
    if failures:
        raise KafkaException(f"records not delivered: {failures}")
    return placed
