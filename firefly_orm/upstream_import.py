"""Import what the Firefly framework's memory module stored into any firefly_orm store.

The module firefly_orm is modelled on (``fireflyframework_agentic.memory``,
"upstream") keeps its entries in layouts firefly_orm's stores do not read, so
a migrating app would find none of its data.  :func:`import_upstream` (and its
async twin :func:`async_import_upstream`) copies them into any store, keeping
every ``entry_id``:

* :class:`UpstreamFileSource` -- a ``FileStore`` directory: one
  ``<namespace>.json`` file per namespace (``/`` and ``\\`` in a namespace were
  written as ``_``, which cannot be undone), each a JSON object
  ``{entry_id: entry}``;
* :class:`UpstreamSQLiteSource` -- a ``SQLiteStore`` database: table
  ``firefly_memory(entry_id, namespace, content)``, ``content`` holding the
  whole entry as JSON;
* :class:`UpstreamMongoSource` -- a ``MongoDBStore`` collection (default
  ``firefly_memory.entries``): one document per entry with a ``namespace``
  field and ISO-8601 *strings* for ``created_at`` / ``expires_at``.

:func:`upstream_source` picks the source from a location (a directory, a SQLite
file or a ``mongodb://`` URL).  An upstream entry has the fields ``entry_id``,
``scope``, ``key``, ``content``, ``metadata``, ``created_at``, ``expires_at`` and
``importance``; other fields (``_id``, ``namespace``) are ignored, as upstream did.

How an import goes:

* one **unit of work per namespace**: a namespace is written completely or not
  at all.  A namespace whose file cannot be read, or holding a record that is
  not a valid entry (corrupt JSON, importance outside 0.0-1.0, a naive
  date-time...), is reported and nothing of it is written (pass
  ``skip_invalid=True`` to import its valid entries and report the others);
* **idempotent**: entries keep their ids and an entry already in the target
  namespace is left alone (counted as ``already_present``; pass
  ``replace_existing=True`` to overwrite it with the source's copy), so an
  import can be rerun, or resumed after a failure, without duplicates;
* entries already **expired** are skipped and counted;
* ``on_progress`` is called after each namespace with an :class:`ImportProgress`;
  the result is an :class:`ImportSummary`.

Reading the source never blocks an event loop: :func:`async_import_upstream`
reads it in a worker thread and writes through the store's async forms.
Failures of the source as a whole (a missing directory or table, an
unreachable server) raise before anything is written; a failure of the target
store stops the import (namespaces already committed stay imported, and a
rerun completes the rest).

Example::

    from firefly_orm import SQLiteStore
    from firefly_orm.upstream_import import import_upstream, upstream_source

    store = SQLiteStore("data/memory.sqlite3")
    summary = import_upstream(upstream_source(".firefly_memory"), store,
                              on_progress=lambda p: print(p.describe()))
    print(summary.describe())
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from firefly_orm.bridges.steps import CallOut, Operation, Transaction, arun, retrying, run
from firefly_orm.entry import (
    MemoryEntry,
    MemoryScope,
    utcnow,
    validate_entry,
    validate_namespace,
)
from firefly_orm.errors import (
    DatabaseConnectionError,
    EntryValidationError,
    FireflyOrmError,
    MissingExtraError,
    StoreError,
    redact_url,
    scrub_secret,
    url_secrets,
)
from firefly_orm.protocols import MemoryStore, UnitOfWork

__all__ = [
    "DEFAULT_MONGO_COLLECTION",
    "DEFAULT_MONGO_DATABASE",
    "DEFAULT_SQLITE_TABLE",
    "ImportIssue",
    "ImportOptions",
    "ImportProgress",
    "ImportSummary",
    "NamespacePlan",
    "NamespaceResult",
    "ProgressCallback",
    "UpstreamFileSource",
    "UpstreamMongoSource",
    "UpstreamReadError",
    "UpstreamRecord",
    "UpstreamSQLiteSource",
    "UpstreamSource",
    "UpstreamSourceError",
    "async_import_upstream",
    "entry_from_upstream",
    "import_upstream",
    "plan_namespace",
    "upstream_source",
]

logger = logging.getLogger("firefly_orm")

#: Upstream ``SQLiteStore``'s table.
DEFAULT_SQLITE_TABLE = "firefly_memory"
#: Upstream ``MongoDBStore``'s default database and collection.
DEFAULT_MONGO_DATABASE = "firefly_memory"
DEFAULT_MONGO_COLLECTION = "entries"
#: What an upstream ``FileStore`` file name ends with.
_FILE_SUFFIX = ".json"
#: The first bytes of every SQLite database file.
_SQLITE_HEADER = b"SQLite format 3\x00"
#: Upstream ``SQLiteStore``'s columns.
_SQLITE_COLUMNS = frozenset({"entry_id", "namespace", "content"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MONGO_SCHEMES = ("mongodb://", "mongodb+srv://")
_SCOPES = tuple(scope.value for scope in MemoryScope)


# --------------------------------------------------------------------------- errors


class UpstreamSourceError(FireflyOrmError, ValueError):
    """The source cannot be read as upstream data (missing, wrong kind, no such table).

    Raised before anything is written.
    """


class UpstreamReadError(UpstreamSourceError):
    """One namespace of the source cannot be read (an unreadable or corrupt file).

    The import reports it for that namespace and goes on with the others.

    Attributes:
        where: What could not be read (``"file working:s1.json"``).
        reason: Why (the message without ``where``).
    """

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.reason = message


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ImportIssue:
    """Something in the source that was not imported, and why.

    Attributes:
        namespace: The namespace it belongs to.
        where: The file, row or document (``"entry 'a1b2'"``, ``"file x.json"``).
        message: What is wrong (a field name first when one is to blame).
    """

    namespace: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.namespace}: {self.where}: {self.message}"


@dataclass(frozen=True)
class NamespaceResult:
    """What happened to one namespace of the source.

    Attributes:
        namespace: The namespace (the same name in the target store).
        imported: Entries written.
        already_present: Entries left alone because the target namespace
            already held an entry with their id.
        skipped_expired: Entries not imported because they had expired.
        skipped_invalid: Invalid records left out (``skip_invalid=True`` only).
        failed: Nothing of this namespace was written (see :attr:`issues`).
        issues: What was wrong in the source.
    """

    namespace: str
    imported: int = 0
    already_present: int = 0
    skipped_expired: int = 0
    skipped_invalid: int = 0
    failed: bool = False
    issues: tuple[ImportIssue, ...] = ()

    def describe(self) -> str:
        """One line: the namespace and its counts (or why it failed)."""
        if self.failed:
            reasons = "; ".join(f"{i.where}: {i.message}" for i in self.issues[:3])
            more = f" (+{len(self.issues) - 3} more)" if len(self.issues) > 3 else ""
            return f"{self.namespace}: NOT imported: {reasons}{more}"
        return (
            f"{self.namespace}: {self.imported} imported, {self.already_present} already "
            f"present, {self.skipped_expired} expired, {self.skipped_invalid} invalid skipped"
        )


@dataclass(frozen=True)
class ImportProgress:
    """Passed to ``on_progress`` after each namespace.

    Attributes:
        position: How many namespaces are done (1 for the first).
        total: How many namespaces the source holds.
        result: What happened to the namespace just done.
    """

    position: int
    total: int
    result: NamespaceResult

    def describe(self) -> str:
        """``"[3/10] working:s1: 4 imported, ..."``."""
        return f"[{self.position}/{self.total}] {self.result.describe()}"


@dataclass(frozen=True)
class ImportSummary:
    """The outcome of an import.

    Attributes:
        source: The source, described (passwords hidden).
        results: One :class:`NamespaceResult` per namespace, in import order.
    """

    source: str
    results: tuple[NamespaceResult, ...] = ()

    @property
    def namespaces(self) -> int:
        """Namespaces found in the source."""
        return len(self.results)

    @property
    def namespaces_failed(self) -> int:
        """Namespaces of which nothing was written."""
        return sum(r.failed for r in self.results)

    @property
    def imported(self) -> int:
        """Entries written."""
        return sum(r.imported for r in self.results)

    @property
    def already_present(self) -> int:
        """Entries left alone because the target already held them."""
        return sum(r.already_present for r in self.results)

    @property
    def skipped_expired(self) -> int:
        """Expired entries not imported."""
        return sum(r.skipped_expired for r in self.results)

    @property
    def skipped_invalid(self) -> int:
        """Invalid records left out (``skip_invalid=True``)."""
        return sum(r.skipped_invalid for r in self.results)

    @property
    def issues(self) -> tuple[ImportIssue, ...]:
        """Everything reported, namespace by namespace."""
        return tuple(issue for r in self.results for issue in r.issues)

    @property
    def ok(self) -> bool:
        """Whether every namespace was imported (skipped records aside)."""
        return self.namespaces_failed == 0

    def describe(self) -> str:
        """A few lines for people: the totals, then each issue."""
        lines = [
            f"{self.source}: {self.namespaces} namespace(s), {self.imported} entries imported, "
            f"{self.already_present} already present, {self.skipped_expired} expired skipped, "
            f"{self.skipped_invalid} invalid skipped, {self.namespaces_failed} namespace(s) failed"
        ]
        lines.extend(f"  {issue}" for issue in self.issues)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the totals and every namespace's result."""
        return {
            "source": self.source,
            "namespaces": self.namespaces,
            "namespaces_failed": self.namespaces_failed,
            "imported": self.imported,
            "already_present": self.already_present,
            "skipped_expired": self.skipped_expired,
            "skipped_invalid": self.skipped_invalid,
            "results": [
                {
                    "namespace": r.namespace,
                    "imported": r.imported,
                    "already_present": r.already_present,
                    "skipped_expired": r.skipped_expired,
                    "skipped_invalid": r.skipped_invalid,
                    "failed": r.failed,
                    "issues": [{"where": i.where, "message": i.message} for i in r.issues],
                }
                for r in self.results
            ],
        }


