"""Parquet written by the reading tasks themselves (pyarrow), into the sink's staging layout.

When the batch has no user transform and pyarrow can write to the sink's file system (local paths and
`file://`, HDFS, S3, GCS, ...), each reading task writes its span's sink and quarantine rows straight to
`<root>/_staging/<attempt>/topic=<t>/partition=<p>/part-<from>-<until>.parquet`, the same staging layout a
Spark write produces; publishing, counting and committing are unchanged (cohort.pipelines.sink.layout,
cohort.pipelines.batch.run).
No record crosses into the JVM. A file appears under its final name only when complete, so a task that dies
mid-write leaves nothing a count or a reader sees: on a local disk (or HDFS) it is written under a hidden temporary
name, then moved; on an object store, where an upload appears whole or not at all and a move is a copy of every
byte, it is uploaded straight to its final name once complete (`_Spool`: kept in memory, one upload at the commit;
a file that outgrows `SPOOL_BYTES` goes the temporary way), and no directory marker is made.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cohort.pipelines.formats.decode import RAW_VALUE_COLUMN, REASON_COLUMN
from cohort.pipelines.sink.counts import OutputShape
from cohort.pipelines.sink.digest import side
from cohort.pipelines.sink.layout import SinkError, StagedDirs
from cohort.pipelines.storage.moves import is_object_store
from cohort.pipelines.tasks.arrow_transform import ArrowTransform, apply_arrow_transform
from cohort.pipelines.tasks.checked import RecordChecker
from cohort.pipelines.tasks.reader import OffsetSpan
from cohort.pipelines.tasks.written import StagedFile, WrittenSpan

__all__ = [
    "SPOOL_BYTES",
    "ArrowFs",
    "ArrowStagedWriter",
    "SpanFile",
    "arrow_compression",
    "arrow_filesystem",
    "span_file_name",
]

SPOOL_BYTES = 64 << 20
"""The largest staged file kept in memory on an object store before its one upload (a larger one is uploaded as a
temporary object while it is written, then copied to its name): a task's memory stays bounded."""

ArrowCodec = Literal["snappy", "gzip", "zstd", "lz4", "none"]
"""A Parquet codec name pyarrow's writer takes (and the tasks may write)."""

_COMPRESSION: dict[str, ArrowCodec] = {
    "snappy": "snappy",
    "gzip": "gzip",
    "zstd": "zstd",
    "lz4": "lz4",
    "none": "none",
    "uncompressed": "none",
}


def arrow_compression(codec: str) -> ArrowCodec | None:
    """pyarrow's name for a Spark Parquet codec, None when the tasks must not write it: pyarrow has no such
    codec, or Spark's reader could not read it back (brotli needs a codec jar Spark does not ship)."""
    return _COMPRESSION.get(codec.lower())


def arrow_filesystem(uri: str) -> tuple[pafs.FileSystem, str] | None:
    """(file system, path) of a sink URI for pyarrow, None when pyarrow cannot write there (the batch then
    writes through Spark). Plain paths are local, relative ones resolved against the working directory,
    as Spark resolves them. On S3 a stream opens when it first uploads (`allow_delayed_open`): an object smaller
    than a part, as every staged file of a batch of ordinary size, is then one PUT, not a multipart upload's
    three requests (its errors come at the stream's close, where every write here ends)."""
    if "://" not in uri:
        if ":" in uri.split("/", 1)[0]:  # a Hadoop URI such as file:/x or s3a:/x: leave it to Spark
            return None
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    if uri.startswith("s3://") and "?" not in uri:
        uri += "?allow_delayed_open=true"
    try:
        return pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError):
        return None


