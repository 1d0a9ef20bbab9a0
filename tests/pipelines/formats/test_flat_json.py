"""The C fast path for flat JSON schemas (`cohort.pipelines.formats.flat_json`) against the full msgspec decoder.

The fast path parses the records it is certain about straight into Arrow buffers and defers every other one
to the full decoder; its contract is that, for any input, `ValueDecoder.decode(values, fast=True)` gives the
same columns (values, validity and float bits: -0.0 is not 0.0) and the same reasons as `fast=False`.

Properties: (1) over generated flat schemas (odd and non-ASCII field names, the 7 eligible types, nullable or
not) and batches of generated values (valid objects, keys in any order and spelling, every number and string
spelling, repeats, unknown and nested members, BOMs, garbage, truncations, byte mutations, tombstones, ...),
laid out as binary, large binary and slices, both paths agree; (2) each row the fast path keeps is exactly the
full decoder's row, and only a row the full decoder accepts (or refuses for a missing required field) is
kept. Fixed tables of number and string spellings, and examples showing that the fast path really engages and
what it defers, complete them.
"""

from __future__ import annotations

import json
import math
import random
import re
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyspark.sql.types as T
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cohort.pipelines.formats.decode import ValueDecoder

# CI builds the C extension (cohort.pipelines.formats._flat_json), so these tests always run there; a checkout installed
# without a C compiler has only the full decoder, and nothing to compare it with.
flat_json = pytest.importorskip(
    "cohort.pipelines.formats.flat_json", reason="the flat JSON fast path is not in this tree"
)
if not flat_json.fast_available():
    pytest.skip("the C extension cohort.pipelines.formats._flat_json was not built", allow_module_level=True)

