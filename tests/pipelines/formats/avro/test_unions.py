"""Avro union resolution in the column-wise decoder, checked pair by pair against fastavro's own resolution.

A writer type is read into the first branch of a reader union it matches (promotions included); a writer union
read by a reader that is not a union resolves each branch against it. Every writer/reader pair of two generated
families is decoded and compared with `fastavro.schemaless_reader(payload, writer, reader)`:

* primitives and null, and every union of two of them in both orders (64 schemas, 4096 pairs);
* null, long, string, two versions of a record `Rec`, arrays of int and of string, a map of ints, and every
  union of two of them of different kinds in both orders (60 schemas, 3600 pairs);

and a hypothesis property draws larger unions (up to four branches) of all of these plus two versions of an enum
and a fixed. Each pair is a record with one field `v` of the writer type, read as the same record with the
reader type (or, `evolved`, beside a field that changes, so that even the same union on both sides is resolved);
the batch holds one payload per sample value of every writer branch (the branch index written byte by byte, as
a writer of that union would). For each payload:

* fastavro reads it: the decoded row equals fastavro's value in the reader's layout (for a union of several
  types, the member of the reader branch fastavro chose: fastavro's `match_types`, the function its reader
  picks the branch with, since the value alone cannot tell a float branch from a double one);
* fastavro raises: the row is quarantined with a reason, or the whole writer schema is refused
  (AvroResolutionError), which is allowed only for a writer that is not a union and only when fastavro reads
  none of its payloads.

Where Cohort reads more than the specification (cohort.pipelines.formats.avro.match: an enum into a string branch,
fixed into a bytes branch, when no branch matches), the expected value is fastavro's reading of the writer's
own value, in that branch.
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import pytest
from fastavro._read_py import match_types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cohort.pipelines.formats.avro.columns import AvroResolutionError
from cohort.pipelines.formats.avro.schema import AvroNode, AvroUnion, non_null_branch
from tests.support.avro_oracle import (
    Schema,
    amap,
    array,
    decode,
    decoded,
    encode,
    enum,
    expected,
    fixed,
    fld,
    node_of,
    record,
    same,
    varint,
    zigzag,
)

REC_V1 = record("Rec", fld("x", "int"))
REC_V2 = record("Rec", fld("x", "long"), fld("y", ["null", "string"], default=None))  # x long: V1 cannot read it
ENUM_V1 = enum("E", "A", "B", "NEW")
ENUM_V2 = enum("E", "C", "B", "A", default="A")  # NEW reads as A; V1 cannot read C
FIXED = fixed("F", 2)

Atom = tuple[str, Any, tuple[Any, ...]]
"""(kind, schema, sample values): one branch type of the families, with the values written in that branch."""

PRIMITIVES: list[Atom] = [
    ("null", "null", (None,)),
    ("boolean", "boolean", (False, True)),
    ("int", "int", (-1, 2**31 - 1, -(2**31))),
    ("long", "long", (2**40 + 1, -(2**63))),  # exact in a double: float(long) rounds once, as Arrow's cast does
    ("float", "float", (-0.0, math.nan, 3.4028234663852886e38)),
    ("double", "double", (0.1, -math.inf)),
    ("bytes", "bytes", (b"ok", b"\xff\xfe")),  # not UTF-8: read as a string, the record is bad
    ("string", "string", ("", "日本")),
]
COMPLEX: list[Atom] = [
    ("null", "null", (None,)),
    ("long", "long", (7, 2**40 + 1)),
    ("string", "string", ("", "é")),
    ("record", REC_V1, ({"x": 5}, {"x": -(2**31)})),
    ("record", REC_V2, ({"x": 2**40, "y": None}, {"x": 3, "y": "é"})),
    ("array", array("int"), ([], [1, -2])),  # an empty array too: a reader of other items refuses it all the same
    ("array", array("string"), ([], ["a", ""])),
    ("map", amap("int"), ({}, {"k": 1})),
]
NAMED: list[Atom] = [
    ("enum", ENUM_V1, ("A", "NEW")),
    ("enum", ENUM_V2, ("C", "B")),
    ("fixed", FIXED, (b"\x00\xff",)),
]


def family(atoms: Sequence[Atom], sizes: Sequence[int]) -> list[tuple[Atom, ...]]:
    """Every union of `sizes` branches of distinct kinds, in every order (a union of one branch: the type alone)."""
    found = []
    for size in sizes:
        for branches in itertools.permutations(atoms, size):
            if len({kind for kind, _, _ in branches}) == size:
                found.append(branches)
    return found


def schema_of(branches: Sequence[Atom]) -> Any:
    return branches[0][1] if len(branches) == 1 else [schema for _, schema, _ in branches]


def _name(branches: Sequence[Atom]) -> str:
    def one(atom: Atom) -> str:
        schema = atom[1]
        if not isinstance(schema, dict):
            return str(schema)
        if schema["type"] in ("array", "map"):
            return f"{schema['type']}<{schema.get('items', schema.get('values'))}>"
        return f"{schema['name']}{len(schema.get('fields', schema.get('symbols', [])))}"

    return one(branches[0]) if len(branches) == 1 else "[" + ",".join(one(b) for b in branches) + "]"


# --------------------------------------------------------------------------------------------- the oracle


@functools.cache
def _fastavro_schema(text: str) -> tuple[Any, dict[str, Any]]:
    """fastavro's parsed schema and its named types."""
    named: dict[str, Any] = {}
    return fastavro.parse_schema(json.loads(text), named_schemas=named), named