@dataclass(frozen=True)
class ArrowStagedWriter:
    """Writes the checked rows of spans into one attempt's staging areas (pickled into the tasks)."""

    sink: StagedDirs
    quarantine: StagedDirs
    attempt: str
    compression: str
    checker: RecordChecker
    arrow_transform: ArrowTransform | None = None

    def write_span(self, span: OffsetSpan, checked: Iterator[pa.RecordBatch]) -> WrittenSpan:
        """Write every checked batch of `span`: valid rows (through the Arrow transform, if any) to the sink
        staging, failed ones to quarantine; what was written (`WrittenSpan`: the files, their footers, the span's
        digest sides and sink shape, so the driver need not read them back)."""
        codec = arrow_compression(self.compression)
        name = span_file_name(span)
        sink = SpanFile(self.sink.staged_range_dir(self.attempt, span.topic, span.partition), name, codec)
        quarantine = SpanFile(self.quarantine.staged_range_dir(self.attempt, span.topic, span.partition), name, codec)
        bounds = (span.from_offset, span.until_offset)
        try:
            for batch in checked:
                failed = batch.column(REASON_COLUMN).null_count < batch.num_rows
                rows = self.checker.sink_rows(batch)
                if self.arrow_transform is not None:
                    rows = apply_arrow_transform(self.arrow_transform, rows, span.topic, span.partition)
                sink.write(rows, rows.schema)
                if failed:
                    quarantine.write(self.checker.quarantine_rows(batch), self.checker.quarantine_schema)
            sink_file, sink_rows = sink.commit(digest=True)
            quarantine_file, quarantine_rows = quarantine.commit(digest=True)
        finally:
            sink.abandon()
            quarantine.abandon()
        return WrittenSpan(
            span.topic,
            span.partition,
            *bounds,
            sink=sink_file,
            quarantine=quarantine_file,
            sink_side=None if sink_rows is None else side(sink_rows, *bounds),
            quarantine_side=None if quarantine_rows is None else side(quarantine_rows, *bounds),
            shape=None if sink_rows is None else OutputShape.of_rows(sink_rows),
        )

    def pass_valid(self, span: OffsetSpan, checked: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Write `span`'s failed rows to the quarantine staging and yield its valid rows (checked batches without
        their raw values) for Spark to transform and write: the quarantine never enters the JVM."""
        quarantine = SpanFile(
            self.quarantine.staged_range_dir(self.attempt, span.topic, span.partition),
            span_file_name(span),
            arrow_compression(self.compression),
        )
        try:
            for batch in checked:
                valid = batch.column(REASON_COLUMN).is_null()
                if batch.column(REASON_COLUMN).null_count < batch.num_rows:
                    quarantine.write(self.checker.quarantine_rows(batch), self.checker.quarantine_schema)
                    batch = batch.filter(valid)
                if batch.num_rows:
                    raw = batch.schema.get_field_index(RAW_VALUE_COLUMN)
                    yield batch.set_column(raw, RAW_VALUE_COLUMN, pa.nulls(batch.num_rows, pa.binary()))
            quarantine.commit()
        finally:
            quarantine.abandon()


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The Parquet paths of the string columns (struct fields included): the columns dictionary encoding is
    for. Numbers, timestamps and bytes (offsets, ids, keys, raw values: mostly distinct) are written plain,
    where building a dictionary for each page costs more time than it saves bytes."""
    found: list[str] = []

    def visit(field: pa.Field[Any], prefix: str) -> None:
        path = f"{prefix}{field.name}"
        if pa.types.is_struct(field.type):
            for child in field.type:
                visit(child, f"{path}.")
        elif pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            found.append(path)

    for field in schema:
        visit(field, "")
    return found


def span_file_name(span: OffsetSpan) -> str:
    """The name (without `.parquet`) of a reading task's file for `span`: a retried task rewrites the same name."""
    return f"part-{span.from_offset}-{span.until_offset}"