@dataclass(frozen=True)
class ImportOptions:
    """How records are read and written.

    Attributes:
        replace_existing: Overwrite an entry the target namespace already holds
            with the source's copy (default: leave it, count it).
        skip_invalid: Import a namespace's valid entries and report its invalid
            records, instead of importing nothing of that namespace.
        assume_timezone: Read date-times without a UTC offset in this zone
            (e.g. ``datetime.UTC``); by default they are invalid, as everywhere
            in firefly_orm.
    """

    replace_existing: bool = False
    skip_invalid: bool = False
    assume_timezone: tzinfo | None = None


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class UpstreamRecord:
    """One stored entry as a source read it, not yet checked.

    Attributes:
        where: Names the record in reports (``"entry 'a1b2'"``).
        data: The decoded record (a dict when the source is well-formed).
        entry_id: The id the source files it under (the key of a FileStore
            object, the ``entry_id`` column), which must match ``data``'s.
        problem: Why the record could not even be decoded (then ``data`` is ``None``).
    """

    where: str
    data: Any
    entry_id: str | None = None
    problem: str | None = None


@runtime_checkable
class UpstreamSource(Protocol):
    """Where upstream data is read from (the three sources of this module, or yours).

    Methods do blocking I/O; the async import runs them in a worker thread.
    """

    def describe(self) -> str:
        """The source for people (no secrets)."""
        ...

    def namespaces(self) -> list[str]:
        """Every namespace in the source, in import order.

        Raises:
            UpstreamSourceError: The source cannot be read at all.
        """
        ...

    def read(self, namespace: str) -> list[UpstreamRecord]:
        """The records of one namespace.

        Raises:
            UpstreamReadError: This namespace cannot be read.
        """
        ...