PROPERTIES = settings(
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

KINDS: dict[str, T.DataType] = {
    "boolean": T.BooleanType(),
    "byte": T.ByteType(),
    "short": T.ShortType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "double": T.DoubleType(),
    "string": T.StringType(),
}
INT_BITS: dict[str, int] = {"byte": 8, "short": 16, "int": 32, "long": 64}

NAMES: list[str] = [
    "id",
    "a",
    "ab",  # a name that extends another
    "b",
    "f0",  # the full decoder's internal name of the first field
    "f1",
    "",
    "é",
    "naïve",
    "日本語",
    "😀 smile",
    "sl/ash",  # may be written with the \/ escape
    "sp ace",
    "del\x7f",
    "x" * 40,
]
"""Field names the full decoder accepts; keys are spelled with random escapes besides."""
REFUSED_NAMES: list[str] = ['q"uote', "back\\slash", "tab\tkey", "nul\x00"]
"""Names msgspec cannot rename fields to: the full decoder raises ValueError for any batch."""

BOM = b"\xef\xbb\xbf"

# ------------------------------------------------------------------------------------------ the spellings

INT_SPELLINGS: list[bytes] = [
    str(v).encode()
    for bits in (8, 16, 32, 64)
    for bound in (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    for v in (bound - 1, bound, bound + 1)
] + [
    b"0",
    b"-0",
    b"1",
    b"-1",
    b"00",
    b"01",
    b"-01",
    b"+1",
    b"18446744073709551615",
    b"18446744073709551616",
    b"-18446744073709551616",
    b"99999999999999999999",
    b"123456789012345678901234567890",
    b"1" + b"0" * 40,
    b"9007199254740993",
    b"-",
    b"--1",
    b"0x10",
    b"1_000",
]
FLOAT_SPELLINGS: list[bytes] = [
    b"0.0",
    b"-0.0",
    b"0e0",
    b"-0e0",
    b"0E-5",
    b"-0.0e+0",
    b"-0e400",
    b"0e999999999999999999999",
    b"1.0",
    b"1.",
    b".5",
    b"1e",
    b"1e+",
    b"1.e5",
    b"1e2",
    b"1E2",
    b"1e+2",
    b"1e-2",
    b"1e05",
    b"1.5E+0010",
    b"100e-2",
    b"0.1",
    b"0.30000000000000004",
    b"1e308",
    b"1.7976931348623157e308",
    b"1.7976931348623158e308",
    b"1.7976931348623159e308",
    b"1e309",
    b"1e400",
    b"-1e400",
    b"1e-400",
    b"-1e-400",
    b"5e-324",
    b"-5e-324",
    b"4.9406564584124654e-324",
    b"2.4703282292062327e-324",
    b"2.4703282292062328e-324",
    b"2.2250738585072011e-308",
    b"2.2250738585072012e-308",
    b"2.2250738585072014e-308",
    b"9007199254740993.0",
    b"9007199254740992.5",
    b"1.00000000000000011102230246251565404236316680908203125",
    b"1.00000000000000011102230246251565404236316680908203126",
    b"0.1000000000000000055511151231257827021181583404541015625",
    b"7e22",
    b"1e23",
    b"8.98846567431158e307",
    b"123456789012345678901234567890e-10",
    b"1e0000000000000000000000001",
    b"1e-0000000000000000000000001",
    b"0." + b"0" * 70 + b"1e70",
    b"1" * 400,
    b"0." + b"0" * 400 + b"1",
    b"NaN",
    b"Infinity",
    b"-Infinity",
]
SHORT_ESCAPES: list[bytes] = [b'\\"', b"\\\\", b"\\/", b"\\b", b"\\f", b"\\n", b"\\r", b"\\t"]
ODD_ESCAPES: list[bytes] = [
    b"\\u0000",
    b"\\u001f",
    b"\\u0022",
    b"\\u005c",
    b"\\u005C",
    b"\\u002F",
    b"\\u007f",
    b"\\u0080",
    b"\\u00e9",
    b"\\u00E9",
    b"\\u20ac",
    b"\\ufeff",
    b"\\uffff",
    b"\\ud83d\\ude00",
    b"\\uD83D\\uDE00",
    b"\\udbff\\udfff",
    b"\\ud800",
    b"\\udc00",
    b"\\ude00\\ud83d",
    b"\\ud800\\u0041",
    b"\\ud800x",
    b"\\ud800\\n",
    b"\\ud800\\ud800",
    b"\\u12g4",
    b"\\uZZZZ",
    b"\\u12",
    b"\\u",
    b"\\a",
    b"\\x41",
    b"\\'",
    b"\\0",
    b"\\U0041",
    b"\\ ",
]
RAW_CONTROLS: list[bytes] = [b"\x00", b"\x01", b"\x08", b"\t", b"\n", b"\r", b"\x1f", b"\x7f"]
BAD_UTF8: list[bytes] = [
    b"\xff",
    b"\xfe",
    b"\x80",
    b"\xbf",
    b"\xc0\x80",
    b"\xc1\xbf",
    b"\xc2",
    b"\xe0\x80\x80",
    b"\xe0\x9f\xbf",
    b"\xed\xa0\x80",
    b"\xed\xbf\xbf",
    b"\xef\xbf",
    b"\xf0\x8f\xbf\xbf",
    b"\xf0\x9f\x98",
    b"\xf4\x90\x80\x80",
    b"\xf5\x80\x80\x80",
    b"\xf8\x88\x80\x80\x80",
]
MULTIBYTE: list[bytes] = [c.encode() for c in ("é", "\x80", "\u07ff", "\u0800", "€", "\u2028", "\ufeff", "\ufffd")] + [
    c.encode() for c in ("\U00010000", "😀", "\U0010ffff")
]
STRING_SPELLINGS: list[bytes] = [b"", b"plain", *SHORT_ESCAPES, *ODD_ESCAPES, *RAW_CONTROLS, *BAD_UTF8, *MULTIBYTE]
"""String contents (between the quotes), each alone in the fixed table."""
LITERALS: list[bytes] = [b"true", b"false", b"null", b"tru", b"nul", b"True", b"NULL", b"nulll", b"undefined", b"'x'"]
JSON_WS: list[bytes] = [b"", b"", b" ", b"\n", b"\t", b"\r\n", b"  ", b" \t\n\r "]
BAD_WS: list[bytes] = [b"\x0b", b"\x0c", b"\x00", b"\xc2\xa0", b"\xe2\x80\xa8", BOM]

# ----------------------------------------------------------------------------------------- the strategies
#
# A record is most often valid JSON built from parts the full decoder accepts (so that the fast path has rows to
# keep); otherwise it carries one flaw (a value of another type, an odd number or string, a repeated key, an
# unknown member with a nested value, a byte that is not whitespace, an escaped key, ...) or is damaged as a
# whole (a BOM, garbage after it, truncated, a few bytes mutated, a tombstone, blank, not an object). Values and
# the record's shape are drawn; the cosmetic choices (key order and spelling, whitespace, which field a flaw
# hits) come from a generator seeded by one draw, which keeps generation fast.

JSON_NUMBER = re.compile(rb"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_SHORT: dict[str, bytes] = {
    '"': b'\\"',
    "\\": b"\\\\",
    "/": b"\\/",
    "\b": b"\\b",
    "\f": b"\\f",
    "\n": b"\\n",
    "\r": b"\\r",
    "\t": b"\\t",
}


def _hex_escape(code: int, upper: bool) -> bytes:
    return (f"\\u{code:04X}" if upper else f"\\u{code:04x}").encode()


def _escaped(char: str, upper: bool) -> bytes:
    """`char` as \\u escapes (a surrogate pair beyond the BMP)."""
    code = ord(char)
    if code < 0x10000:
        return _hex_escape(code, upper)
    code -= 0x10000
    return _hex_escape(0xD800 + (code >> 10), upper) + _hex_escape(0xDC00 + (code & 0x3FF), upper)


def _char(rng: random.Random) -> str:
    """A character a JSON string may hold raw: ASCII most often, otherwise any Unicode scalar value."""
    code = rng.choice([rng.randrange(0x20, 0x7F), rng.randrange(0x80, 0x800), rng.randrange(0x800, 0xD800)])
    code = rng.choice([code, code, rng.randrange(0xE000, 0x110000)])
    return "x" if chr(code) in '"\\' else chr(code)


class Spelling:
    """The cosmetic choices of one object's text, from a seed: level 0 (what failures shrink to) writes compact
    JSON; level 1 adds JSON whitespace and, rarely, escaped keys."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.level = seed % 2
        self.escape_keys = self.level == 1 and self.rng.random() < 0.1

    def ws(self) -> bytes:
        return self.rng.choice(JSON_WS) if self.level else b""

    def key(self, name: str) -> bytes:
        """`name` as a JSON string: plainly, or with random characters escaped."""
        if not self.escape_keys:
            return json.dumps(name, ensure_ascii=False).encode()
        out = [b'"']
        for char in name:
            how = self.rng.randrange(3)
            if how == 0 and not (char in '"\\' or ord(char) < 0x20):
                out.append(char.encode())
            elif how == 1 and char in _SHORT:
                out.append(_SHORT[char])
            else:
                out.append(_escaped(char, self.rng.random() < 0.5))
        out.append(b'"')
        return b"".join(out)


SEEDS = st.integers(0, 2**32 - 1)
spellings = SEEDS.map(Spelling)


def _string_piece(rng: random.Random, wild: bool) -> bytes:
    """A piece of a string's content: valid JSON, or (when `wild`) perhaps something JSON or UTF-8 refuses."""
    pick = rng.randrange(10 if wild else 6)
    if pick == 0:
        return "".join(_char(rng) for _ in range(rng.randrange(1, 6))).encode()
    if pick == 1:
        return rng.choice(SHORT_ESCAPES)
    if pick == 2:
        code = rng.choice([rng.randrange(0x80), rng.randrange(0xD800), rng.randrange(0xE000, 0x10000)])
        return rng.choice(
            [_hex_escape(code, rng.random() < 0.5), _escaped(chr(rng.randrange(0x10000, 0x110000)), False)]
        )
    if pick == 3:
        return rng.choice(MULTIBYTE)
    if pick == 4:
        return b"y" * rng.randrange(300)
    if pick == 5:
        return rng.choice([b"a", b"plain", b"with space", b"1", b"{}", b"[,]", b":", b"null"])
    if pick == 6:
        return rng.choice(ODD_ESCAPES)
    if pick == 7:
        return rng.choice(RAW_CONTROLS)
    if pick == 8:
        return rng.choice(BAD_UTF8)
    return rng.choice([b'"', b"\\"])  # a raw quote ends the string early; a lone backslash escapes what follows


def _string_from(seed: int, wild: bool) -> bytes:
    rng = random.Random(seed)
    pieces = [_string_piece(rng, wild) for _ in range(rng.randrange(5))]
    if wild and not any(p in ODD_ESCAPES or p in RAW_CONTROLS or p in BAD_UTF8 for p in pieces):
        pieces.insert(rng.randrange(len(pieces) + 1), _string_piece(rng, wild))
    return b'"' + b"".join(pieces) + b'"'


def _number_from(seed: int, wild: bool) -> bytes:
    """A JSON number: sign, integer part, fraction, exponent (when `wild`, leading zeros or missing digits too)."""
    rng = random.Random(seed)

    def digits(most: int) -> str:
        return "".join(rng.choice("0123456789") for _ in range(rng.randrange(most + 1)))

    lead = rng.choice("123456789")
    whole = rng.choice(["0", lead, lead + digits(3), lead + digits(19), lead + digits(25)])
    if wild:
        whole = rng.choice([whole, "0" + digits(3), ""])
    fraction = rng.choice(["", "", "." + rng.choice("0123456789") + digits(19)])
    exponent = rng.choice(
        ["", "", f"{rng.choice('eE')}{rng.choice(['', '+', '-'])}{rng.choice('0123456789')}{digits(3)}"]
    )
    if wild:
        fraction = rng.choice([fraction, "."])
        exponent = rng.choice([exponent, "e", "e+"])
    return (rng.choice(["", "", "-"]) + whole + fraction + exponent).encode()


CLEAN_NUMBERS: list[bytes] = [n for n in INT_SPELLINGS + FLOAT_SPELLINGS if JSON_NUMBER.fullmatch(n)]
BAD_NUMBERS: list[bytes] = [n for n in INT_SPELLINGS + FLOAT_SPELLINGS if not JSON_NUMBER.fullmatch(n)]
clean_string = st.one_of(st.sampled_from([b'""', b'"a"', b'"plain text"']), SEEDS.map(lambda s: _string_from(s, False)))
clean_number = st.one_of(
    st.sampled_from(CLEAN_NUMBERS),
    st.integers(-(2**70), 2**70).map(lambda v: str(v).encode()),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda v: repr(v).encode()),
    SEEDS.map(lambda s: _number_from(s, False)),
)
clean_scalar = st.one_of(st.sampled_from([b"true", b"false", b"null"]), clean_number, clean_string)
deep_text = st.sampled_from(
    [
        text
        for d in (1, 2, 3, 10, 100, 1500)
        for text in (b"[" * d + b"]" * d, b'{"k":' * d + b"1" + b"}" * d, b"[{" * d + b"}]" * d)
    ]
)
NESTED_KEYS: list[str] = ["k", "id", "é"]


@st.composite
def _array_of(draw: st.DrawFn, items: st.SearchStrategy[bytes]) -> bytes:
    spell = draw(spellings)
    return b"[" + b",".join(spell.ws() + draw(items) + spell.ws() for _ in range(spell.rng.randrange(4))) + b"]"


@st.composite
def _object_of(draw: st.DrawFn, items: st.SearchStrategy[bytes]) -> bytes:
    spell = draw(spellings)
    members = [(spell.key(spell.rng.choice(NESTED_KEYS)), draw(items)) for _ in range(spell.rng.randrange(4))]
    if members and spell.rng.random() < 0.25:
        members.append(members[0])  # a key repeated in a nested object
    return b"{" + b",".join(spell.ws() + k + spell.ws() + b":" + v for k, v in members) + b"}"


wild_scalar = st.one_of(
    clean_scalar,
    st.sampled_from(BAD_NUMBERS + LITERALS),
    SEEDS.map(lambda s: _number_from(s, True)),
    SEEDS.map(lambda s: _string_from(s, True)),
)
_shallow = st.one_of(clean_scalar, _array_of(clean_scalar), _object_of(clean_scalar))
json_text = st.one_of(wild_scalar, _array_of(_shallow), _object_of(_shallow), deep_text)
"""Any JSON value, nested or not (and a few near misses)."""


def _clean_value(data_type: T.DataType) -> st.SearchStrategy[bytes]:
    """JSON the full decoder accepts for a field of `data_type` (or that is in range, as far as integers go)."""
    kind = next(k for k, t in KINDS.items() if t == data_type)
    if kind == "boolean":
        right: st.SearchStrategy[bytes] = st.sampled_from([b"true", b"false"])
    elif kind in INT_BITS:
        limit = 2 ** (INT_BITS[kind] - 1)
        bounds = [b"0", b"-0", str(-limit).encode(), str(limit - 1).encode()]
        right = st.integers(-limit, limit - 1).map(lambda v: str(v).encode()) | st.sampled_from(bounds)
    elif kind == "double":
        right = clean_number
    else:
        right = clean_string
    return st.one_of(right, right, right, right, right, st.just(b"null"))


CLEAN_VALUES: dict[T.DataType, st.SearchStrategy[bytes]] = {t: _clean_value(t) for t in KINDS.values()}
UNKNOWN_NAMES: list[str] = ["ID", "i", "idx", "x", "é2", "😀", "nul\x00", 'q"', "", "a" * 17]
FLAWS = 7


@st.composite
def object_text(draw: st.DrawFn, fields: list[T.StructField], flawed: bool = False) -> bytes:
    """A JSON object over the schema (declared keys mostly present, unknown ones now and then, in any order),
    valid unless `flawed`, when it has one flaw of `FLAWS` kinds."""
    spell = draw(spellings)
    rng = spell.rng
    members: list[tuple[str, bytes]] = [(f.name, draw(CLEAN_VALUES[f.dataType])) for f in fields if rng.random() < 0.9]
    if rng.random() < 0.2:
        members += [(rng.choice(["x", "other", "é"]), draw(clean_scalar)) for _ in range(rng.randrange(1, 3))]
    flaw = rng.randrange(FLAWS) if flawed else -1
    if flaw == 0:  # a declared field holding any value
        members.append((rng.choice(fields).name, draw(json_text)))
        members = list({name: value for name, value in members}.items())
    elif flaw == 1 and members:  # a repeated key, with the same value or another
        name, value = rng.choice(members)
        members.append((name, value if rng.random() < 0.5 else draw(json_text)))
    elif flaw == 2:  # an unknown member with any value and any name
        name = rng.choice(UNKNOWN_NAMES) if rng.random() < 0.7 else "".join(_char(rng) for _ in range(4))
        members.append((name, draw(json_text)))
    elif flaw == 3:  # many unknown members, or a deeply nested one
        many = [(f"u{i}", b"1") for i in range(rng.randrange(10, 20))]
        members += many if rng.random() < 0.5 else [("deep", draw(deep_text))]
    elif flaw == 4:  # keys written with escapes
        spell.escape_keys = True
    rng.shuffle(members)
    parts = [
        spell.ws() + spell.key(name) + spell.ws() + b":" + spell.ws() + value + spell.ws() for name, value in members
    ]
    separator, closing = b",", b"}"
    if flaw == 5:  # a byte that is not JSON whitespace
        bad = rng.choice(BAD_WS)
        if parts:
            at = rng.randrange(len(parts))
            parts[at] = bad + parts[at] if rng.random() < 0.5 else parts[at] + bad
        else:
            closing = bad + closing
    elif flaw == 6:  # a separator or a closing brace wrong
        if rng.random() < 0.5:
            separator = rng.choice([b",,", b";", b""])
        else:
            closing = rng.choice([b",}", b"]", b""])
    return spell.ws() + b"{" + separator.join(parts) + closing + spell.ws()


def _mutated(text: bytes, seed: int) -> bytes:
    """`text` with 1 to 3 bytes inserted, deleted or replaced."""
    rng = random.Random(seed)
    data = bytearray(text)
    for _ in range(rng.randrange(1, 4)):
        at = rng.randrange(len(data) + 1)
        byte = rng.choice(b'"\\{}[],: 0-e.\x00\xff\xc3') if rng.random() < 0.7 else rng.randrange(256)
        how = rng.randrange(3)
        if how == 0 or at == len(data):
            data.insert(at, byte)
        elif how == 1:
            del data[at]
        else:
            data[at] = byte
    return bytes(data)


SHAPES = st.integers(0, 29)
BLANKS = st.sampled_from([b"", b" ", b"\n\t \r", BOM, BOM + b" ", BOM + BOM + b"{}", b"\x00", b"{}"])
GARBAGE = st.sampled_from([b"x", b" x", b"}", b",", b"{}", b"\x00", b"null", BOM, b"\xff", b"/* */", b" \n"])


@st.composite
def record_value(draw: st.DrawFn, fields: list[T.StructField]) -> bytes | None:
    """One Kafka value: half the time a valid object over the schema, otherwise an object with a flaw, a damaged
    one, another JSON value, blank bytes or a tombstone."""
    shape = draw(SHAPES)
    if shape < 15:
        return draw(object_text(fields))
    if shape < 22:
        return draw(object_text(fields, flawed=True))
    if shape == 22:
        return None
    if shape == 23:
        return draw(BLANKS)
    if shape == 24:
        return draw(json_text)  # an array, a number, a string, null... at the top
    text = draw(object_text(fields))
    if shape == 25:
        return _with_bom(text, draw(SEEDS))
    if shape == 26:
        return text + draw(GARBAGE)
    if shape == 27:
        return text[: draw(st.integers(0, max(len(text) - 1, 0)))]
    if shape == 28:
        return text + text
    return _mutated(text, draw(SEEDS))


def _with_bom(text: bytes, seed: int) -> bytes:
    """`text` with a byte order mark: before it (valid), twice, after a space, or before a mutated text."""
    rng = random.Random(seed)
    return rng.choice([BOM + text, BOM + text, BOM + BOM + text, b" " + BOM + text, BOM + _mutated(text, seed)])


FIELDS = st.lists(
    st.tuples(st.sampled_from(NAMES), st.sampled_from(list(KINDS.values())), st.booleans()),
    min_size=1,
    max_size=6,
    unique_by=lambda field: field[0],
)


@st.composite
def batches(draw: st.DrawFn) -> tuple[T.StructType, list[bytes | None]]:
    """A flat schema of 1 to 6 fields (nullable or not) and a batch of up to 8 values for it."""
    schema = T.StructType([T.StructField(n, t, nullable=nullable) for n, t, nullable in draw(FIELDS)])
    return schema, draw(st.lists(record_value(schema.fields), max_size=8))


# ----------------------------------------------------------------------------------------------- helpers


LAYOUTS: list[str] = ["binary", "large_binary", "binary slice", "large_binary slice"]


def layouts(values: list[bytes | None]) -> dict[str, pa.Array]:
    """The same values as the readers may hand them: binary, large binary, and slices of larger arrays."""
    return {
        "binary": pa.array(values, pa.binary()),
        "large_binary": pa.array(values, pa.large_binary()),
        "binary slice": pa.array([b'{"before": 1}', *values], pa.binary()).slice(1),
        "large_binary slice": pa.array([None, *values, b"{}"], pa.large_binary()).slice(1, len(values)),
    }


def assert_same_columns(got: list[pa.Array], expected: list[pa.Array], where: str = "") -> None:
    """Columns strictly equal: type, length, validity, and the values at valid positions (floats bit for bit)."""
    assert len(got) == len(expected), where
    for k, (a, b) in enumerate(zip(got, expected, strict=True)):
        what = f"{where} column {k}: {a.to_pylist()} != {b.to_pylist()}"
        assert a.type == b.type, f"{what} ({a.type} != {b.type})"
        assert len(a) == len(b), what
        valid = b.is_valid().to_numpy(zero_copy_only=False)
        assert np.array_equal(a.is_valid().to_numpy(zero_copy_only=False), valid), what
        if pa.types.is_floating(b.type):
            width = np.dtype(f"int{b.type.bit_width}")
            bits_a = a.fill_null(0).to_numpy(zero_copy_only=False).view(width)[valid]
            bits_b = b.fill_null(0).to_numpy(zero_copy_only=False).view(width)[valid]
            assert np.array_equal(bits_a, bits_b), what
        else:
            assert a.equals(b), what


def assert_paths_agree(
    decoder: ValueDecoder, values: pa.Array, where: str = ""
) -> tuple[list[pa.Array], list[str | None]] | None:
    """`decode(fast=True)` and `decode(fast=False)`: the same columns and reasons (returned), or the same
    exception (None)."""
    outcomes: list[Any] = []
    for fast in (True, False):
        try:
            outcomes.append(decoder.decode(values, fast=fast))
        except Exception as exc:  # the full decoder refusing the schema: the fast path must refuse it too
            outcomes.append(exc)
    fast_outcome, full_outcome = outcomes
    if isinstance(full_outcome, Exception) or isinstance(fast_outcome, Exception):
        assert type(fast_outcome) is type(full_outcome), f"{where}: fast {fast_outcome!r}, full {full_outcome!r}"
        assert str(fast_outcome) == str(full_outcome), where
        return None
    assert_same_columns(fast_outcome[0], full_outcome[0], where)
    assert fast_outcome[1] == full_outcome[1], where
    return cast("tuple[list[pa.Array], list[str | None]]", full_outcome)


def assert_kept_rows_exact(
    schema: T.StructType, values: pa.Array, full: tuple[list[pa.Array], list[str | None]], where: str = ""
) -> None:
    """`decode_flat` keeps only rows the full decoder accepts (or refuses for a required field left null), each
    exactly as the full decoder decodes it, and defers the others (null in its columns)."""
    flat = flat_json.flat_schema(schema)
    assert flat is not None
    found = flat_json.decode_flat(values, flat)
    columns, reasons = full
    deferred = found.deferred
    assert deferred.dtype == np.int64, where
    assert np.array_equal(deferred, np.unique(deferred)) and all(0 <= i < len(values) for i in deferred.tolist())
    assert all(len(c) == len(values) for c in found.columns), where
    kept = pa.array(np.setdiff1d(np.arange(len(values)), deferred), pa.int64())
    assert_same_columns([c.take(kept) for c in found.columns], [c.take(kept) for c in columns], f"{where} kept rows")
    for i in kept.to_pylist():
        assert reasons[i] is None or "is missing or null but the schema requires it" in reasons[i], (where, i)
    for column in found.columns:
        assert column.take(pa.array(deferred, pa.int64())).null_count == len(deferred), where


def _decoder(schema: T.StructType) -> ValueDecoder:
    return ValueDecoder("json", schema)


# ---------------------------------------------------------------------------------------------- properties


@PROPERTIES
@given(batches(), st.sampled_from(LAYOUTS))
def test_fast_and_full_decoding_agree_on_any_batch(batch: tuple[T.StructType, list[bytes | None]], layout: str) -> None:
    """Whatever the bytes and however the array is laid out, the fast path changes neither a column nor a reason,
    and each row it keeps for itself is one the full decoder accepts, exactly as the full decoder makes it."""
    schema, values = batch
    array = layouts(values)[layout]
    full = assert_paths_agree(_decoder(schema), array, layout)
    assert full is not None, layout
    assert_kept_rows_exact(schema, array, full, layout)


def _table(spellings: list[bytes]) -> list[bytes | None]:
    return [b'{"v": ' + s + b"}" for s in spellings] + [None, b'{"v": null}']


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_listed_number_and_string_spelling_agrees(kind: str) -> None:
    """Each number and string spelling of the tables, alone as a field of each type, decodes alike on both paths."""
    decoder = _decoder(T.StructType([T.StructField("v", KINDS[kind])]))
    spellings = INT_SPELLINGS + FLOAT_SPELLINGS + [b'"' + s + b'"' for s in STRING_SPELLINGS] + LITERALS
    for layout, array in layouts(_table(spellings)).items():
        assert_paths_agree(decoder, array, layout)
    unknown = [b'{"v": null, "u": ' + s + b"}" for s in spellings]  # and as an undeclared member's value
    for layout, array in layouts(unknown).items():
        assert_paths_agree(decoder, array, layout)


# ------------------------------------------------------------------------------------------------ examples

EXAMPLE = T.StructType(
    [
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("name", T.StringType()),
        T.StructField("small", T.ByteType()),
        T.StructField("short", T.ShortType()),
        T.StructField("count", T.IntegerType()),
        T.StructField("ratio", T.DoubleType()),
        T.StructField("ok", T.BooleanType()),
    ]
)


def _plain(i: int) -> bytes:
    record: dict[str, object] = {
        "id": i * 7919 - 2**62 if i % 3 else 2**63 - 1 - i,
        "name": f"user {i}" if i % 5 else None,
        "small": (i % 256) - 128,
        "short": -(2**15) + i,
        "count": 2**31 - 1 - i,
        "ratio": i / 7 - 3 if i % 4 else -0.0,
        "ok": i % 2 == 0,
    }
    if i % 6 == 0:
        del record["count"]  # missing: a null
    if i % 7 == 0:
        record["extra"] = "unknown" if i % 2 else 1.5  # an undeclared member with a scalar value
    keys = sorted(record) if i % 2 else list(record)
    return json.dumps({k: record[k] for k in keys}).encode()


def test_plain_records_are_decoded_by_the_fast_path_alone() -> None:
    """Plain flat records of an eligible schema leave nothing to the full decoder, and decode as it decodes them."""
    flat = flat_json.flat_schema(EXAMPLE)
    assert flat is not None
    values = [_plain(i) for i in range(300)]
    for layout, array in layouts(values).items():
        assert flat_json.decode_flat(array, flat).deferred.tolist() == [], layout
        assert_paths_agree(_decoder(EXAMPLE), array, layout)
        columns, reasons = _decoder(EXAMPLE).decode(array)
        assert reasons == [None] * len(values)
        assert math.copysign(1.0, columns[5][0].as_py()) == -1.0  # row 0's ratio is -0.0, kept as such


@pytest.mark.parametrize(
    "data_type",
    [
        T.TimestampType(),
        T.DateType(),
        T.FloatType(),
        T.DecimalType(10, 2),
        T.BinaryType(),
        T.StructType([T.StructField("x", T.LongType())]),
        T.ArrayType(T.LongType()),
    ],
)
def test_a_schema_with_another_type_has_no_flat_form(data_type: T.DataType) -> None:
    """One field of a type the fast path does not decode leaves the whole schema to the full decoder."""
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("other", data_type)])
    assert flat_json.flat_schema(schema) is None
    assert flat_json.flat_schema(T.StructType([])) is None