class _Spool:
    """The bytes of one file on an object store: in memory until `commit` uploads them to `final` in one upload (an
    object appears only then, whole), or, past `SPOOL_BYTES`, streamed to `temporary` and copied to `final` at the
    commit. A file abandoned before its commit leaves nothing at `final`."""

    def __init__(self, fs: pafs.FileSystem, final: str, temporary: str) -> None:
        self._fs, self._final, self._temporary = fs, final, temporary
        self._memory: pa.BufferOutputStream | None = pa.BufferOutputStream()
        self._stream: Any = None
        self._size = 0
        self.closed = False

    def write(self, data: Any) -> int:
        size = len(memoryview(data).cast("B"))
        if self._memory is not None and self._size + size > SPOOL_BYTES:
            self._stream = self._fs.open_output_stream(self._temporary)
            self._stream.write(self._memory.getvalue())
            self._memory = None
        (self._memory if self._memory is not None else self._stream).write(data)
        self._size += size
        return size

    def tell(self) -> int:
        return self._size

    @property
    def in_memory(self) -> pa.Buffer | None:
        """The bytes written so far while they are all in memory (None once streamed to the temporary object)."""
        return None if self._memory is None else self._memory.getvalue()

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def commit(self) -> None:
        """Make the written bytes the object `final`."""
        if self._memory is not None:
            with self._fs.open_output_stream(self._final) as out:
                out.write(self._memory.getvalue())
        else:
            self._stream.close()
            self._fs.move(self._temporary, self._final)

    def abandon(self) -> None:
        """Drop the bytes: nothing was uploaded to `final` (a temporary object is deleted)."""
        if self._stream is not None:
            self._stream.close()
            self._fs.delete_file(self._temporary)
        self._memory = self._stream = None


