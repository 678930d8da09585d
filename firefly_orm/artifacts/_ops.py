"""Artifact workspace transactions: plain sync functions over one unit of work.

Each takes the unit of work first and the workspace's
:class:`~firefly_orm.artifacts.Layout` explicitly, so another layer (an
importer, a CLI command) can run them inside its own unit of work.
:class:`~firefly_orm.artifacts.ArtifactWorkspace` and
:class:`~firefly_orm.artifacts.Artifacts` run each public operation as one of
them (:mod:`firefly_orm.bridges._steps`), retrying lost races with
:func:`retry_races`.

**One write, one unit of work.**  :func:`put_file` reads the file row (locked
until the end of the transaction where the store can: ``SELECT ... FOR
UPDATE`` on PostgreSQL; SQLite runs one writer at a time), compares its sha
with ``expected_sha``, and then saves the file row conditioned on the version
it read, the audit row and the version row.  They commit together or not at
all; a failed condition or any error rolls all of them back.  A delete saves
the file row conditioned on its version before deleting it, so a delete too
fails when the file changed after it was read, on every store.  Creating and
deleting a file also move the workspace head's version on, and so does every
write on the stores that lock nothing until commit (:func:`bump_head`): a
path deleted and created again between another writer's read and its commit
makes that writer retry, so every path's audit rows are in the order their
changes committed.

What each operation costs (SQL statements; ``N`` rows read):

* write: read the head (by id), read the file (by key, locked), save the file
  (one conditional ``UPDATE`` or ``INSERT``), insert the audit row, insert
  the version row (with ``keep_versions``); a new file adds the head's
  conditional ``UPDATE``;
* delete: the same reads, one conditional ``UPDATE`` and one ``DELETE``, the
  audit row, the head's conditional ``UPDATE``;
* ``list_paths`` / ``files``: one indexed key-range read over the files (their
  bodies included: the repository has no metadata-only listing);
* ``audit_tail(n)``: one indexed read of the newest ``n`` audit rows;
* ``history(path)``: one indexed key-range read of that path's versions;
* ``read_version(path, sha)``: one indexed lookup by key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from firefly_orm.artifacts._errors import ShaMismatchError, WorkspaceExistsError
from firefly_orm.artifacts._layout import (
    REGISTRY_NAMESPACE,
    Layout,
    audit_record,
    body_of,
    file_info,
    file_sha,
    is_head_row,
    stored_file,
    transcript_message,
    version_path,
    workspace_info,
)
from firefly_orm.artifacts._results import (
    ArtifactFile,
    AuditRecord,
    Body,
    FileInfo,
    TranscriptMessage,
    WorkspaceInfo,
    WorkspaceSnapshot,
)
from firefly_orm.bridges._steps import Operation, RetryBudget, Transaction
from firefly_orm.entry import MemoryEntry, utcnow
from firefly_orm.errors import ConcurrencyError, NotFoundError
from firefly_orm.protocols import UnitOfWork
from firefly_orm.uow import StagedUnitOfWork

__all__ = [
    "WritePolicy",
    "append_messages",
    "bump_head",
    "create_workspace",
    "delete_file",
    "delete_workspace",
    "ensure_workspace",
    "export_snapshot",
    "file_history",
    "import_snapshot",
    "list_files",
    "list_workspaces",
    "promote_file",
    "put_file",
    "read_audit",
    "read_file",
    "read_messages",
    "read_version",
    "read_workspace",
    "require_head",
    "require_workspace",
    "retry_races",
    "write_file",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class WritePolicy:
    """What a write records besides the file.

    Attributes:
        audit: Append an audit row.
        keep_versions: Keep a snapshot of the written content.
    """

    audit: bool = True
    keep_versions: bool = False


def retry_races(step: Transaction[T]) -> Operation[T]:
    """Perform ``step``, retrying it after a back-off when it lost a race.

    A lost race is a :class:`~firefly_orm.errors.ConcurrencyError` raised by
    the store (a row changed between the read and the conditional write); the
    retry reads again, so a compare-and-set that no longer holds then fails
    with :class:`~firefly_orm.artifacts.ShaMismatchError`, which is never
    retried.  Retries go on while the :class:`~firefly_orm.bridges._steps.RetryBudget`
    lasts (writers wait their turn under contention); then the last error
    propagates.
    """
    budget = RetryBudget()
    while True:
        try:
            return (yield from step)
        except ShaMismatchError:
            raise
        except ConcurrencyError:
            if not budget.spend():
                raise
            yield from budget.pause()


# --------------------------------------------------------------------------- owned rows


def _kept_list(
    uow: UnitOfWork,
    namespace: str,
    keep: Callable[[MemoryEntry], bool],
    *,
    key_prefix: str | None = None,
    limit: int | None = None,
    newest_first: bool = False,
    user_id: str | None = None,
) -> list[MemoryEntry]:
    """``uow.entries.list`` keeping only the rows ``keep`` accepts, ``limit`` of them.

    The rows of other owners (:meth:`Layout.owns`) are dropped.  They are
    there only when another layer was given one of our namespaces, so the
    list is read once as asked; only when some were dropped from a limited
    read is it read again in full, and cut.
    """
    rows = uow.entries.list(
        namespace, key_prefix=key_prefix, limit=limit, newest_first=newest_first, user_id=user_id
    )
    kept = [e for e in rows if keep(e)]
    if len(kept) == len(rows):
        return kept
    logger.warning(
        "artifacts: %d row(s) of %r are not the workspace's own (another layer wrote "
        "them in its namespace); ignored",
        len(rows) - len(kept),
        namespace,
    )
    if limit is not None:
        rows = uow.entries.list(
            namespace, key_prefix=key_prefix, newest_first=newest_first, user_id=user_id
        )
        kept = [e for e in rows if keep(e)][:limit]
    return kept


def read_file(uow: UnitOfWork, layout: Layout, path: str) -> MemoryEntry | None:
    """The file row of ``path`` read by its id (never a row of another owner), or ``None``."""
    entry = uow.entries.get(layout.files, layout.file_id(path))
    return entry if entry is not None and layout.is_file_row(entry) else None


# --------------------------------------------------------------------------- workspaces


def _read_head(uow: UnitOfWork, layout: Layout) -> MemoryEntry | None:
    """The workspace's head row, or ``None`` when it does not exist."""
    return uow.entries.get(layout.registry, layout.head_id)


