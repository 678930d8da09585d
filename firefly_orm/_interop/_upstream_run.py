"""Running an upstream import (internal; public path: :mod:`firefly_orm.upstream_import`).

One unit of work per namespace, sync and async, with progress and a summary.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, tzinfo
from typing import Any

from firefly_orm._interop._upstream_plan import (
    ImportOptions,
    ImportProgress,
    ImportSummary,
    NamespaceResult,
    UpstreamReadError,
    UpstreamRecord,
    UpstreamSource,
    plan_namespace,
)
from firefly_orm.bridges._steps import CallOut, Operation, Transaction, arun, retrying, run
from firefly_orm.entry import (
    MemoryEntry,
    utcnow,
)
from firefly_orm.errors import (
    EntryValidationError,
)
from firefly_orm.protocols import MemoryStore, UnitOfWork

__all__ = [
    "ProgressCallback",
    "async_import_upstream",
    "import_upstream",
]

logger = logging.getLogger("firefly_orm")

#: Called after each namespace; a plain function or an ``async def`` one.
ProgressCallback = Callable[[ImportProgress], object]


def _write_namespace(
    uow: UnitOfWork, namespace: str, entries: Sequence[MemoryEntry], replace_existing: bool
) -> int:
    """Write one namespace's entries in ``uow``; return how many were written."""
    if not replace_existing:
        present = {entry.entry_id for entry in uow.entries.list(namespace)}
        entries = [entry for entry in entries if entry.entry_id not in present]
    for entry in entries:
        uow.entries.save(namespace, entry)
    return len(entries)


def _import_namespace(
    source: UpstreamSource,
    namespace: str,
    options: ImportOptions,
    now: datetime,
    taken: dict[str, str],
) -> Operation[NamespaceResult]:
    """Import one namespace; record the ids it holds now in ``taken``."""
    try:
        records: list[UpstreamRecord] = yield from CallOut(
            source.read, (namespace,), what="reading the upstream source"
        )
    except UpstreamReadError as exc:
        return NamespaceResult.unreadable(namespace, exc)
    plan = plan_namespace(namespace, records, options, now, taken)
    if plan.issues and not options.skip_invalid:
        return NamespaceResult(
            namespace, skipped_expired=plan.expired, failed=True, issues=plan.issues
        )
    written = 0
    if plan.entries:
        written = yield from retrying(
            Transaction.write(_write_namespace, namespace, plan.entries, options.replace_existing)
        )
    taken.update((entry.entry_id, namespace) for entry in plan.entries)
    return NamespaceResult.written(namespace, plan, written)


def _import(
    source: UpstreamSource, options: ImportOptions, on_progress: ProgressCallback | None
) -> Operation[ImportSummary]:
    now = utcnow()
    namespaces: list[str] = yield from CallOut(
        source.namespaces, what="reading the upstream source"
    )
    description = source.describe()
    results: list[NamespaceResult] = []
    taken: dict[str, str] = {}  # entry_id -> the namespace it was imported into
    for position, namespace in enumerate(namespaces, start=1):
        result = yield from _import_namespace(source, namespace, options, now, taken)
        results.append(result)
        # INFO, failures included: they are in the summary the caller gets.
        logger.info("upstream import from %s: %s", description, result.describe())
        if on_progress is not None:
            yield from CallOut(
                on_progress,
                (ImportProgress(position, len(namespaces), result),),
                what="the on_progress callback",
                use_instead="async_import_upstream",
            )
    return ImportSummary(description, tuple(results))


def _check_source(source: Any) -> UpstreamSource:
    if not isinstance(source, UpstreamSource):
        raise EntryValidationError(
            "source",
            "must be an upstream source (UpstreamFileSource, UpstreamSQLiteSource, "
            f"UpstreamMongoSource or upstream_source(...)), got {type(source).__name__}",
        )
    return source


def import_upstream(
    source: UpstreamSource,
    store: MemoryStore,
    *,
    replace_existing: bool = False,
    skip_invalid: bool = False,
    assume_timezone: tzinfo | None = None,
    on_progress: ProgressCallback | None = None,
) -> ImportSummary:
    """Copy upstream's stored entries from ``source`` into ``store`` (see the module docstring).

    Args:
        source: Where upstream's data is (:func:`upstream_source` builds one
            from a path or URL).
        store: Any firefly_orm store (or one of yours).
        replace_existing: Overwrite entries the target already holds.
        skip_invalid: Import a namespace's valid entries even when some of its
            records are invalid (they are reported).
        assume_timezone: Zone for date-times stored without an offset.
        on_progress: Called with an :class:`ImportProgress` after each namespace.

    Returns:
        The :class:`ImportSummary`; ``summary.ok`` is false when a namespace
        was not imported (its :attr:`~ImportSummary.issues` say why).

    Raises:
        UpstreamSourceError: The source cannot be read at all (nothing written).
        DatabaseConnectionError: An upstream server cannot be reached.
        StoreError: The target store failed (namespaces done so far stay done).
    """
    options = ImportOptions(replace_existing, skip_invalid, assume_timezone)
    return run(store, _import(_check_source(source), options, on_progress))


async def async_import_upstream(
    source: UpstreamSource,
    store: MemoryStore,
    *,
    replace_existing: bool = False,
    skip_invalid: bool = False,
    assume_timezone: tzinfo | None = None,
    on_progress: ProgressCallback | None = None,
) -> ImportSummary:
    """Async twin of :func:`import_upstream` (the source is read in a worker thread)."""
    options = ImportOptions(replace_existing, skip_invalid, assume_timezone)
    return await arun(store, _import(_check_source(source), options, on_progress))
