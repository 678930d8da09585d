"""Upstream data found where a store opens: refuse, or import it once (internal).

Public path: :mod:`firefly_orm.upstream_import`.  The compatible stores of
:mod:`firefly_orm.compat.firefly` call :func:`check_upstream_data` when they
open on a location that may hold upstream's data (a SQLite file, a FileStore
directory): data that was never imported into the store is refused with
:class:`UpstreamDataFoundError`, which names the import to run, unless the
store was opened with ``import_upstream=True``; then
:func:`import_upstream_once` brings it in.

What "imported" means is a **mark** in the target store: one entry in
namespace :data:`IMPORT_MARK_NAMESPACE` whose key names the kind of source
(:func:`import_mark_key`).  :func:`import_upstream_once` writes the mark in
the same unit of work as every imported entry (all namespaces or none), and
the ``firefly-orm import-upstream`` command writes it after an import that
went through completely.  The mark carries the source's description, the
number of entries imported and when.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import TypedDict, Unpack

from firefly_orm._interop._upstream_plan import (
    ImportOptions,
    ImportSummary,
    NamespacePlan,
    NamespaceResult,
    UpstreamReadError,
    UpstreamSource,
    plan_namespace,
)
from firefly_orm._interop._upstream_run import _write_namespace
from firefly_orm._interop._upstream_sources import (
    DEFAULT_SQLITE_TABLE,
    UpstreamFileSource,
    UpstreamMongoSource,
    UpstreamSQLiteSource,
)
from firefly_orm.bridges._steps import CallOut, Operation, Transaction, arun, retrying, run
from firefly_orm.entry import MemoryEntry, MemoryScope, derived_entry_id, utcnow
from firefly_orm.errors import StoreError
from firefly_orm.protocols import MemoryStore, UnitOfWork

__all__ = [
    "IMPORT_MARK_NAMESPACE",
    "ImportKeywords",
    "UpstreamDataFoundError",
    "UpstreamImportError",
    "async_import_upstream_once",
    "check_upstream_data",
    "import_mark_key",
    "import_upstream_once",
    "is_imported",
    "mark_imported",
    "sqlite_import_commands",
]

logger = logging.getLogger("firefly_orm")

#: The namespace of the marks that say which upstream data a store holds.
IMPORT_MARK_NAMESPACE = "firefly_orm:upstream-import"

#: The command line tool that imports upstream data into a database.
_COMMAND = "firefly-orm"


class UpstreamDataFoundError(StoreError):
    """A store was opened where upstream data lies that was never imported into it.

    Raised before anything is written.  The message names the command to run
    (or the option to pass) to import it.

    Attributes:
        source: The upstream data found.
    """

    def __init__(self, message: str, source: UpstreamSource) -> None:
        super().__init__(message)
        self.source = source


class UpstreamImportError(StoreError):
    """An import of upstream data at once was refused: nothing was written.

    Attributes:
        summary: What each namespace would have given; :attr:`ImportSummary.issues`
            says what is wrong.
    """

    def __init__(self, summary: ImportSummary) -> None:
        issues = "; ".join(str(issue) for issue in summary.issues[:5])
        more = len(summary.issues) - 5
        super().__init__(
            f"{summary.source}: not imported, nothing written ({issues}"
            + (f"; and {more} more" if more > 0 else "")
            + "); fix the data or pass skip_invalid=True to leave the invalid records out"
        )
        self.summary = summary


def import_mark_key(source: UpstreamSource) -> str:
    """The key of the mark that says ``source``'s kind of data was imported.

    ``"sqlite:<table>"``, ``"file"`` or ``"mongodb:<database>.<collection>"``:
    the kind of source, not its path (a store holds at most one of each, and a
    path may be spelled many ways).
    """
    if isinstance(source, UpstreamSQLiteSource):
        return f"sqlite:{source.table}"
    if isinstance(source, UpstreamFileSource):
        return "file"
    if isinstance(source, UpstreamMongoSource):
        return f"mongodb:{source.database}.{source.collection}"
    return f"other:{type(source).__name__}"


def _mark(source: UpstreamSource, imported: int) -> MemoryEntry:
    key = import_mark_key(source)
    return MemoryEntry(
        entry_id=derived_entry_id(IMPORT_MARK_NAMESPACE, key),  # one mark per key
        scope=MemoryScope.WORKING,
        key=key,
        content={
            "source": source.describe(),
            "imported": imported,
            "imported_at": utcnow().isoformat(),
        },
    )


def _has_mark(uow: UnitOfWork, key: str) -> bool:
    return uow.entries.get_by_key(IMPORT_MARK_NAMESPACE, key) is not None


def _save_mark(uow: UnitOfWork, mark: MemoryEntry) -> None:
    uow.entries.save(IMPORT_MARK_NAMESPACE, mark)


def is_imported(store: MemoryStore, source: UpstreamSource) -> bool:
    """Whether ``store`` holds the mark of an import of ``source``'s kind of data."""
    return run(store, retrying(Transaction.read(_has_mark, import_mark_key(source))))


