"""The upstream import's vocabulary (internal; public path: :mod:`firefly_orm.upstream_import`).

Its errors, results and options, the record a source yields and the source
protocol, turning an upstream record into an entry, and planning a namespace's
import (what to write, skip or report).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any, Protocol, runtime_checkable

from firefly_orm.entry import (
    MemoryEntry,
    MemoryScope,
    validate_entry,
    validate_namespace,
)
from firefly_orm.errors import (
    EntryValidationError,
    FireflyOrmError,
)

__all__ = [
    "ImportIssue",
    "ImportOptions",
    "ImportProgress",
    "ImportSummary",
    "NamespacePlan",
    "NamespaceResult",
    "UpstreamReadError",
    "UpstreamRecord",
    "UpstreamSource",
    "UpstreamSourceError",
    "entry_from_upstream",
    "plan_namespace",
    "shown",
]

_SCOPES = tuple(scope.value for scope in MemoryScope)


def shown(text: str) -> str:
    """``text`` for a report line: characters that are not printable escaped.

    Namespaces and file names come from the source: a newline or a terminal
    escape in one must not forge a line of the report or colour a terminal.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


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
        return shown(f"{self.namespace}: {self.where}: {self.message}")


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

    @classmethod
    def unreadable(cls, namespace: str, error: UpstreamReadError) -> NamespaceResult:
        """A namespace whose records could not be read: failed, nothing written."""
        return cls(
            namespace, failed=True, issues=(ImportIssue(namespace, error.where, error.reason),)
        )

    @classmethod
    def written(cls, namespace: str, plan: NamespacePlan, count: int) -> NamespaceResult:
        """A namespace whose plan was written, ``count`` of its entries new to the store."""
        return cls(
            namespace,
            imported=count,
            already_present=len(plan.entries) - count,
            skipped_expired=plan.expired,
            skipped_invalid=len(plan.issues),
            issues=plan.issues,
        )

    def describe(self) -> str:
        """One line: the namespace and its counts (or why it failed)."""
        if self.failed:
            reasons = "; ".join(f"{i.where}: {i.message}" for i in self.issues[:3])
            more = f" (+{len(self.issues) - 3} more)" if len(self.issues) > 3 else ""
            return shown(f"{self.namespace}: NOT imported: {reasons}{more}")
        return (
            f"{shown(self.namespace)}: {self.imported} imported, {self.already_present} already "
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
            f"{shown(self.source)}: {self.namespaces} namespace(s), "
            f"{self.imported} entries imported, "
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
