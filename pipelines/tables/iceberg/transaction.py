"""pyiceberg's transaction with its staged metadata computed once per staged update (`MetadataOnceTransaction`):
used by the Iceberg store's commits (cohort.pipelines.tables.iceberg.store) and its snapshot expiry
(cohort.pipelines.tables.maintenance)."""

from __future__ import annotations

import time
from typing import Any

from pyiceberg.table import Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import _apply_table_update, _TableMetadataUpdateContext

__all__ = ["MetadataOnceTransaction"]


class MetadataOnceTransaction(Transaction):
    """pyiceberg's transaction, its staged metadata computed once per staged update and without a deep copy.

    pyiceberg recomputes `Transaction.table_metadata` (every staged update applied to the table's metadata, then a
    deep copy of the whole of it) on each access, and one append reads it some twenty times: the copies, whose
    size grows with the snapshots and properties the table keeps, were most of a commit's CPU. The metadata models
    are frozen and the updates build new ones (pyiceberg 0.12's `_apply_table_update` never changes its base in
    place), so the result is shared as it is, and kept while the staged updates (an immutable tuple) and the base
    metadata are the same objects. The catalog's commit still validates and copies the result once."""

    _metadata_of: tuple[tuple[Any, ...], TableMetadata, TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        if not self._updates:
            return self._table.metadata  # nothing staged: the loaded metadata itself (frozen)
        updates, base, kept = self._metadata_of or ((), None, None)
        if kept is None or updates is not self._updates or base is not self._table.metadata:
            kept = _staged_metadata(self._table.metadata, self._updates)
            self._metadata_of = (self._updates, self._table.metadata, kept)
        return kept


def _staged_metadata(base: TableMetadata, updates: tuple[Any, ...]) -> TableMetadata:
    """`update_table_metadata` of pyiceberg without its final deep copy (see `MetadataOnceTransaction`)."""
    context = _TableMetadataUpdateContext()
    metadata = base
    for update in updates:
        metadata = _apply_table_update(update, metadata, context)
    if context.has_changes() and base.last_updated_ms == metadata.last_updated_ms:
        metadata = metadata.model_copy(update={"last_updated_ms": int(time.time() * 1000)})
    return metadata