def mark_imported(store: MemoryStore, source: UpstreamSource, imported: int) -> None:
    """Write the mark of an import of ``source`` into ``store`` (``imported`` entries)."""
    run(store, retrying(Transaction.write(_save_mark, _mark(source, imported))))


def check_upstream_data(
    store: MemoryStore,
    source: UpstreamSource | None,
    *,
    import_upstream: bool,
    may_hold_mark: bool,
    opened_as: str,
    commands: Sequence[str],
) -> UpstreamSource | None:
    """Refuse ``source``'s data unless it was imported; the source to import, if asked.

    Args:
        store: The store being opened.
        source: The upstream data found where it opens (``None``: none found).
        import_upstream: The store was asked to import it.
        may_hold_mark: Whether the store may hold an import's mark; ``False``
            (its tables or files do not exist yet) skips reading it, so that
            nothing is created where the data is refused.
        opened_as: How to open the store with the option, for the message
            (``"SQLiteStore('m.db', import_upstream=True)"``).
        commands: The ``firefly-orm`` command lines (without ``firefly-orm``)
            that import it, in order; none when no command can (the message
            then names only the option).

    Returns:
        ``source`` when it still has to be imported and ``import_upstream``
        says to; ``None`` when there is nothing to do.

    Raises:
        UpstreamDataFoundError: Data not imported and ``import_upstream`` false.
    """
    if source is None or (may_hold_mark and is_imported(store, source)):
        return None
    if import_upstream:
        return source
    steps = " and then ".join(f"`{_COMMAND} {line}`" for line in commands)
    run_it = f"run {steps} once, or " if commands else ""
    raise UpstreamDataFoundError(
        f"{source.describe()} holds data of the Firefly framework's memory module that was "
        f"never imported into this store; opening it would start empty beside that data. "
        f"To bring it in, {run_it}open the store as {opened_as} "
        "(one unit of work: all of it or nothing). Nothing was written.",
        source,
    )


@dataclass(frozen=True)
class _Planned:
    plans: tuple[tuple[str, NamespacePlan], ...]
    failed: tuple[NamespaceResult, ...]


def _plan_all(source: UpstreamSource, options: ImportOptions) -> Operation[_Planned]:
    """Read and check every namespace of ``source`` (nothing written)."""
    now = utcnow()
    namespaces: list[str] = yield from CallOut(
        source.namespaces, what="reading the upstream source"
    )
    taken: dict[str, str] = {}
    plans: list[tuple[str, NamespacePlan]] = []
    failed: list[NamespaceResult] = []
    for namespace in namespaces:
        try:
            records = yield from CallOut(
                source.read, (namespace,), what="reading the upstream source"
            )
        except UpstreamReadError as exc:
            failed.append(NamespaceResult.unreadable(namespace, exc))
            continue
        plan = plan_namespace(namespace, records, options, now, taken)
        taken.update((entry.entry_id, namespace) for entry in plan.entries)
        plans.append((namespace, plan))
    return _Planned(tuple(plans), tuple(failed))