def read_workspace(uow: UnitOfWork, layout: Layout) -> WorkspaceInfo | None:
    """The workspace's registry entry, or ``None`` when it does not exist."""
    head = _read_head(uow, layout)
    return None if head is None else workspace_info(head)


def require_head(uow: UnitOfWork, layout: Layout) -> MemoryEntry:
    """The workspace's head row.

    Raises:
        NotFoundError: The workspace does not exist (never created, or deleted).
    """
    head = _read_head(uow, layout)
    if head is None:
        owner = "" if layout.user_id is None else f" of user {layout.user_id!r}"
        raise NotFoundError(
            f"artifact workspace {layout.key!r}{owner} does not exist: create it with "
            "Artifacts.create() or Artifacts.get_or_create()"
        )
    return head


def require_workspace(uow: UnitOfWork, layout: Layout) -> WorkspaceInfo:
    """The workspace's registry entry.

    Raises:
        NotFoundError: The workspace does not exist (never created, or deleted).
    """
    return workspace_info(require_head(uow, layout))


def bump_head(uow: UnitOfWork, layout: Layout, head: MemoryEntry, *, created: bool) -> None:
    """Move the head row's version on after a change of the workspace's files, where needed.

    A file row's version guards it only while the row exists: its versions
    start again at 1 when the path is deleted and created anew.  Without this,
    a writer that read "no file", or version ``v`` of the file, could commit
    after others deleted and re-created the path (the same "no file", or a new
    file at version ``v``), and its audit row, timed at its read, would sit
    out of order in the path's chain (its update would even overwrite the new
    file unseen).  The head's version, read with ``head`` and conditioned on
    here, changes with every such change, so a stale writer fails with
    :class:`~firefly_orm.errors.ConcurrencyError` and retries with a fresh read.

    ``created``: the change created or deleted a path; it always moves the head
    (on PostgreSQL no row is there to lock when a path is created).  An update
    of an existing file moves it only on stores that lock nothing until
    commit (a staged unit of work: :class:`~firefly_orm.FileStore`,
    :class:`~firefly_orm.InMemoryStore`, MongoDB); on SQL the file row read
    ``for_update`` is locked (PostgreSQL) or the whole write is serialised
    (SQLite), so no delete can slip in, and concurrent writers of different
    files do not queue on the head.  The head is written last, so on
    PostgreSQL its row lock is always taken after the file rows' (no
    lock-order deadlock with another write).  Call it once per unit of work.
    """
    if created or isinstance(uow, StagedUnitOfWork):
        uow.entries.save(layout.registry, head, expected_version=head.version)