def test_a_schema_with_a_timestamp_decodes_alike_on_both_paths() -> None:
    """`fast=True` on a schema the fast path cannot take is the full decoder."""
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("at", T.TimestampType())])
    values = [b'{"id": 1, "at": "2026-01-15T10:00:00Z"}', b'{"id": 1, "id": 2}', None, b'{"at": "2026-01-15"}']
    assert_paths_agree(_decoder(schema), pa.array(values, pa.binary()))


DEFERRED: list[tuple[bytes | None, str | None]] = [
    (b'{"id": 1, "id": 2}', "duplicate JSON key 'id' in the object at `$`: a key may appear only once"),
    (b'{"id": 1, "\\u0069d": 2}', "duplicate JSON key 'id' in the object at `$`: a key may appear only once"),
    (b'{"id": 1, "x": 1, "x": 2}', "duplicate JSON key 'x' in the object at `$`: a key may appear only once"),
    (None, "null value (tombstone): nothing to decode as JSON"),
    (b'{"id": 1, "extra": {"deep": [1, {"k": null}]}}', None),
    (b'{"id": 1, "extra": {"k": 1, "k": 2}}', "duplicate JSON key 'k' in the object at `$.extra`"),
    (b'{"id": "1"}', "JSON does not match the value schema struct<id:bigint,"),
    (b'{"id": 1, "ok": "true"}', "Expected `bool | null`, got `str` - at `$.ok`"),
    (b'{"id": 1, "small": 128}', "Expected `int` <= 127 - at `$.small`"),
    (b'{"id": 9223372036854775808}', "Expected `int` <= 9223372036854775807 - at `$.id`"),
    (b'{"id": 1, "short": 01}', "value is not valid JSON: JSON is malformed: invalid number"),
    (b'{"id": 1, "count": 1.0}', "Expected `int | null`, got `float` - at `$.count`"),
    (b'{"id": 1, "ratio": 1e400}', "Number out of range - at `$.ratio`"),
    (b'{"id": 1, "ratio": 5e-324}', None),
    (b'{"id": 1, "name": "\xff"}', "value is not valid UTF-8"),
    (b'{"id": 1, "name": "\\ud800"}', "value is not valid JSON"),  # a lone surrogate
    (b'{"id": 1, "name": "\\q"}', "value is not valid JSON: JSON is malformed: invalid escape character"),
    (b'\xef\xbb\xbf{"id": 1}', None),
    (b" \n ", "value is not valid JSON: it is empty or blank"),
    (b'{"id": 1} x', "value is not valid JSON: JSON is malformed: trailing characters"),
    (b"[1]", "value is not a JSON object"),
]