@dataclass(frozen=True)
class Pair:
    """A writer type and a reader type, each as given and as fastavro parsed it (with its named types), in the
    field `v` of a record; with `evolved`, the record also has a field `n` written as int and read as long, so
    the writer schema differs from the reader schema even where the types are the same."""

    writer: Any
    reader: Any
    evolved: bool = False

    @property
    def schemas(self) -> tuple[Schema, Schema]:
        return wrapped(self.writer, "int" if self.evolved else None), wrapped(
            self.reader, "long" if self.evolved else None
        )

    @property
    def same(self) -> bool:
        """Whether the writer schema is the reader schema (fastavro then reads without resolving anything)."""
        return self.writer == self.reader and not self.evolved

    @functools.cached_property
    def parsed(self) -> tuple[tuple[Any, dict[str, Any]], tuple[Any, dict[str, Any]]]:
        writer, reader = self.schemas
        return _fastavro_schema(json.dumps(writer)), _fastavro_schema(json.dumps(reader))

    def fastavro_branch(self, branch: int) -> int | None:
        """The reader branch fastavro reads writer branch `branch` into (its own `match_types`), None if none."""
        if self.same:
            return branch  # no resolution: fastavro reads the value as written
        (w, w_named), (r, r_named) = self.parsed
        written, targets = w["fields"][0]["type"], r["fields"][0]["type"]
        written = written if isinstance(written, list) else [written]
        targets = targets if isinstance(targets, list) else [targets]
        named = {"writer": w_named, "reader": r_named}
        return next((j for j, t in enumerate(targets) if match_types(written[branch], t, named)), None)

    def read(self, payload: bytes, *, resolve: bool = True) -> tuple[Any, str | None]:
        """(the value of `v`, None) as fastavro reads it (with the reader schema, or only the writer's), or
        (None, why it cannot)."""
        (w, _), (r, _) = self.parsed
        stream = io.BytesIO(payload)
        try:
            value = fastavro.schemaless_reader(stream, w, r if resolve and not self.same else None)
        except Exception as exc:  # fastavro raises several types when it cannot resolve or decode
            return None, f"{type(exc).__name__}: {exc}"
        assert stream.tell() == len(payload)
        return value["v"], None


def cohort_extension(writer_branch: Any, reader: Any) -> int | None:
    """The reader branch Cohort reads a writer enum or fixed into where the specification matches none (an enum
    as a string, fixed as bytes); None for other types."""
    as_kind = (
        {"enum": "string", "fixed": "bytes"}.get(writer_branch["type"]) if isinstance(writer_branch, dict) else None
    )
    targets = reader if isinstance(reader, list) else [reader]
    return next((j for j, t in enumerate(targets) if as_kind is not None and t == as_kind), None)


@dataclass(frozen=True)
class Written:
    """One payload: the writer branch it took and the value written in it."""

    branch: int
    value: Any
    payload: bytes


def payloads(branches: Sequence[Atom]) -> list[Written]:
    """One payload per sample value of each branch, the union index written by hand (fastavro's writer picks a
    branch from the value, and would put every small integer of `["int", "long"]` in the int branch)."""
    found = []
    for b, (_, schema, samples) in enumerate(branches):
        prefix = varint(zigzag(b)) if len(branches) > 1 else b""
        found += [Written(b, v, prefix + encode(schema, v)) for v in samples]
    return found


