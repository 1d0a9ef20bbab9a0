"""Which reader type a writer type is read into: the matching rules of Avro schema resolution, decided per
pair of types, not per record.

A writer type *matches* a reader type when both are the same primitive or the writer's promotes to the
reader's (int -> long, float, double; long -> float, double; float -> double; string <-> bytes), both are
arrays or maps whose items match, or both are the same kind of named type with the same unqualified name (or
the writer's name among the reader type's aliases; fixed also of the same size). A union on either side
matches: its branches are resolved one by one.

Outside unions Cohort reads more than that (`reads`): a record of any name by its fields (a reader schema
derived from Spark columns names its records itself), an enum as a string, fixed as bytes. A union reader
takes a writer type into its first branch that matches; only when none does, into its first branch that
Cohort reads it as; a writer branch with neither is refused for the records that took it.
"""

from __future__ import annotations

from collections.abc import Sequence

from cohort.pipelines.formats.avro.schema import (
    AvroArray,
    AvroEnum,
    AvroFixed,
    AvroMap,
    AvroNode,
    AvroPrimitive,
    AvroRecord,
    AvroUnion,
)

__all__ = ["PROMOTIONS", "AvroResolutionError", "branch_plan", "matches", "reads"]


class AvroResolutionError(ValueError):
    """The writer schema cannot be read as the reader schema (every record written with it is refused)."""


PROMOTIONS: dict[str, tuple[str, ...]] = {
    "null": ("null",),
    "boolean": ("boolean",),
    "int": ("int", "long", "float", "double"),
    "long": ("long", "float", "double"),
    "float": ("float", "double"),
    "double": ("double",),
    "bytes": ("bytes", "string"),
    "string": ("string", "bytes"),
}
"""The reader primitives each writer primitive is read as."""


def matches(w: AvroNode, r: AvroNode) -> bool:
    """Whether writer type `w` matches reader type `r` by Avro's rules (the module doc)."""
    return _match(w, r, strict=True)


def reads(w: AvroNode, r: AvroNode) -> bool:
    """Whether Cohort reads writer type `w` as reader type `r` outside a union: a match, or a record of another
    name, an enum as a string or fixed as bytes."""
    return _match(w, r, strict=False)


def _match(w: AvroNode, r: AvroNode, *, strict: bool) -> bool:
    if isinstance(w, AvroUnion) or isinstance(r, AvroUnion):
        return True
    if isinstance(w, AvroPrimitive):
        return isinstance(r, AvroPrimitive) and r.kind in PROMOTIONS[w.kind]
    if isinstance(w, AvroArray):
        return isinstance(r, AvroArray) and _match(w.items, r.items, strict=strict)
    if isinstance(w, AvroMap):
        return isinstance(r, AvroMap) and _match(w.values, r.values, strict=strict)
    if isinstance(w, AvroRecord):
        return isinstance(r, AvroRecord) and (not strict or _same_name(w, r))
    if isinstance(w, AvroEnum):
        if isinstance(r, AvroEnum):
            return not strict or _same_name(w, r)
        return not strict and isinstance(r, AvroPrimitive) and r.kind == "string"
    if isinstance(r, AvroFixed):
        return r.size == w.size and (not strict or _same_name(w, r))
    return not strict and isinstance(r, AvroPrimitive) and r.kind == "bytes"


def _same_name(w: AvroRecord | AvroEnum | AvroFixed, r: AvroRecord | AvroEnum | AvroFixed) -> bool:
    short = w.name.rsplit(".", 1)[-1]
    return short == r.name.rsplit(".", 1)[-1] or w.name in r.aliases or short in r.aliases


def branch_plan(written: Sequence[AvroNode], reader: Sequence[AvroNode]) -> tuple[int | None, ...]:
    """For each writer branch, the index of the reader branch it is read into (None: it cannot be read).

    `reader` is a union's branches, or the one reader type when the reader is not a union (a writer branch
    is then read into it if Cohort `reads` it so: the first branch that matches, else the first Cohort reads)."""
    return tuple(_first(w, reader) for w in written)


def _first(w: AvroNode, reader: Sequence[AvroNode]) -> int | None:
    for test in (matches, reads):
        for j, r in enumerate(reader):
            if test(w, r):
                return j
    return None