@pytest.mark.parametrize(("value", "reason"), DEFERRED)
def test_unusual_records_are_deferred_to_the_full_decoder(value: bytes | None, reason: str | None) -> None:
    """A record the fast path cannot be sure of is deferred, between plain ones it keeps, and gets the full
    decoder's answer."""
    flat = flat_json.flat_schema(EXAMPLE)
    assert flat is not None
    array = pa.array([_plain(1), value, _plain(2)], pa.binary())
    assert flat_json.decode_flat(array, flat).deferred.tolist() == [1]
    columns, reasons = _decoder(EXAMPLE).decode(array)
    assert reasons[0] is None and reasons[2] is None
    if reason is None:
        assert reasons[1] is None
        assert columns[0][1].as_py() == 1
    else:
        assert reasons[1] is not None and reason in reasons[1], reasons[1]
    assert_paths_agree(_decoder(EXAMPLE), array)


def test_a_large_batch_mixing_kept_and_deferred_records_agrees() -> None:
    """Thousands of records (many null names, repeats hiding behind nulls, mutated texts, every deferred case):
    the full decoder's batch-wide shortcuts see only the deferred rows on the fast path, with the same result."""
    rng = random.Random(11)
    tricky = [
        b'{"id": 1, "name": null, "name": "b"}',
        b'{"id": 2, "name": "a", "name": "a"}',
        b'{"id": 3, "name": "say \\"hi\\"", "name": "x"}',
        b'{"id": 4, "q\\u0022": 1, "q\\"": 2}',
        b'{"id": 5, "name": "\\u0022"}',
        b'{"id": 6, "x": [{"k": 1, "k": 2}]}',
    ]
    values: list[bytes | None] = []
    for i in range(4000):
        pick = rng.random()
        if pick < 0.7:
            values.append(_plain(i))
        elif pick < 0.8:
            values.append(rng.choice(DEFERRED)[0])
        elif pick < 0.9:
            values.append(rng.choice(tricky))
        else:
            values.append(_mutated(_plain(i), i))
    for layout, array in layouts(values).items():
        full = assert_paths_agree(_decoder(EXAMPLE), array, layout)
        assert full is not None
        assert_kept_rows_exact(EXAMPLE, array, full, layout)
        assert sum(r is not None and r.startswith("duplicate JSON key") for r in full[1]) > 100