def wrapped(avro_type: Any, sibling: Any = None) -> Schema:
    """A record with the field `v` of this type (and a field `n` of type `sibling`, if given)."""
    return record("R", fld("v", avro_type), *([fld("n", sibling)] if sibling is not None else []))


def in_layout(value: Any, reader: AvroNode, branch: int | None) -> Any:
    """fastavro's value of reader branch `branch` in the canonical form of the reader's column."""
    if not isinstance(reader, AvroUnion):
        return expected(value, reader)
    assert branch is not None
    taken = reader.branches[branch]
    if value is None:
        return None
    if non_null_branch(reader) is not None:
        return expected(value, taken)
    members = [b for b in reader.branches if getattr(b, "kind", None) != "null"]
    k = members.index(taken)
    return {f"member{i}": expected(value, taken) if i == k else None for i in range(len(members))}


def check_pair(writer_branches: Sequence[Atom], reader_branches: Sequence[Atom], *, evolved: bool = False) -> None:
    """The pair's batch decodes as fastavro resolves each payload (the module doc; `evolved`: see Pair)."""
    writer, reader = schema_of(writer_branches), schema_of(reader_branches)
    pair = Pair(writer, reader, evolved)
    tail = encode("int", -7) if evolved else b""
    written = [Written(w.branch, w.value, w.payload + tail) for w in payloads(writer_branches)]
    refs = [pair.read(w.payload) for w in written]
    try:
        batch = decode(*pair.schemas, [w.payload for w in written])
    except AvroResolutionError as exc:
        assert len(writer_branches) == 1, f"a writer union is refused as a whole: {exc}"
        readable = [(w.value, value) for w, (value, error) in zip(written, refs, strict=True) if error is None]
        assert not readable, f"refused ({exc}), but fastavro reads {readable}"
        return
    node = node_of(json.dumps(reader))
    rows = batch.values.to_pylist()
    for row, (w, (value, error)) in enumerate(zip(written, refs, strict=True)):
        where = f"row {row}: {w.value!r} in writer branch {w.branch}"
        branch = pair.fastavro_branch(w.branch)
        extension = cohort_extension(writer_branches[w.branch][1], reader) if branch is None else None
        if extension is not None:  # Cohort's reading outside the specification: the writer's value, as is
            value, error = pair.read(w.payload, resolve=False)
            branch = extension
        if error is not None:
            assert row in batch.reasons, f"{where}: decoded as {rows[row]!r}, fastavro cannot read it: {error}"
            continue
        assert row not in batch.reasons, f"{where}: bad ({batch.reasons.get(row)}), fastavro reads {value!r}"
        got, want = decoded(rows[row]["v"], node), in_layout(value, node, branch)
        assert same(got, want), f"{where}:\n decoded  {got!r}\n fastavro {want!r}"
        assert rows[row].get("n", -7) == -7


# ---------------------------------------------------------------------------------------- the families

PRIMITIVE_FAMILY = family(PRIMITIVES, (1, 2))
PRIMITIVE_PAIRS = list(itertools.product(PRIMITIVE_FAMILY, PRIMITIVE_FAMILY))
COMPLEX_FAMILY = family(COMPLEX, (1, 2))
COMPLEX_PAIRS = list(itertools.product(COMPLEX_FAMILY, COMPLEX_FAMILY))


def test_the_families_are_what_the_module_doc_says() -> None:
    assert (len(PRIMITIVE_FAMILY), len(PRIMITIVE_PAIRS)) == (64, 4096)
    assert (len(COMPLEX_FAMILY), len(COMPLEX_PAIRS)) == (60, 3600)


@pytest.mark.parametrize("writer", PRIMITIVE_FAMILY, ids=[_name(w) for w in PRIMITIVE_FAMILY])
def test_every_primitive_union_pair_resolves_like_fastavro(writer: tuple[Atom, ...]) -> None:
    for reader in PRIMITIVE_FAMILY:
        check_pair(writer, reader)


@pytest.mark.parametrize("writer", COMPLEX_FAMILY, ids=[_name(w) for w in COMPLEX_FAMILY])
def test_every_union_pair_with_records_arrays_and_maps_resolves_like_fastavro(writer: tuple[Atom, ...]) -> None:
    for reader in COMPLEX_FAMILY:
        check_pair(writer, reader)