class SpanFile:
    """One task's Parquet file `<name>.parquet` in one staging directory, opened on the first row."""

    def __init__(self, directory: str, name: str, compression: ArrowCodec | None) -> None:
        resolved = arrow_filesystem(directory)
        if resolved is None:
            raise ValueError(f"pyarrow cannot write to {directory}")
        self.directory = directory
        self._fs, self._dir = resolved
        self._name = f"{name}.parquet"
        self._temporary = f"{self._dir}/.{self._name}.{uuid.uuid4().hex}.tmp"
        self._compression = compression
        self._writer: Any = None
        self._spool: _Spool | None = None
        self._footers: list[pq.FileMetaData] = []

    def write(self, rows: pa.Table, schema: pa.Schema) -> None:
        if not rows.num_rows:
            return
        if self._writer is not None and schema != self._writer.schema:
            raise SinkError(
                f"rows for {self.directory} changed schema within one file (a transform must return one schema for "
                f"every batch): {self._writer.schema} became {schema}"
            )
        if self._writer is None:
            self._writer = self._open(schema)
        self._writer.write_table(rows)

    def _open(self, schema: pa.Schema) -> Any:
        """The Parquet writer: into a `_Spool` on an object store (no directory to make), else into the temporary
        file (its directory made first)."""
        sink: Any = self._temporary
        if is_object_store(self._fs):
            sink = self._spool = _Spool(self._fs, f"{self._dir}/{self._name}", self._temporary)
        else:
            self._fs.create_dir(self._dir, recursive=True)
        compression = self._compression or "none"  # None: uncompressed, as pyarrow reads None
        return pq.ParquetWriter(
            sink,
            schema,
            filesystem=None if self._spool is not None else self._fs,
            compression=compression,
            use_dictionary=dictionary_columns(schema),  # type: ignore[arg-type]  # (stubs: bool only)
            metadata_collector=self._footers,
        )

    def commit(self, *, digest: bool = False) -> tuple[StagedFile | None, list[pa.Table] | None]:
        """Close the file and make it appear under its final name (nothing happens when no row was written); the
        file written (None without rows), and with `digest` its rows as read back from the bytes written (from
        memory, or the local file: no round trip), [] without rows, None when no copy was at hand (a file that
        outgrew the spool)."""
        if self._writer is None:
            return None, []
        self._writer.close()
        self._writer = None
        footer = self._footers[-1]
        final = f"{self._dir}/{self._name}"
        rows: list[pa.Table] | None = None
        if self._spool is not None:
            spool, self._spool = self._spool, None
            written = spool.in_memory
            if digest and written is not None:
                rows = [pq.read_table(pa.BufferReader(written))]
            size = spool.tell()
            spool.commit()
        else:
            size = self._fs.get_file_info(self._temporary).size
            if digest:
                rows = [pq.read_table(self._temporary, filesystem=self._fs)]
            self._fs.move(self._temporary, final)
        return StagedFile(self.directory, self._name, int(size), footer), rows

    def abandon(self) -> None:
        """After a failure: close and delete the temporary file, if any (on an object store: drop the spool, so no
        object of a partial file is ever uploaded under the final name)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            if self._spool is not None:
                self._spool.abandon()
                self._spool = None
            else:
                self._fs.delete_file(self._temporary)


class ArrowFs:
    """The sink's file operations (those of cohort.pipelines.sink.layout.HadoopFs) through pyarrow, for roots pyarrow
    can reach: no JVM round trip per call, and footers counted without the JVM's Parquet reader."""

    def _resolve(self, uri: str) -> tuple[pafs.FileSystem, str]:
        resolved = arrow_filesystem(uri)
        if resolved is None:
            raise SinkError(f"pyarrow cannot reach {uri}")
        return resolved

    def _info(self, uri: str) -> tuple[pafs.FileSystem, str, pafs.FileInfo]:
        fs, path = self._resolve(uri)
        return fs, path, fs.get_file_info(path)

    def exists(self, uri: str) -> bool:
        return self._info(uri)[2].type != pafs.FileType.NotFound

    def list_names(self, uri: str) -> list[str]:
        """Names directly under `uri`; [] when it does not exist or is a file. One listing (on an object store one
        request: no existence check first)."""
        fs, path = self._resolve(uri)
        try:
            found = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except NotADirectoryError:
            return []
        return sorted(entry.base_name for entry in found)

    def delete(self, uri: str) -> None:
        fs, path, info = self._info(uri)
        if info.type == pafs.FileType.Directory:
            fs.delete_dir(path)
        elif info.type != pafs.FileType.NotFound:
            fs.delete_file(path)

    def touch(self, uri: str) -> None:
        fs, path = self._resolve(uri)
        with fs.open_output_stream(path):
            pass

    def rename(self, source: str, target: str) -> None:
        """Move `source` to `target`, which must not exist; its parent is created."""
        fs, src = self._resolve(source)
        _, dst, info = self._info(target)
        if info.type != pafs.FileType.NotFound:
            raise SinkError(f"cannot move {source} to {target}: the target exists")
        fs.create_dir(dst.rsplit("/", 1)[0], recursive=True)
        fs.move(src, dst)

    def make_dirs(self, uri: str) -> None:
        fs, path = self._resolve(uri)
        fs.create_dir(path, recursive=True)

    def _local(self, uri: str) -> str | None:
        fs, path = self._resolve(uri)
        return path if isinstance(fs, pafs.LocalFileSystem) else None

    def can_swap(self, uri: str) -> bool:
        """Whether directories at `uri` can be swapped atomically (local file systems with renameat2)."""
        path = self._local(uri)
        while path and not os.path.isdir(path):
            path = os.path.dirname(path) if os.path.dirname(path) != path else None
        from cohort.pipelines.sink.swap import exchange_supported  # the driver's, for replays

        return bool(path) and exchange_supported(path)  # type: ignore[arg-type]

    def swap(self, first: str, second: str) -> None:
        """Swap two existing directories in one step (see cohort.pipelines.sink.swap)."""
        a, b = self._local(first), self._local(second)
        if a is None or b is None:
            raise SinkError(f"cannot swap {first} and {second}: not on a local file system")
        from cohort.pipelines.sink.swap import exchange

        try:
            exchange(a, b)
        except OSError as exc:
            raise SinkError(str(exc)) from exc

    def link_tree(self, source: str, target: str) -> None:
        """`source` again at `target`, its files hard-linked (local file systems)."""
        a, b = self._local(source), self._local(target)
        if a is None or b is None:
            raise SinkError(f"cannot link {source} to {target}: not on a local file system")
        from cohort.pipelines.sink.swap import link_tree

        link_tree(a, b)

    def write_offset_slice(self, source: str, target: str, from_offset: int, until_offset: int, *, name: str) -> int:
        """The rows of range directory `source` with offsets in [from, until) as `target/name`; their count."""
        a, b = self._local(source), self._local(target)
        if a is None or b is None:
            if self.object_store(source) and self.object_store(target):
                return self.merge_parquet(self._data_files(source), f"{target}/{name}", (from_offset, until_offset))
            raise SinkError(f"cannot rewrite {source}: not on a local file system")
        from cohort.pipelines.sink.swap import write_offset_slice

        return write_offset_slice(a, b, from_offset, until_offset, name=name)

    def object_store(self, uri: str) -> bool:
        """Whether `uri` is on an object store (S3, GCS), where a rename is a copy and a delete: ranges are then
        published one object each (cohort.pipelines.sink.object_publish)."""
        return is_object_store(self._resolve(uri)[0])

    def copy_file(self, source: str, target: str) -> None:
        """Copy one file (on an object store: one server-side copy; the target appears whole or not at all)."""
        fs, src = self._resolve(source)
        fs.copy_file(src, self._resolve(target)[1])

    def _data_files(self, uri: str) -> list[str]:
        return [f"{uri}/{n}" for n in self.list_names(uri) if n.endswith(".parquet") and n[0] not in "_."]

    def merge_parquet(self, sources: list[str], target: str, offsets: tuple[int, int] | None = None) -> int:
        """Write the rows of Parquet files `sources` (those with `kafka.offset` in `offsets`, when given) as one
        file `target`, with the first source's codec; the rows written (no file when none). On an object store the
        file appears only when complete (one upload)."""
        import pyarrow.compute as pc

        if not sources:
            return 0
        fs, _ = self._resolve(sources[0])
        paths = [self._resolve(s)[1] for s in sources]
        tables = [pq.read_table(path, filesystem=fs) for path in paths]
        table = pa.concat_tables(tables, promote_options="default")
        if offsets is not None:
            offset = pc.field("kafka", "offset")
            table = table.filter((offset >= offsets[0]) & (offset < offsets[1]))
        if table.num_rows == 0:
            return 0
        with fs.open_input_file(paths[0]) as handle:
            metadata = pq.ParquetFile(handle).metadata
        codec = metadata.row_group(0).column(0).compression.lower() if metadata.num_row_groups else "snappy"
        pq.write_table(
            table,
            self._resolve(target)[1],
            filesystem=fs,
            compression=arrow_compression(codec) or "none",
            use_dictionary=dictionary_columns(table.schema),  # type: ignore[arg-type]  # (stubs: bool only)
        )
        return table.num_rows

    def offset_shape(self, uri: str) -> OutputShape:
        """The rows of the Parquet files directly under `uri` by their `kafka.offset` (that column only is read).
        Driver side: its imports (pyarrow.dataset loads pandas) stay out of the reading tasks."""
        import pyarrow.dataset as ds

        fs, path = self._resolve(uri)
        files = [f"{path}/{n}" for n in self.list_names(uri) if n.endswith(".parquet") and n[0] not in "_."]
        if not files:
            return OutputShape(0, 0)
        table = ds.dataset(files, filesystem=fs, format="parquet").to_table(columns={"o": pc.field("kafka", "offset")})
        return OutputShape.of(table.column("o"))

    def parquet_record_count(self, uri: str) -> int:
        """Rows in the Parquet files directly under `uri`, from their footers (no data is read)."""
        total = 0
        fs, path = self._resolve(uri)
        for name in self.list_names(uri):
            if name.startswith(("_", ".")) or not name.endswith(".parquet"):
                continue
            with fs.open_input_file(f"{path}/{name}") as handle:
                total += pq.ParquetFile(handle).metadata.num_rows
        return total