def test_a_required_field_left_null_is_refused_on_both_paths() -> None:
    """A missing or null non-nullable field is named alike whether the fast path kept the record or not."""
    values = [b'{"name": "x"}', b'{"id": null}', b'{"id": null, "extra": [1]}', b'{"id": 3}']
    columns, reasons = _decoder(EXAMPLE).decode(pa.array(values, pa.binary()))
    assert reasons[:3] == ["field 'id' is missing or null but the schema requires it"] * 3
    assert reasons[3] is None and columns[0][3].as_py() == 3
    assert_paths_agree(_decoder(EXAMPLE), pa.array(values, pa.binary()))


@pytest.mark.parametrize("name", REFUSED_NAMES)
def test_a_name_the_full_decoder_refuses_is_refused_on_both_paths(name: str) -> None:
    """The full decoder raises for a field name msgspec cannot use; the fast path must not decode such a schema
    silently when it happens to defer nothing."""
    schema = T.StructType([T.StructField(name, T.LongType()), T.StructField("id", T.LongType())])
    for values in ([b'{"id": 1}'], [b'{"id": 1}', None], []):
        assert_paths_agree(_decoder(schema), pa.array(values, pa.binary()), repr(values))


def test_wide_and_long_strings_grow_the_string_buffers() -> None:
    """Forty string columns and values from empty to 100 kB (the C code grows each column's buffer as it goes):
    the same columns and reasons as the full decoder, a record with a broken escape deferred in the middle."""
    fields = [T.StructField(f"s{k}", T.StringType()) for k in range(40)]
    schema = T.StructType([T.StructField("id", T.LongType()), *fields])
    records: list[bytes | None] = []
    for i in range(60):
        size = (i * 1733) % 100_000
        body = {"id": i, **{f"s{k}": ("é" * (size // 2 if k == i % 40 else k)) for k in range(40)}}
        records.append(json.dumps(body, ensure_ascii=i % 2 == 0).encode())
    records[30] = records[30][:-2] + b'\\x"}'
    values = pa.array(records, pa.large_binary())
    decoder = ValueDecoder("json", schema)
    assert_paths_agree(decoder, values, "wide")
    batch = flat_json.decode_flat(values, flat_json.flat_schema(schema))
    assert 30 in batch.deferred.tolist() and len(batch.deferred) < 5