EVERY_SCHEMA = {_name(schema): schema for schema in PRIMITIVE_FAMILY + COMPLEX_FAMILY}


@pytest.mark.parametrize("schema", list(EVERY_SCHEMA.values()), ids=list(EVERY_SCHEMA))
def test_the_same_union_beside_an_evolved_field_resolves_like_fastavro(schema: tuple[Atom, ...]) -> None:
    """The writer schema differs from the reader schema only in another field: fastavro resolves the union all
    the same, each value into the first branch it matches (`["bytes", "string"]` reads a string as bytes)."""
    check_pair(schema, schema, evolved=True)


def test_a_union_in_a_field_the_reader_lacks_is_read_past_as_written() -> None:
    """Read to get past it, `["string", "bytes"]` keeps its bytes as bytes: not UTF-8, they are no reason to
    quarantine a record whose reader never sees the field (resolved, they went to the string branch)."""
    writer = record("R", fld("a", "long"), fld("gone", ["string", "bytes"]))
    data = [encode(writer, {"a": 1, "gone": b"\xff"}), encode(writer, {"a": 2, "gone": "s"})]
    batch = decode(writer, record("R", fld("a", "long")), data)
    assert batch.reasons == {}
    assert batch.values.to_pylist() == [{"a": 1}, {"a": 2}]


ALL_ATOMS = [*PRIMITIVES, *COMPLEX[3:], *NAMED]


def unions_of(atoms: Sequence[Atom], most: int) -> st.SearchStrategy[tuple[Atom, ...]]:
    """A type, or a union of up to `most` branches of distinct kinds in any order."""
    return st.lists(st.sampled_from(atoms), min_size=1, max_size=most, unique_by=lambda a: a[0]).map(tuple)


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(writer=unions_of(ALL_ATOMS, 4), reader=unions_of(ALL_ATOMS, 4), evolved=st.booleans())
def test_larger_unions_resolve_like_fastavro(writer: tuple[Atom, ...], reader: tuple[Atom, ...], evolved: bool) -> None:
    """Also as one field of a record whose other field evolves: then even the same union on both sides is
    resolved (its values go to the first branch they match, as fastavro reads them)."""
    check_pair(writer, reader, evolved=evolved)


# ----------------------------------------------------------------------------------- named cases


LATEST = ("null", "long", "string")
OLDER = {
    "nullable_long": ["null", "long"],
    "int": "int",
    "nullable_int": ["null", "int"],
    "nullable_int_or_string": ["null", "int", "string"],
    "reordered": ["long", "null"],
    "same": ["null", "long", "string"],
}


@pytest.mark.parametrize("older", list(OLDER.values()), ids=list(OLDER))
def test_older_versions_read_into_a_widened_union(older: Any) -> None:
    """Every older record lands in the latest union `["null", "long", "string"]` (all were quarantined)."""
    by_kind = {atom[0]: atom for atom in PRIMITIVES}
    writer = tuple(by_kind[k] for k in (older if isinstance(older, list) else [older]))
    reader = tuple(by_kind[k] for k in LATEST)
    batch = decode(wrapped(schema_of(writer)), wrapped(list(LATEST)), [w.payload for w in payloads(writer)])
    assert batch.reasons == {}
    check_pair(writer, reader)


def test_a_union_value_lands_in_the_member_of_its_type() -> None:
    writer, reader = wrapped(["long", "null", "int"]), wrapped(["null", "string", "long"])
    data = [varint(zigzag(0)) + encode("long", 2**40), varint(zigzag(1)), varint(zigzag(2)) + encode("int", -3)]
    rows = decode(writer, reader, data).values.to_pylist()
    assert rows == [
        {"v": {"member0": None, "member1": 2**40}},
        {"v": None},
        {"v": {"member0": None, "member1": -3}},
    ]


def test_a_writer_type_goes_to_the_first_reader_branch_it_matches() -> None:
    """As the specification and fastavro say: an int meets `double` before `long` and becomes a double."""
    rows = decode(wrapped("int"), wrapped(["null", "double", "long"]), [encode("int", 5)]).values.to_pylist()
    assert rows == [{"v": {"member0": 5.0, "member1": None}}]