def _clear_family(uow: UnitOfWork, layout: Layout) -> None:
    for namespace in layout.family:
        uow.entries.clear(namespace)


def create_workspace(uow: UnitOfWork, layout: Layout) -> WorkspaceInfo:
    """Create the workspace (its head row); whatever its namespaces held is removed.

    Raises:
        WorkspaceExistsError: It exists already.
    """
    if read_workspace(uow, layout) is not None:
        owner = "" if layout.user_id is None else f" of user {layout.user_id!r}"
        raise WorkspaceExistsError(f"artifact workspace {layout.key!r}{owner} already exists")
    # Rows a writer racing an earlier delete_workspace may have left: a new
    # workspace starts empty.
    _clear_family(uow, layout)
    head = layout.head_entry(utcnow())
    uow.entries.save(layout.registry, head, expected_version=0)
    return workspace_info(head)


def ensure_workspace(uow: UnitOfWork, layout: Layout) -> tuple[WorkspaceInfo, bool]:
    """The workspace, created if missing; ``(info, created)``."""
    info = read_workspace(uow, layout)
    if info is not None:
        return info, False
    return create_workspace(uow, layout), True


def delete_workspace(uow: UnitOfWork, layout: Layout) -> bool:
    """Delete the workspace: its head and every row of its namespaces; whether it existed."""
    existed = read_workspace(uow, layout) is not None
    _clear_family(uow, layout)  # the file rows first, the head last, as in every write
    uow.entries.delete(layout.registry, layout.head_id)
    return existed


def list_workspaces(
    uow: UnitOfWork,
    user_id: str | None,
    prefix: str,
    limit: int | None,
    *,
    all_users: bool = False,
) -> list[WorkspaceInfo]:
    """The workspaces of ``user_id`` (``None``: the shared ones) whose key starts with ``prefix``.

    Sorted by key; one indexed read (by user on SQL and MongoDB when ``user_id``
    is given; the shared workspaces are read by key range and filtered).
    ``all_users``: every owner's and the shared ones (``user_id`` is ignored).
    """
    if all_users or user_id is not None:
        heads = _kept_list(
            uow, REGISTRY_NAMESPACE, is_head_row, key_prefix=prefix, limit=limit, user_id=user_id
        )
        return [workspace_info(h) for h in heads]
    found: list[WorkspaceInfo] = []
    for head in uow.entries.list(REGISTRY_NAMESPACE, key_prefix=prefix):
        if head.user_id is None and is_head_row(head):
            found.append(workspace_info(head))
            if limit is not None and len(found) >= limit:
                break
    return found


# --------------------------------------------------------------------------- files


def _check_expected(path: str, expected_sha: str | None, current_sha: str) -> None:
    if expected_sha is not None and expected_sha != current_sha:
        raise ShaMismatchError(path, expected_sha, current_sha)


