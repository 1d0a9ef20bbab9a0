"""Types of the C extension built from pipelines/tasks/kafka_arrow.c (see cohort.pipelines.tasks.native_reader)."""

Column = tuple[bytes, int, bytes, bytes]
"""A binary column: validity bitmap, null count, int64 offsets, data."""

def load(path: str) -> None: ...
def version() -> str: ...

class Consumer:
    def __init__(self, config: list[tuple[str, str]], topic: str, partition: int, offset: int, /) -> None: ...
    def consume(
        self, max_messages: int, timeout_ms: int, /
    ) -> tuple[
        int,
        bytes,
        tuple[bytes, int, bytes],
        Column,
        Column,
        list[tuple[int, list[tuple[bytes, bytes | None]]]],
        list[tuple[int, int, str]],
    ]: ...
    def close(self) -> None: ...
