"""Content digests of what a batch wrote for an offset range, to tell a replay that rewrites the same output
from one whose output changed (a transform or a schema changed in between).

A digest covers the sink rows and the quarantine rows of the range's offsets: each side's rows sorted by
`kafka.offset`, in one Arrow IPC stream without schema metadata (so how the files were split or which
writer's footer notes they carry does not count, only the columns, their types and the values), hashed with
SHA-256. The same records through the same decoding, checks and transform give the same digest, whatever the
batch boundaries were. The reading tasks digest the files they write (cohort.pipelines.tasks.writer), the driver
what it reads back (cohort.pipelines.replay.check): this module runs on both, with pyarrow alone.

Example:
    >>> import pyarrow as pa
    >>> rows = pa.table({"kafka": [{"offset": 2}, {"offset": 1}], "v": ["b", "a"]})
    >>> digest([rows], [], 0, 10) == digest([rows.take([1, 0])], [], 0, 10)
    True
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["combine", "digest", "side"]


def side(tables: Sequence[pa.Table], from_offset: int, until_offset: int) -> bytes:
    """The SHA-256 of one side's rows with offsets in [from, until), sorted by offset (a reading task computes it for
    the file it wrote: cohort.pipelines.tasks.writer)."""
    hasher = hashlib.sha256()
    if not tables:
        return hasher.digest()
    table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    bounds = pc.min_max(pc.struct_field(table.column("kafka"), "offset"))
    if table.num_rows and not (from_offset <= bounds["min"].as_py() and bounds["max"].as_py() < until_offset):
        offset = pc.field("kafka", "offset")
        table = table.filter((offset >= from_offset) & (offset < until_offset))  # only the window's rows
    if table.num_rows == 0:
        return hasher.digest()
    offsets = pc.struct_field(table.column("kafka"), "offset")
    if len(offsets) > 1 and not pc.all(pc.greater(offsets[1:], offsets[:-1])).as_py():
        table = table.take(pc.sort_indices(offsets))
    plain = pa.schema([field.remove_metadata() for field in table.schema])  # zero-copy: same buffers
    columns = [column if column.num_chunks == 1 else column.combine_chunks() for column in table.columns]
    table = pa.Table.from_arrays(columns, schema=plain)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, plain) as stream:
        stream.write_table(table)
    hasher.update(sink.getvalue())
    return hasher.digest()


def digest(sink: Sequence[pa.Table], quarantine: Sequence[pa.Table], from_offset: int, until_offset: int) -> str:
    """The digest (64 hex digits) of a range's sink and quarantine rows with offsets in [from, until)."""
    return combine(side(sink, from_offset, until_offset), side(quarantine, from_offset, until_offset))


def combine(sink_side: bytes, quarantine_side: bytes) -> str:
    """The digest (64 hex digits) of a range from its two sides' `side`."""
    return hashlib.sha256(sink_side + quarantine_side).hexdigest()