def _file_row(
    uow: UnitOfWork, layout: Layout, path: str, *, for_update: bool = False
) -> MemoryEntry | None:
    """The file row of ``path`` (one read by key), or ``None``.

    The newest row with the key is the file row but when another layer wrote a
    newer row of another owner there; then the file row is read by its id
    (unlocked: its version-conditioned save still guards a write).
    """
    entry = uow.entries.get_by_key(layout.files, path, for_update=for_update)
    if entry is None or layout.is_file_row(entry):
        return entry
    return read_file(uow, layout, path)


def _locked_file(uow: UnitOfWork, layout: Layout, path: str) -> MemoryEntry | None:
    """The file row of ``path``, locked for the rest of the unit of work where the store can."""
    return _file_row(uow, layout, path, for_update=True)


def put_file(
    uow: UnitOfWork,
    layout: Layout,
    path: str,
    body: Body,
    *,
    actor: str,
    reason: str,
    expected_sha: str | None,
    policy: WritePolicy,
    source: str | None = None,
    moved: bool = False,
) -> FileInfo:
    """Write ``body`` at ``path`` with its audit and version rows (no head or read-only check).

    ``source`` marks a promotion (the audit row's op is then ``"promote"``).

    Raises:
        ShaMismatchError: ``expected_sha`` is not the file's current sha.
        ConcurrencyError: The file changed after it was read (a lost race).
    """
    current = _locked_file(uow, layout, path)
    old_sha = file_sha(current)
    _check_expected(path, expected_sha, old_sha)
    now = utcnow()
    entry = layout.file_entry(path, body, actor, reason, now)
    uow.entries.save(
        layout.files, entry, expected_version=0 if current is None else current.version
    )
    version = 1 if current is None else current.version + 1
    if policy.audit:
        op = "promote" if source is not None else ("update" if current is not None else "create")
        record = AuditRecord(
            now, op, path, old_sha, body.sha256, actor, reason, source=source, moved=moved
        )
        uow.entries.save(layout.audit, layout.audit_entry(record))
    if policy.keep_versions:
        uow.entries.save(
            layout.versions, layout.version_entry(path, body, actor, reason, now, version)
        )
    return FileInfo(
        path=path,
        sha256=body.sha256,
        size=body.size,
        kind=body.kind,
        updated_at=now,
        version=version,
        actor=actor,
        reason=reason,
    )


def write_file(
    uow: UnitOfWork,
    layout: Layout,
    path: str,
    body: Body,
    actor: str,
    reason: str,
    expected_sha: str | None,
    policy: WritePolicy,
) -> FileInfo:
    """The transaction of a write: the workspace must exist, then :func:`put_file`.

    The head's version moves on (:func:`bump_head`).
    """
    head = require_head(uow, layout)
    info = put_file(
        uow,
        layout,
        path,
        body,
        actor=actor,
        reason=reason,
        expected_sha=expected_sha,
        policy=policy,
    )
    bump_head(uow, layout, head, created=info.version == 1)  # (an update's is at least 2)
    return info


def _remove_file(
    uow: UnitOfWork, layout: Layout, current: MemoryEntry, actor: str, reason: str, audit: bool
) -> None:
    """Delete a file row read in this unit of work, failing if it changed since (any store)."""
    # A save conditioned on the version read makes the delete conditional too:
    # SQL checks it at once (UPDATE ... WHERE version = ...), staged stores at commit.
    uow.entries.save(layout.files, current, expected_version=current.version)
    uow.entries.delete(layout.files, current.entry_id)
    if audit:
        path = str(current.key)
        record = AuditRecord(utcnow(), "delete", path, file_sha(current), "", actor, reason)
        uow.entries.save(layout.audit, layout.audit_entry(record))