def _text(name: str, value: Any, *, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise EntryValidationError(name, f"must be a string, got {type(value).__name__}")
    return value


def _when(name: str, value: Any, assume_timezone: tzinfo | None, *, optional: bool) -> Any:
    """A date-time field: an ISO-8601 string (or a ``datetime``), returned in UTC."""
    if value is None:
        if optional:
            return None
        raise EntryValidationError(name, "is missing")
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise EntryValidationError(name, f"is not an ISO-8601 date-time: {value!r}") from None
    if not isinstance(value, datetime):
        raise EntryValidationError(name, f"must be a date-time, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        if assume_timezone is None:
            raise EntryValidationError(
                name, "has no UTC offset (pass assume_timezone to read such values in a zone)"
            )
        value = value.replace(tzinfo=assume_timezone)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise EntryValidationError(name, "is out of range once converted to UTC") from None


def entry_from_upstream(
    namespace: str,
    data: Any,
    *,
    entry_id: str | None = None,
    assume_timezone: tzinfo | None = None,
) -> MemoryEntry:
    """The firefly_orm entry for one upstream entry record, validated.

    Args:
        namespace: The namespace it goes to.
        data: The record: a dict with upstream's entry fields (``entry_id``,
            ``scope``, ``key``, ``content``, ``metadata``, ``created_at``,
            ``expires_at``, ``importance``; others are ignored).  Date-times are
            ISO-8601 strings (or ``datetime`` objects).
        entry_id: The id the source files the record under; must equal the
            record's own ``entry_id`` (and stands in for it when absent).
        assume_timezone: Zone of date-times without a UTC offset (default:
            such values are invalid).

    Raises:
        EntryValidationError: The record is not a valid entry; ``field`` names
            the culprit.
    """
    if not isinstance(data, dict):
        raise EntryValidationError("entry", f"must be a JSON object, got {type(data).__name__}")
    own_id = data.get("entry_id", entry_id)
    if not isinstance(own_id, str) or not own_id:
        raise EntryValidationError("entry_id", "must be a non-empty string")
    if entry_id is not None and own_id != entry_id:
        raise EntryValidationError(
            "entry_id", f"{own_id!r} does not match the id it is stored under ({entry_id!r})"
        )
    scope = data.get("scope")
    if scope is None:
        scope = MemoryScope.WORKING
    elif not isinstance(scope, str) or scope not in _SCOPES:
        raise EntryValidationError("scope", f"must be one of {', '.join(_SCOPES)}, got {scope!r}")
    metadata = data.get("metadata")
    if metadata is None:
        metadata = {}
    elif not isinstance(metadata, dict):
        raise EntryValidationError("metadata", "must be a JSON object")
    importance = data.get("importance", 0.5)
    if isinstance(importance, bool) or not isinstance(importance, int | float):
        raise EntryValidationError(
            "importance", f"must be a number, got {type(importance).__name__}"
        )
    entry = MemoryEntry.from_dict(
        {
            "entry_id": own_id,
            "namespace": namespace,
            "scope": MemoryScope(scope),
            "key": _text("key", data.get("key"), optional=True),
            "content": data.get("content"),
            "metadata": metadata,
            "created_at": _when(
                "created_at", data.get("created_at"), assume_timezone, optional=False
            ),
            "expires_at": _when(
                "expires_at", data.get("expires_at"), assume_timezone, optional=True
            ),
            "importance": float(importance),
        }
    )
    return validate_entry(entry, namespace)


@dataclass(frozen=True)
class NamespacePlan:
    """What to do with one namespace's records (see :func:`plan_namespace`).

    Attributes:
        entries: The valid, live entries to write (ids unique, source order).
        expired: How many valid records had expired.
        issues: The records that are not valid entries.
    """

    entries: tuple[MemoryEntry, ...] = ()
    expired: int = 0
    issues: tuple[ImportIssue, ...] = ()


def plan_namespace(
    namespace: str,
    records: Sequence[UpstreamRecord],
    options: ImportOptions,
    now: datetime,
    taken: Mapping[str, str] | None = None,
) -> NamespacePlan:
    """Check one namespace's records (no I/O): the entries to write, expired, issues.

    A record whose id repeats an earlier record's of the namespace is an issue,
    and so is one whose id ``taken`` maps to another namespace (an id already
    imported there: stores keep one entry per id, so writing it again would
    move that entry here).
    """
    taken = taken if taken is not None else {}
    try:
        validate_namespace(namespace)
    except EntryValidationError as exc:
        return NamespacePlan(issues=(ImportIssue(namespace, "namespace", str(exc)),))
    entries: list[MemoryEntry] = []
    issues: list[ImportIssue] = []
    seen: set[str] = set()
    expired = 0
    for record in records:
        if record.problem is not None:
            issues.append(ImportIssue(namespace, record.where, record.problem))
            continue
        try:
            entry = entry_from_upstream(
                namespace,
                record.data,
                entry_id=record.entry_id,
                assume_timezone=options.assume_timezone,
            )
        except EntryValidationError as exc:
            issues.append(ImportIssue(namespace, record.where, str(exc)))
            continue
        elsewhere = taken.get(entry.entry_id, namespace)
        if entry.entry_id in seen or elsewhere != namespace:
            also = "" if elsewhere == namespace else f" (imported into {elsewhere!r})"
            issues.append(
                ImportIssue(namespace, record.where, f"entry_id: {entry.entry_id!r} repeats{also}")
            )
            continue
        seen.add(entry.entry_id)
        if entry.expires_at is not None and entry.expires_at <= now:
            expired += 1
            continue
        entries.append(entry)
    return NamespacePlan(tuple(entries), expired, tuple(issues))


# --------------------------------------------------------------------------- the import


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
        return NamespaceResult(
            namespace, failed=True, issues=(ImportIssue(namespace, exc.where, exc.reason),)
        )
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
    return NamespaceResult(
        namespace,
        imported=written,
        already_present=len(plan.entries) - written,
        skipped_expired=plan.expired,
        skipped_invalid=len(plan.issues),
        issues=plan.issues,
    )


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


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class UpstreamFileSource:
    """An upstream ``FileStore`` directory: ``<namespace>.json`` per namespace.

    Each file holds one JSON object mapping every ``entry_id`` to its entry.
    Only ``*.json`` files directly inside ``base_dir`` are read.

    Attributes:
        base_dir: The directory (upstream's default was ``.firefly_memory``).
    """

    base_dir: Path

    def __init__(self, base_dir: str | Path) -> None:
        object.__setattr__(self, "base_dir", Path(base_dir))

    def describe(self) -> str:
        """``"upstream FileStore directory <path>"``."""
        return f"upstream FileStore directory {self.base_dir}"

    def namespaces(self) -> list[str]:
        """The namespaces: the file names without ``.json``, sorted."""
        if not self.base_dir.is_dir():
            raise UpstreamSourceError(f"{self.describe()}: not a directory")
        try:
            names = [
                path.name[: -len(_FILE_SUFFIX)]
                for path in self.base_dir.iterdir()
                if path.name.endswith(_FILE_SUFFIX) and path.is_file()
            ]
        except OSError as exc:
            raise UpstreamSourceError(f"{self.describe()}: cannot list it: {exc}") from exc
        return sorted(names)

    def read(self, namespace: str) -> list[UpstreamRecord]:
        """The entries of ``<namespace>.json``, in file order."""
        path = self.base_dir / f"{namespace}{_FILE_SUFFIX}"
        where = f"file {path.name}"
        if path.parent != self.base_dir:  # upstream wrote "/" and "\\" as "_"
            raise UpstreamReadError(where, "is not a file of this directory")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise UpstreamReadError(where, f"cannot be read: {exc}") from exc
        except json.JSONDecodeError as exc:
            raise UpstreamReadError(where, f"is not JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise UpstreamReadError(
                where, f"must hold a JSON object of entries, not {type(data).__name__}"
            )
        return [
            UpstreamRecord(_where(entry_id, entry_id), entry, entry_id=entry_id)
            for entry_id, entry in data.items()
        ]


@dataclass(frozen=True)
class UpstreamSQLiteSource:
    """An upstream ``SQLiteStore`` database, opened read-only.

    Its table (``firefly_memory`` unless ``table`` says otherwise) has the
    columns ``entry_id``, ``namespace`` and ``content`` (the entry as JSON).
    The file may also hold firefly_orm's own table (a store opened on the same
    path): that one is not read.

    Attributes:
        path: The database file.
        table: The upstream table (an SQL identifier).
    """

    path: Path
    table: str = DEFAULT_SQLITE_TABLE

    def __init__(self, path: str | Path, *, table: str = DEFAULT_SQLITE_TABLE) -> None:
        if not isinstance(table, str) or not _IDENTIFIER.fullmatch(table):
            raise EntryValidationError("table", f"must be an SQL identifier, got {table!r}")
        object.__setattr__(self, "path", Path(path))
        object.__setattr__(self, "table", table)

    def describe(self) -> str:
        """``"upstream SQLite database <path> (table firefly_memory)"``."""
        return f"upstream SQLite database {self.path} (table {self.table})"

    def _connect(self) -> sqlite3.Connection:
        if not self.path.is_file():
            raise UpstreamSourceError(f"{self.describe()}: no such file")
        uri = self.path.resolve().as_uri() + "?mode=ro"
        try:
            return sqlite3.connect(uri, uri=True)
        except sqlite3.Error as exc:
            raise UpstreamSourceError(f"{self.describe()}: cannot open it: {exc}") from exc

    def namespaces(self) -> list[str]:
        """The distinct namespaces of the table, sorted."""
        conn = self._connect()
        try:
            columns = {row[1] for row in conn.execute(f'PRAGMA table_info("{self.table}")')}
            if not columns >= _SQLITE_COLUMNS:
                raise UpstreamSourceError(
                    f"{self.describe()}: no table {self.table} with the columns "
                    f"{', '.join(sorted(_SQLITE_COLUMNS))} (is it an upstream SQLiteStore file?)"
                )
            rows = conn.execute(
                f'SELECT DISTINCT namespace FROM "{self.table}" '
                "WHERE typeof(namespace) = 'text' ORDER BY namespace"
            ).fetchall()
        except sqlite3.Error as exc:
            raise UpstreamSourceError(f"{self.describe()}: cannot read it: {exc}") from exc
        finally:
            conn.close()
        return [str(row[0]) for row in rows]

    def read(self, namespace: str) -> list[UpstreamRecord]:
        """The rows of ``namespace`` in insertion order, each ``content`` decoded."""
        conn = self._connect()
        try:
            rows = conn.execute(
                f'SELECT entry_id, content FROM "{self.table}" WHERE namespace = ? ORDER BY rowid',
                (namespace,),
            ).fetchall()
        except sqlite3.Error as exc:
            raise UpstreamReadError(f"table {self.table}", f"cannot be read: {exc}") from exc
        finally:
            conn.close()
        return [_sqlite_record(entry_id, content) for entry_id, content in rows]


def _where(entry_id: Any, fallback: Any) -> str:
    """How a record is named in reports: by its entry id when it has one."""
    if isinstance(entry_id, str) and entry_id:
        return f"entry {entry_id!r}"
    return f"record {fallback}"


def _sqlite_record(entry_id: Any, content: Any) -> UpstreamRecord:
    where = _where(entry_id, f"entry_id={entry_id!r}")
    hint = entry_id if isinstance(entry_id, str) else None
    if not isinstance(content, str):
        return UpstreamRecord(
            where, None, hint, f"content is {type(content).__name__}, not JSON text"
        )
    try:
        return UpstreamRecord(where, json.loads(content), hint)
    except json.JSONDecodeError as exc:
        return UpstreamRecord(where, None, hint, f"content is not JSON ({exc})")


@dataclass(frozen=True)
class UpstreamMongoSource:
    """An upstream ``MongoDBStore`` collection (needs the ``mongo`` extra).

    Documents carry a ``namespace`` field and ISO-8601 strings for their
    date-times.  Each call opens its own client and closes it (nothing to clean
    up).  Import into ANOTHER collection or database than this one: upstream's
    indexes and firefly_orm's cannot share a collection.

    Attributes:
        url: The server's URL (its password never appears in messages).
        database: Upstream's database (default ``firefly_memory``).
        collection: Upstream's collection (default ``entries``).
        timeout: Seconds to wait for the server.
    """

    url: str
    database: str = DEFAULT_MONGO_DATABASE
    collection: str = DEFAULT_MONGO_COLLECTION
    timeout: float = 10.0

    def __init__(
        self,
        url: str,
        *,
        database: str = DEFAULT_MONGO_DATABASE,
        collection: str = DEFAULT_MONGO_COLLECTION,
        timeout: float = 10.0,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(_MONGO_SCHEMES):
            raise EntryValidationError("url", "must be a mongodb:// or mongodb+srv:// URL")
        for name, value in (("database", database), ("collection", collection)):
            if not isinstance(value, str) or not value or "\x00" in value or "$" in value:
                raise EntryValidationError(name, f"is not a MongoDB name: {value!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise EntryValidationError("timeout", "must be a positive number of seconds")
        object.__setattr__(self, "url", url)
        object.__setattr__(self, "database", database)
        object.__setattr__(self, "collection", collection)
        object.__setattr__(self, "timeout", float(timeout))

    def __repr__(self) -> str:
        return (
            f"UpstreamMongoSource({redact_url(self.url)!r}, database={self.database!r}, "
            f"collection={self.collection!r})"
        )

    def describe(self) -> str:
        """``"upstream MongoDB collection firefly_memory.entries at <url>"`` (no password)."""
        return (
            f"upstream MongoDB collection {self.database}.{self.collection} "
            f"at {redact_url(self.url)}"
        )

    def _call(self, fn: Callable[[Any], Any], *, namespace_read: bool) -> Any:
        """``fn(collection)`` with a client of its own; driver errors mapped.

        A failed query is an :class:`UpstreamReadError` (that namespace is
        reported) when ``namespace_read``, else a :class:`StoreError`; an
        unreachable server is always a :class:`DatabaseConnectionError`.
        """
        try:
            import pymongo
            from pymongo.errors import ConnectionFailure, PyMongoError
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise MissingExtraError("reading upstream MongoDB data", "mongo", exc.name) from exc
        secrets = url_secrets(self.url)
        try:
            client: Any = pymongo.MongoClient(
                self.url, tz_aware=True, serverSelectionTimeoutMS=int(self.timeout * 1000)
            )
        except (PyMongoError, ValueError, TypeError) as exc:
            raise UpstreamSourceError(
                f"{self.describe()}: {scrub_secret(str(exc), secrets)}"
            ) from None
        try:
            return fn(client[self.database][self.collection])
        except ConnectionFailure as exc:
            raise DatabaseConnectionError(
                f"Failed to connect to the {self.describe()}: {scrub_secret(str(exc), secrets)}"
            ) from None
        except PyMongoError as exc:
            message = scrub_secret(str(exc), secrets)
            if namespace_read:
                raise UpstreamReadError(f"collection {self.collection}", message) from None
            raise StoreError(f"{self.describe()}: {message}") from None
        finally:
            client.close()

    def namespaces(self) -> list[str]:
        """The distinct ``namespace`` values (strings) of the collection, sorted."""

        def distinct(collection: Any) -> list[str]:
            return sorted(collection.distinct("namespace", {"namespace": {"$type": "string"}}))

        names: list[str] = self._call(distinct, namespace_read=False)
        return names

    def read(self, namespace: str) -> list[UpstreamRecord]:
        """The documents of ``namespace`` in insertion order (``_id``)."""

        def find(collection: Any) -> list[dict[str, Any]]:
            return list(collection.find({"namespace": namespace}).sort("_id", 1))

        documents: list[dict[str, Any]] = self._call(find, namespace_read=True)
        return [
            UpstreamRecord(_where(doc.get("entry_id"), doc.get("_id")), doc) for doc in documents
        ]


def upstream_source(
    location: str | Path,
    *,
    database: str | None = None,
    collection: str | None = None,
    table: str | None = None,
) -> UpstreamSource:
    """The upstream source at ``location``: a directory, a SQLite file or a MongoDB URL.

    Args:
        location: An upstream ``FileStore`` directory, an upstream
            ``SQLiteStore`` database file, or a ``mongodb://`` /
            ``mongodb+srv://`` URL.
        database, collection: MongoDB only (defaults ``firefly_memory`` / ``entries``).
        table: SQLite only (default ``firefly_memory``).

    Raises:
        UpstreamSourceError: Nothing usable is at ``location``.
        EntryValidationError: An option that does not apply to that kind of source.
    """
    text = str(location)
    if text.startswith(_MONGO_SCHEMES):
        if table is not None:
            raise EntryValidationError("table", "applies to SQLite sources only")
        return UpstreamMongoSource(
            text,
            database=database if database is not None else DEFAULT_MONGO_DATABASE,
            collection=collection if collection is not None else DEFAULT_MONGO_COLLECTION,
        )
    if database is not None or collection is not None:
        raise EntryValidationError(
            "database" if database is not None else "collection", "applies to MongoDB URLs only"
        )
    path = Path(location)
    if path.is_dir():
        if table is not None:
            raise EntryValidationError("table", "applies to SQLite sources only")
        return UpstreamFileSource(path)
    if not path.is_file():
        raise UpstreamSourceError(f"{path}: no such directory or file")
    try:
        with path.open("rb") as handle:
            header = handle.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise UpstreamSourceError(f"{path}: cannot be read: {exc}") from exc
    if header != _SQLITE_HEADER:
        raise UpstreamSourceError(
            f"{path}: neither an upstream FileStore directory nor a SQLite database"
        )
    return UpstreamSQLiteSource(path, table=table if table is not None else DEFAULT_SQLITE_TABLE)