def test_the_same_union_is_read_branch_for_branch() -> None:
    """Writer and reader `["string", "bytes"]`: bytes stay bytes (by first match they would become a string)."""
    schema = wrapped(["string", "bytes"])
    data = [varint(zigzag(1)) + encode("bytes", b"\xff"), varint(zigzag(0)) + encode("string", "s")]
    batch = decode(schema, schema, data)
    assert batch.reasons == {}
    assert batch.values.to_pylist() == [
        {"v": {"member0": None, "member1": b"\xff"}},
        {"v": {"member0": "s", "member1": None}},
    ]


def test_a_writer_type_no_reader_branch_matches_refuses_the_writer_schema() -> None:
    with pytest.raises(AvroResolutionError, match=r"`\$\.v`: boolean cannot be read as \[null, long, string\]"):
        decode(wrapped("boolean"), wrapped(["null", "long", "string"]), [encode("boolean", True)])


def test_a_writer_branch_no_reader_branch_matches_quarantines_only_its_records() -> None:
    writer = wrapped(["null", "boolean", "long"])
    data = [varint(zigzag(1)) + encode("boolean", True), varint(zigzag(0)), varint(zigzag(2)) + encode("long", 4)]
    batch = decode(writer, wrapped(["null", "long", "string"]), data)
    assert list(batch.reasons) == [0]
    assert "boolean cannot be read as [null, long, string]" in batch.reasons[0]
    assert batch.values.to_pylist() == [None, {"v": None}, {"v": {"member0": 4, "member1": None}}]


OTHER = record("Other", fld("x", "long"))
RENAMED = {**record("Renamed", fld("x", "long")), "aliases": ["Rec"]}


@pytest.mark.parametrize(
    ("writer", "reader"),
    [
        (["null", REC_V1, OTHER], ["null", OTHER, REC_V2]),  # each record into the reader record of its name
        (["null", OTHER, REC_V1], [REC_V2, "null", OTHER]),
        (REC_V1, ["null", OTHER, RENAMED]),  # the reader record names the writer's among its aliases
        (["null", ENUM_V1], ["null", "string", ENUM_V2]),  # an enum into the enum of its name, not the string
    ],
    ids=["by_name", "by_name_reordered", "by_alias", "enum_by_name"],
)
def test_named_types_go_to_the_reader_branch_of_their_name(writer: Any, reader: Any) -> None:
    def atoms(schema: Any) -> tuple[Atom, ...]:
        samples = {
            "null": (None,),
            "string": ("s",),
            "Rec": ({"x": 1},),
            "Other": ({"x": 2},),
            "Renamed": (),
            "E": ("A", "NEW"),
        }
        types = schema if isinstance(schema, list) else [schema]
        return tuple(("k" + str(i), t, samples[t if isinstance(t, str) else t["name"]]) for i, t in enumerate(types))

    check_pair(atoms(writer), atoms(reader))


@pytest.mark.parametrize(
    ("writer", "value", "reader", "want"),
    [
        (
            record("Address", fld("city", "string")),
            {"city": "Oslo"},
            ["null", record("Value1", fld("city", ["null", "string"], default=None))],
            {"city": "Oslo"},
        ),
        (ENUM_V1, "NEW", ["null", "long", "string"], {"member0": None, "member1": "NEW"}),
        (FIXED, b"\x01\x02", ["null", "bytes"], b"\x01\x02"),
    ],
    ids=["record_of_another_name", "enum_as_string", "fixed_as_bytes"],
)
def test_outside_the_specification_cohort_reads_what_it_reads_outside_unions(
    writer: Any, value: Any, reader: Any, want: Any
) -> None:
    """A reader schema derived from Spark columns names its records itself and has no enums or fixed: a branch
    no reader branch matches goes to the first one Cohort reads it as (fastavro refuses these records)."""
    payload = encode(writer, value)
    assert Pair(writer, reader).read(payload)[1] is not None
    batch = decode(wrapped(writer), wrapped(reader), [payload])
    assert batch.reasons == {}
    assert batch.values.to_pylist() == [{"v": want}]


def test_an_array_of_other_items_is_refused_even_when_empty() -> None:
    """fastavro refuses `array<string>` as `array<long>` before reading any item; so does Cohort (it read a batch
    of empty arrays, and refused it only once an item came)."""
    payload = encode(array("string"), [])
    assert Pair(array("string"), array("long")).read(payload)[1] is not None
    with pytest.raises(AvroResolutionError, match="array of string cannot be read as array of long"):
        decode(wrapped(array("string")), wrapped(array("long")), [payload])