def delete_file(
    uow: UnitOfWork,
    layout: Layout,
    path: str,
    actor: str,
    reason: str,
    expected_sha: str | None,
    policy: WritePolicy,
) -> bool:
    """Delete the file at ``path`` with its audit row; whether there was one.

    ``expected_sha=""`` on a missing file succeeds (nothing to delete, no audit row).

    Raises:
        NotFoundError: The workspace does not exist.
        ShaMismatchError: ``expected_sha`` is not the file's current sha.
    """
    head = require_head(uow, layout)
    current = _locked_file(uow, layout, path)
    _check_expected(path, expected_sha, file_sha(current))
    if current is None:
        return False
    _remove_file(uow, layout, current, actor, reason, policy.audit)
    bump_head(uow, layout, head, created=True)
    return True


def promote_file(
    uow: UnitOfWork,
    layout: Layout,
    src: str,
    dst: str,
    *,
    move: bool,
    actor: str,
    reason: str,
    src_sha: str | None,
    expected_sha: str | None,
    policy: WritePolicy,
) -> FileInfo:
    """Copy (or move) ``src`` to ``dst`` with one ``"promote"`` audit row, atomically.

    Raises:
        NotFoundError: The workspace or ``src`` does not exist.
        ShaMismatchError: ``src_sha`` is not the source's sha, or
            ``expected_sha`` not the destination's.
    """
    head = require_head(uow, layout)
    if dst < src:
        # Rows are locked in path order, so two promotions between the same two
        # paths in opposite directions queue instead of deadlocking (PostgreSQL).
        _locked_file(uow, layout, dst)
    source = _locked_file(uow, layout, src)
    if source is None:
        if src_sha is not None:
            _check_expected(src, src_sha, "")
        raise NotFoundError(f"cannot promote {src!r}: no such file")
    _check_expected(src, src_sha, file_sha(source))
    src_info = file_info(source)
    body = body_of(source)
    info = put_file(
        uow,
        layout,
        dst,
        body,
        actor=actor,
        reason=reason,
        expected_sha=expected_sha,
        policy=policy,
        source=src,
        moved=move,
    )
    if move:
        _remove_file(uow, layout, source, actor, reason, audit=False)
    bump_head(uow, layout, head, created=move or info.version == 1)
    logger.info(
        "artifact workspace %r: %s %r (%s) to %r by %r",
        layout.key,
        "moved" if move else "copied",
        src,
        src_info.sha256[:12],
        dst,
        actor,
    )
    return info


def list_files(uow: UnitOfWork, layout: Layout, prefix: str, limit: int | None) -> list[FileInfo]:
    """The files whose path starts with ``prefix``, sorted by path (one key-range read)."""
    rows = _kept_list(uow, layout.files, layout.is_file_row, key_prefix=prefix, limit=limit)
    return [file_info(e) for e in rows]


# --------------------------------------------------------------------------- audit and versions


def read_audit(uow: UnitOfWork, layout: Layout, last: int | None) -> list[AuditRecord]:
    """The newest ``last`` audit records (``None``: all), oldest first."""
    if last is None:
        return [audit_record(e) for e in _kept_list(uow, layout.audit, layout.owns)]
    rows = _kept_list(uow, layout.audit, layout.owns, newest_first=True, limit=last)
    return [audit_record(e) for e in reversed(rows)]


def _by_time(entry: MemoryEntry) -> tuple[Any, ...]:
    return (entry.created_at, entry.entry_id)


def file_history(uow: UnitOfWork, layout: Layout, path: str) -> list[FileInfo]:
    """The kept versions of ``path``, oldest first (one key-range read)."""
    prefix = Layout.versions_prefix(path)
    rows = _kept_list(uow, layout.versions, layout.owns, key_prefix=prefix)
    return [file_info(e, path) for e in sorted(rows, key=_by_time)]


def read_version(uow: UnitOfWork, layout: Layout, path: str, sha: str) -> ArtifactFile | None:
    """The kept version of ``path`` with ``sha``, else the current file if it has that sha."""
    key = Layout.version_key(path, sha)
    row = uow.entries.get_by_key(layout.versions, key)
    if row is not None and not layout.owns(row):
        # a newer row of another owner has the key: the owner's newest, if any
        owned = _kept_list(uow, layout.versions, layout.owns, key_prefix=key)
        row = next((e for e in reversed(owned) if e.key == key), None)
    if row is not None:
        return stored_file(row, path)
    current = _file_row(uow, layout, path)
    if current is not None and file_sha(current) == sha:
        return stored_file(current)
    return None


