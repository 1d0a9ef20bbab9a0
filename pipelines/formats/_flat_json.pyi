"""Types of the C extension built from pipelines/formats/flat_json.c (see cohort.pipelines.formats.flat_json)."""

from typing import Any

def decode(
    data: Any,
    offsets: Any,
    large: bool,
    validity: Any | None,
    start: int,
    n: int,
    kinds: bytes,
    names: tuple[bytes, ...],
    /,
) -> tuple[bytes, int, list[tuple[bytes, bytes, bytes | None]]]: ...