def _write_all(
    uow: UnitOfWork,
    plans: Sequence[tuple[str, NamespacePlan]],
    source: UpstreamSource,
    replace_existing: bool,
) -> list[int] | None:
    """Every namespace and the mark in one unit of work; ``None``: marked already."""
    if _has_mark(uow, import_mark_key(source)):
        return None
    written = [
        _write_namespace(uow, namespace, plan.entries, replace_existing)
        for namespace, plan in plans
    ]
    _save_mark(uow, _mark(source, sum(written)))
    return written


def _import_once(source: UpstreamSource, options: ImportOptions) -> Operation[ImportSummary]:
    planned = yield from _plan_all(source, options)
    description = source.describe()
    results = [
        NamespaceResult(
            namespace,
            skipped_expired=plan.expired,
            failed=bool(plan.issues) and not options.skip_invalid,
            skipped_invalid=len(plan.issues) if options.skip_invalid else 0,
            issues=plan.issues,
        )
        for namespace, plan in planned.plans
    ]
    summary = ImportSummary(description, (*planned.failed, *results))
    if not summary.ok:
        raise UpstreamImportError(summary)
    written = yield from retrying(
        Transaction.write(_write_all, planned.plans, source, options.replace_existing)
    )
    if written is None:
        logger.info("upstream import from %s: imported already, nothing written", description)
        return ImportSummary(description, ())
    summary = ImportSummary(
        description,
        tuple(
            NamespaceResult.written(namespace, plan, count)
            for (namespace, plan), count in zip(planned.plans, written, strict=True)
        ),
    )
    logger.info("upstream import from %s (at once): %s", description, summary.describe())
    return summary


class ImportKeywords(TypedDict, total=False):
    """The keyword arguments of :func:`import_upstream_once` (those of :class:`ImportOptions`)."""

    replace_existing: bool
    skip_invalid: bool
    assume_timezone: tzinfo | None


def import_upstream_once(
    source: UpstreamSource, store: MemoryStore, **options: Unpack[ImportKeywords]
) -> ImportSummary:
    """Import ``source`` into ``store`` in ONE unit of work, and mark it imported.

    Unlike :func:`~firefly_orm.upstream_import.import_upstream` (one unit of
    work per namespace), every namespace and the mark are written together:
    a record that is not a valid entry, an unreadable namespace or a failing
    write leaves ``store`` as it was.  A store that holds the mark already is
    left alone (the result then lists no namespace), so calling it again, or
    from two processes at once, imports once.

    Args:
        source: The upstream data.
        store: Any firefly_orm store.
        **options: ``replace_existing`` (overwrite entries the target already
            holds), ``skip_invalid`` (import the valid entries and report the
            invalid records instead of refusing the whole import),
            ``assume_timezone`` (zone for date-times stored without an offset);
            see :class:`~firefly_orm.upstream_import.ImportOptions`.

    Returns:
        The :class:`~firefly_orm.upstream_import.ImportSummary` of what was written.

    Raises:
        UpstreamImportError: A namespace could not be read or holds an invalid
            record (and not ``skip_invalid``); nothing was written.
        UpstreamSourceError: The source cannot be read at all.
        StoreError: The target store failed (nothing was written).
    """
    return run(store, _import_once(source, ImportOptions(**options)))


async def async_import_upstream_once(
    source: UpstreamSource, store: MemoryStore, **options: Unpack[ImportKeywords]
) -> ImportSummary:
    """Async twin of :func:`import_upstream_once` (the source is read in a worker thread)."""
    return await arun(store, _import_once(source, ImportOptions(**options)))


def sqlite_import_commands(path: Path, table: str) -> tuple[str, str]:
    """The ``firefly-orm`` command lines that import SQLite file ``path`` into itself.

    ``migrate`` (our tables, beside upstream's) then ``import-upstream``
    (which writes the mark).  ``path`` should be absolute (the URL is then
    ``sqlite:////abs/path``).
    """
    url = shlex.quote(f"sqlite:///{path}")
    options = "" if table == DEFAULT_SQLITE_TABLE else f" --sqlite-table {shlex.quote(table)}"
    return f"migrate --url {url}", f"import-upstream {shlex.quote(str(path))}{options} --url {url}"