# --------------------------------------------------------------------------- transcript


def append_messages(uow: UnitOfWork, layout: Layout, encoded: Sequence[dict[str, Any]]) -> None:
    """Append encoded messages (``_results.encode_message``) to the transcript, in order."""
    require_workspace(uow, layout)
    for one in encoded:
        uow.entries.save(layout.transcript, layout.message_entry(one, utcnow()))


def read_messages(uow: UnitOfWork, layout: Layout, last: int | None) -> list[TranscriptMessage]:
    """The newest ``last`` transcript messages (``None``: all), oldest first."""
    if last is None:
        rows = _kept_list(uow, layout.transcript, layout.owns)
    else:
        newest = _kept_list(uow, layout.transcript, layout.owns, newest_first=True, limit=last)
        rows = list(reversed(newest))
    return [transcript_message(e) for e in rows]


# --------------------------------------------------------------------------- snapshots


def export_snapshot(uow: UnitOfWork, layout: Layout) -> WorkspaceSnapshot:
    """Everything the workspace holds (one read per namespace).

    Raises:
        NotFoundError: The workspace does not exist.
    """
    info = require_workspace(uow, layout)
    files = [
        stored_file(e) for e in _kept_list(uow, layout.files, layout.is_file_row, key_prefix="")
    ]
    versions = [
        stored_file(e, version_path(e)) for e in _kept_list(uow, layout.versions, layout.owns)
    ]
    return WorkspaceSnapshot(
        key=info.key,
        user_id=info.user_id,
        created_at=info.created_at,
        files=files,
        audit=read_audit(uow, layout, None),
        versions=versions,
        messages=read_messages(uow, layout, None),
    )


def import_snapshot(
    uow: UnitOfWork,
    layout: Layout,
    snapshot: WorkspaceSnapshot,
    bodies: Sequence[Body],
    version_bodies: Sequence[Body],
    encoded_messages: Sequence[dict[str, Any]],
    replace: bool,
) -> int:
    """Write a checked snapshot as workspace ``layout`` (all or nothing); how many rows.

    ``bodies[i]`` is the body of ``snapshot.files[i]``, ``version_bodies[i]``
    of ``snapshot.versions[i]``, ``encoded_messages[i]`` the stored form of
    ``snapshot.messages[i]`` (checked by the caller).  Files keep their
    metadata, version and time; audit rows, versions and messages their times.

    Raises:
        WorkspaceExistsError: The workspace exists and ``replace`` is false.
    """
    existing = _read_head(uow, layout)
    if existing is not None and not replace:
        raise WorkspaceExistsError(
            f"artifact workspace {layout.key!r} already exists (pass replace=True to overwrite)"
        )
    _clear_family(uow, layout)
    # The head is replaced in place, its version moving on (as bump_head does).
    uow.entries.save(
        layout.registry,
        layout.head_entry(snapshot.created_at),
        expected_version=0 if existing is None else existing.version,
    )
    for file, body in zip(snapshot.files, bodies, strict=True):
        info = file.info
        entry = layout.file_entry(
            info.path, body, info.actor, info.reason, info.updated_at, info.version
        )
        uow.entries.save(layout.files, entry)
    for record in snapshot.audit:
        uow.entries.save(layout.audit, layout.audit_entry(record))
    for version, body in zip(snapshot.versions, version_bodies, strict=True):
        info = version.info
        entry = layout.version_entry(
            info.path, body, info.actor, info.reason, info.updated_at, info.version
        )
        uow.entries.save(layout.versions, entry)
    for message, encoded in zip(snapshot.messages, encoded_messages, strict=True):
        uow.entries.save(layout.transcript, layout.message_entry(encoded, message.at))
    return 1 + len(bodies) + len(snapshot.audit) + len(version_bodies) + len(encoded_messages)
