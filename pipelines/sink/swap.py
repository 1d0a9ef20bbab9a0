"""Replacing a partition's output in one step on a local file system, for replays.

A replay writes offsets the sink already holds. Readers must see, for those offsets, the old records or the
new ones, never both and never neither. Plain renames cannot do that across several range directories (a
delete then a move leaves an instant with neither, the reverse an instant with both), so the partition's
next state is built beside it, in the attempt's staging area, and swapped with the live directory by one
`renameat2(RENAME_EXCHANGE)` call (Linux, glibc 2.28 or later, on file systems that support it: ext4, xfs,
btrfs, tmpfs...). Unchanged range directories are hard-linked into the next state, so building it copies no
data except the parts of range directories the replay cuts (rewritten from their own rows).

A reader that listed the directory before the swap and opens a file after it may find that file gone (an
error it can retry); it never reads an offset twice or misses one.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import tempfile
from functools import cache

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = ["exchange", "exchange_supported", "link_tree", "write_offset_slice"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@cache
def _renameat2() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """libc's renameat2, None where the C library has none."""
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def exchange(first: str, second: str) -> None:
    """Swap two existing paths atomically (each takes the other's place); OSError where not supported."""
    function = _renameat2()
    if function is None:
        raise OSError(errno.ENOSYS, "this C library has no renameat2: directories cannot be swapped atomically")
    if function(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"cannot swap {first} and {second}: {os.strerror(code)}")


@cache
def _probe(directory: str) -> bool:
    """Swap two fresh directories under `directory`. Each probe makes its own pair (mkdtemp), so concurrent
    probes (the slots of one run are threads) never remove each other's and report a false "unsupported"."""
    first = second = None
    try:
        first = tempfile.mkdtemp(prefix=".cohort-swap-probe-", dir=directory)
        second = tempfile.mkdtemp(prefix=".cohort-swap-probe-", dir=directory)
        exchange(first, second)
        return True
    except OSError:
        return False
    finally:
        for path in (first, second):
            if path is not None:
                with contextlib.suppress(OSError):
                    os.rmdir(path)


def exchange_supported(directory: str) -> bool:
    """Whether directories under `directory` (an existing local directory) can be swapped atomically."""
    return _probe(os.path.abspath(directory))


def link_tree(source: str, target: str) -> None:
    """Recreate directory `source` at `target` (which must not exist) with hard links to its files."""
    os.makedirs(target)
    for entry in os.scandir(source):
        if entry.is_dir(follow_symlinks=False):
            link_tree(entry.path, os.path.join(target, entry.name))
        else:
            os.link(entry.path, os.path.join(target, entry.name))


def write_offset_slice(source: str, target: str, from_offset: int, until_offset: int, *, name: str) -> int:
    """Write the rows of range directory `source` whose `kafka.offset` is in [from, until) into one Parquet
    file `target/name` (written under a hidden name, then moved); returns how many rows it holds (no file
    when none)."""
    files = sorted(
        e.path for e in os.scandir(source) if e.is_file() and e.name.endswith(".parquet") and e.name[0] not in "_."
    )
    tables = [pq.read_table(path) for path in files]
    if not tables:
        return 0
    table = pa.concat_tables(tables, promote_options="default")
    offset = pc.field("kafka", "offset")
    kept = table.filter((offset >= from_offset) & (offset < until_offset))
    if kept.num_rows == 0:
        return 0
    os.makedirs(target, exist_ok=True)
    hidden = os.path.join(target, f".{name}.tmp")
    pq.write_table(kept, hidden)
    os.replace(hidden, os.path.join(target, name))
    return kept.num_rows
