"""Maintenance the memory layers share: refreshing a store's planner statistics.

Here, on the layers' floor, so the conversation layer (imports) and long-term
memory (bulk writes) both use it without importing each other;
:mod:`firefly_orm.conversation._transfer` re-exports it.
"""

from __future__ import annotations

import logging

from firefly_orm.bridges._steps import Operation, StoreCall
from firefly_orm.errors import StoreError
from firefly_orm.protocols import AsyncMemoryStore, MemoryStore, StoreMaintenance

__all__ = ["ANALYZE_AFTER_ROWS", "refresh_statistics"]

logger = logging.getLogger("firefly_orm")

#: An import writing at least this many turns refreshes the store's planner
#: statistics afterwards (:func:`refresh_statistics`).  An ``ANALYZE`` reads a
#: bounded sample (about 0.3 s on a 200,000-row table), small beside the import
#: of this many turns; below it, autovacuum's own schedule is good enough.
ANALYZE_AFTER_ROWS = 1_000


def refresh_statistics(rows_written: int) -> Operation[None]:
    """After a committed bulk write: ask the store to refresh its planner statistics.

    Runs only when ``rows_written`` reaches :data:`ANALYZE_AFTER_ROWS` and the
    store has the :class:`~firefly_orm.protocols.StoreMaintenance` capability
    (:meth:`SQLAlchemyStore.analyze <firefly_orm.sql.SQLAlchemyStore.analyze>`;
    a store bound to a caller's session has not: its rows are not committed
    yet).  It runs after the unit of work, never inside it, and never fails the
    write that preceded it: a :class:`~firefly_orm.errors.StoreError` is logged
    as a warning.
    """
    if rows_written < ANALYZE_AFTER_ROWS:
        return
    try:
        yield from StoreCall(_analyze, _async_analyze)
    except StoreError as exc:
        logger.warning(
            "refreshing the planner statistics after writing %d rows failed (the write "
            "itself is committed; autovacuum will analyze the table later): %s",
            rows_written,
            exc,
        )


def _analyze(store: MemoryStore) -> None:
    if isinstance(store, StoreMaintenance):
        store.analyze()


async def _async_analyze(store: AsyncMemoryStore) -> None:
    if isinstance(store, StoreMaintenance):
        await store.async_analyze()
