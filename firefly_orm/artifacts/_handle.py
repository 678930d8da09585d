"""The handle on one artifact workspace: :class:`ArtifactWorkspace`.

Each public method is defined once, as an operation method ``_<name>``
(:mod:`firefly_orm.bridges._steps`); ``<name>`` and ``async_<name>`` are
derived from it.  Inputs are checked before any I/O (a bad one raises
:class:`~firefly_orm.errors.EntryValidationError` and nothing is read or
written); the transactions are in :mod:`firefly_orm.artifacts._ops`.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterable
from typing import Any, Unpack

from firefly_orm.artifacts import _ops as ops
from firefly_orm.artifacts._errors import ReadOnlyPathError
from firefly_orm.artifacts._layout import Layout, stored_file
from firefly_orm.artifacts._results import (
    ArtifactFile,
    AuditRecord,
    Body,
    FileInfo,
    TranscriptMessage,
    WorkspaceSnapshot,
    encode_message,
)
from firefly_orm.artifacts._rules import (
    DEFAULT_ACTOR,
    DEFAULT_MAX_BYTES,
    WorkspaceOptions,
    check_actor,
    check_bool,
    check_expected_sha,
    check_max_bytes,
    check_path,
    check_prefix,
    check_read_only_prefixes,
    check_reason,
    read_only_prefix_of,
)
from firefly_orm.bridges._steps import (
    MemoryLayer,
    Operation,
    StoreCall,
    Transaction,
    async_method,
    sync_method,
)
from firefly_orm.conversation._model import check_int
from firefly_orm.errors import EntryValidationError, NotFoundError
from firefly_orm.store import InMemoryStore, MemoryStore

__all__ = ["ArtifactWorkspace"]

#: The logger the workspace classes have always used (logging configurations name it).
logger = logging.getLogger("firefly_orm.artifacts._workspace")


class _Required:
    """The default of a ``default=`` argument that was not given."""

    def __repr__(self) -> str:
        return "<required>"


#: ``read_text(path)`` without ``default=``: a missing file raises ``NotFoundError``.
_REQUIRED: Any = _Required()


class ArtifactWorkspace(MemoryLayer):
    """Path-addressed files with content hashes, compare-and-set, an audit log and versions.

    Get one from :class:`~firefly_orm.artifacts.Artifacts` (``create``,
    ``get_or_create``, ``open``); constructing one does no I/O, and its writes
    fail with :class:`~firefly_orm.errors.NotFoundError` until the workspace
    exists.

    Every write, delete and promotion is one unit of work: the file row, its
    audit row and (with ``keep_versions``) its version snapshot commit
    together or not at all, and a refused write (a bad argument, a read-only
    path, a compare-and-set that does not hold) leaves nothing behind.

    Args:
        key: The workspace key.
        store: Where the rows live; a new :class:`~firefly_orm.store.InMemoryStore`
            when ``None``.
        user_id: The owner (``None``: a shared workspace).  Every row carries
            it, so ``erase_user`` removes the user's workspaces.
        **options: :class:`~firefly_orm.artifacts.WorkspaceOptions`:
            ``read_only_prefixes``, ``reviewer``, ``audit``, ``keep_versions``,
            ``max_bytes``.  They belong to this handle, not to the stored
            workspace: give an agent a handle with the read-only prefixes (it
            can neither write there nor promote there), and the reviewer who
            promotes its files one without them, or with ``reviewer=True``.

    Example:
        >>> from firefly_orm.artifacts import Artifacts
        >>> ws = Artifacts().get_or_create("demo", read_only_prefixes=("memory/",))
        >>> info = ws.write_text("user/notes.md", "hello", actor="agent")
        >>> ws.read_text("user/notes.md")
        'hello'
        >>> ws.current_sha("user/notes.md") == info.sha256
        True
    """

    def __init__(
        self,
        key: str,
        *,
        store: MemoryStore | None = None,
        user_id: str | None = None,
        **options: Unpack[WorkspaceOptions],
    ) -> None:
        unknown = sorted(set(options) - set(WorkspaceOptions.__annotations__))
        if unknown:
            raise EntryValidationError(unknown[0], "unknown workspace option")
        self._layout = Layout.of(key, user_id)
        self._read_only = check_read_only_prefixes(options.get("read_only_prefixes", ()))
        self._reviewer = check_bool("reviewer", options.get("reviewer", False))
        self._policy = ops.WritePolicy(
            audit=check_bool("audit", options.get("audit", True)),
            keep_versions=check_bool("keep_versions", options.get("keep_versions", False)),
        )
        self._max_bytes = check_max_bytes(options.get("max_bytes", DEFAULT_MAX_BYTES))
        super().__init__(store if store is not None else InMemoryStore())

    # ------------------------------------------------------------------ settings
    @property
    def key(self) -> str:
        """The workspace key."""
        return self._layout.key

    @property
    def user_id(self) -> str | None:
        """The owner (``None``: shared)."""
        return self._layout.user_id

    @property
    def layout(self) -> Layout:
        """The namespaces and row ids of the workspace."""
        return self._layout

    @property
    def read_only_prefixes(self) -> tuple[str, ...]:
        """Paths starting with one of these cannot be written or deleted directly."""
        return self._read_only

    @property
    def reviewer(self) -> bool:
        """Whether this handle may promote files into its own read-only prefixes.

        A handle without read-only prefixes may promote anywhere; one with
        them (an agent's) only outside them, unless it was opened with
        ``reviewer=True``.
        """
        return self._reviewer

    @property
    def audit(self) -> bool:
        """Whether writes append audit rows."""
        return self._policy.audit

    @property
    def keep_versions(self) -> bool:
        """Whether writes keep a snapshot of the content."""
        return self._policy.keep_versions

    @property
    def max_bytes(self) -> int:
        """The largest file accepted, in bytes."""
        return self._max_bytes

    def options(self) -> WorkspaceOptions:
        """This handle's options (to open another handle alike)."""
        return WorkspaceOptions(
            read_only_prefixes=self._read_only,
            reviewer=self._reviewer,
            audit=self._policy.audit,
            keep_versions=self._policy.keep_versions,
            max_bytes=self._max_bytes,
        )

    def __repr__(self) -> str:
        return (
            f"ArtifactWorkspace(key={self.key!r}, user_id={self.user_id!r}, "
            f"read_only_prefixes={self._read_only!r}, reviewer={self._reviewer}, "
            f"audit={self.audit}, "
            f"keep_versions={self.keep_versions}, store={type(self._store).__name__})"
        )

    # ------------------------------------------------------------------ shared core
    def _writable(self, value: Any, what: str = "written") -> str:
        """``value`` checked as a path, and not under a read-only prefix."""
        path = check_path(value)
        prefix = read_only_prefix_of(path, self._read_only)
        if prefix is not None:
            raise ReadOnlyPathError(path, prefix, what)
        return path

    def _sized(self, body: Body, field: str) -> Body:
        if body.size > self._max_bytes:
            raise EntryValidationError(
                field,
                f"is {body.size} bytes, more than this workspace's max_bytes ({self._max_bytes})",
            )
        return body

    def _put(
        self, path: Any, body: Body, actor: Any, reason: Any, expected_sha: Any
    ) -> Operation[FileInfo]:
        """Write ``body`` at ``path`` (the core of the ``write_*`` methods)."""
        path = self._writable(path)
        actor, reason = check_actor(actor), check_reason(reason)
        expected = check_expected_sha(expected_sha)
        info = yield from ops.retry_races(
            Transaction.write(
                ops.write_file, self._layout, path, body, actor, reason, expected, self._policy
            )
        )
        logger.debug(
            "artifact workspace %r: wrote %r (%d bytes, %s) by %r",
            self.key,
            path,
            info.size,
            info.sha256[:12],
            actor,
        )
        return info

    def _read_entry(self, path: Any) -> Operation[ArtifactFile | None]:
        path = check_path(path)
        namespace = self._layout.files
        entry = yield from StoreCall(
            lambda store: store.load_by_key(namespace, path),
            lambda store: store.async_load_by_key(namespace, path),
        )
        if entry is not None and not self._layout.is_file_row(entry):
            # another owner's row (another layer's, in our namespace) has the key
            entry = yield from Transaction.read(ops.read_file, self._layout, path)
        return None if entry is None else stored_file(entry)

    def _required(self, path: Any) -> Operation[ArtifactFile]:
        found = yield from self._read_entry(path)
        if found is None:
            raise NotFoundError(f"artifact workspace {self.key!r} has no file {path!r}")
        return found

    # ------------------------------------------------------------------ writes
    def _write_text(
        self,
        path: str,
        text: str,
        *,
        actor: str = DEFAULT_ACTOR,
        reason: str = "",
        expected_sha: str | None = None,
    ) -> Operation[FileInfo]:
        """Write ``text`` (UTF-8) at ``path``; return the new :class:`FileInfo`.

        Args:
            path: A relative POSIX path (normalised: see
                :func:`~firefly_orm.artifacts.check_path`).
            text: The content.
            actor: Who writes (kept in the file's metadata and the audit row).
            reason: Why (may be ``""``).
            expected_sha: Compare-and-set: the write happens only if the file's
                current sha256 is this one (``""``: only if it does not exist).

        Raises:
            EntryValidationError: A bad argument; nothing is written.
            ReadOnlyPathError: ``path`` is under a read-only prefix.
            ShaMismatchError: ``expected_sha`` does not hold; its
                ``current_sha`` is the file's sha now.
            NotFoundError: The workspace does not exist.
        """
        body = self._sized(Body.of_text(text), "text")
        return (yield from self._put(path, body, actor, reason, expected_sha))

    def _write_json(
        self,
        path: str,
        value: Any,
        *,
        actor: str = DEFAULT_ACTOR,
        reason: str = "",
        expected_sha: str | None = None,
    ) -> Operation[FileInfo]:
        """Write ``value`` as JSON at ``path`` (``json.dumps(indent=2, sort_keys=True)``).

        As :meth:`write_text`; a value that is not JSON is an
        :class:`~firefly_orm.errors.EntryValidationError` naming ``value``.
        """
        body = self._sized(Body.of_json(value), "value")
        return (yield from self._put(path, body, actor, reason, expected_sha))

    def _write_bytes(
        self,
        path: str,
        data: bytes,
        *,
        actor: str = DEFAULT_ACTOR,
        reason: str = "",
        expected_sha: str | None = None,
    ) -> Operation[FileInfo]:
        """Write binary ``data`` at ``path`` (stored base64); as :meth:`write_text`."""
        body = self._sized(Body.of_bytes(data), "data")
        return (yield from self._put(path, body, actor, reason, expected_sha))

    def _delete(
        self,
        path: str,
        *,
        actor: str = DEFAULT_ACTOR,
        reason: str = "",
        expected_sha: str | None = None,
    ) -> Operation[bool]:
        """Delete the file at ``path``; whether there was one (with an audit row if so).

        ``expected_sha`` makes it a compare-and-set as on writes (``""``: the
        file must not exist, and nothing is deleted).

        Raises:
            EntryValidationError: A bad argument.
            ReadOnlyPathError: ``path`` is under a read-only prefix.
            ShaMismatchError: ``expected_sha`` does not hold.
            NotFoundError: The workspace does not exist.
        """
        path = self._writable(path, "deleted")
        actor, reason = check_actor(actor), check_reason(reason)
        expected = check_expected_sha(expected_sha)
        deleted = yield from ops.retry_races(
            Transaction.write(
                ops.delete_file, self._layout, path, actor, reason, expected, self._policy
            )
        )
        if deleted:
            logger.debug("artifact workspace %r: deleted %r by %r", self.key, path, actor)
        return deleted

    def _promote(
        self,
        src: str,
        dst: str,
        *,
        actor: str,
        reason: str,
        move: bool = False,
        src_sha: str | None = None,
        expected_sha: str | None = None,
    ) -> Operation[FileInfo]:
        """Copy (``move=True``: move) the file ``src`` to ``dst``, into a read-only area too.

        Meant for a trusted reviewer: the agent stages a file (``user/...``),
        the reviewer reads it and promotes it into a read-only area
        (``memory/...``).  One unit of work writes ``dst``, its ``"promote"``
        audit row (with ``source`` and ``moved``), its version snapshot and,
        when moving, deletes ``src``.

        **The reviewer's right.**  A handle promotes into one of its own
        read-only prefixes only when opened with ``reviewer=True``; the
        agent's handle (read-only prefixes, no ``reviewer``) is refused with
        :class:`ReadOnlyPathError`, so an agent cannot approve its own writes.
        A handle without read-only prefixes promotes anywhere: which handle
        reaches the agent's tools is the app's choice.

        Args:
            src: The file to promote.
            dst: Where it goes.
            actor: Who promotes (required: promotions are accountable).
            reason: Why (required; may be ``""``).
            move: Delete ``src`` too (refused when ``src`` is itself read-only).
            src_sha: Promote only if ``src`` still has this sha256 (what the
                reviewer read).
            expected_sha: Compare-and-set on ``dst`` (``""``: must not exist).

        Raises:
            NotFoundError: ``src`` or the workspace does not exist.
            ShaMismatchError: ``src_sha`` or ``expected_sha`` does not hold.
            ReadOnlyPathError: ``dst`` is under one of this handle's read-only
                prefixes and the handle is not a reviewer's, or ``move=True``
                with a read-only ``src``.
            EntryValidationError: A bad argument, or ``src == dst``.
        """
        src, dst = check_path(src, "src"), check_path(dst, "dst")
        if src == dst:
            raise EntryValidationError("dst", f"is the source itself ({src!r})")
        if not self._reviewer:
            prefix = read_only_prefix_of(dst, self._read_only)
            if prefix is not None:
                raise ReadOnlyPathError(dst, prefix, reviewer_needed=True)
        if check_bool("move", move):
            prefix = read_only_prefix_of(src, self._read_only)
            if prefix is not None:
                raise ReadOnlyPathError(src, prefix, "moved")
        actor, reason = check_actor(actor), check_reason(reason)
        source_sha = check_expected_sha(src_sha, "src_sha")
        expected = check_expected_sha(expected_sha)
        return (
            yield from ops.retry_races(
                Transaction.write(
                    ops.promote_file,
                    self._layout,
                    src,
                    dst,
                    move=move,
                    actor=actor,
                    reason=reason,
                    src_sha=source_sha,
                    expected_sha=expected,
                    policy=self._policy,
                )
            )
        )

    # ------------------------------------------------------------------ reads
    def _read(self, path: str) -> Operation[ArtifactFile | None]:
        """The file at ``path`` (bytes and :class:`FileInfo`), or ``None``: one consistent read."""
        return (yield from self._read_entry(path))

    def _read_text(self, path: str, default: str = _REQUIRED) -> Operation[str]:
        """The text of the file at ``path``.

        Raises:
            NotFoundError: No such file and no ``default`` given.
            EntryValidationError: The file is binary and not UTF-8.
        """
        found = yield from self._read_entry(path)
        if found is None:
            if default is _REQUIRED:
                raise NotFoundError(f"artifact workspace {self.key!r} has no file {path!r}")
            return default
        return found.text()

    def _read_json(self, path: str, default: Any = _REQUIRED) -> Operation[Any]:
        """The JSON value of the file at ``path`` (any file holding JSON text).

        Raises:
            NotFoundError: No such file and no ``default`` given.
            EntryValidationError: The file does not hold JSON.
        """
        found = yield from self._read_entry(path)
        if found is None:
            if default is _REQUIRED:
                raise NotFoundError(f"artifact workspace {self.key!r} has no file {path!r}")
            return default
        return found.json()

    def _read_bytes(self, path: str, default: bytes = _REQUIRED) -> Operation[bytes]:
        """The bytes of the file at ``path`` (UTF-8 for a text file).

        Raises:
            NotFoundError: No such file and no ``default`` given.
        """
        found = yield from self._read_entry(path)
        if found is None:
            if default is _REQUIRED:
                raise NotFoundError(f"artifact workspace {self.key!r} has no file {path!r}")
            return default
        return found.data

    def _stat(self, path: str) -> Operation[FileInfo | None]:
        """The :class:`FileInfo` of ``path`` (sha256, size, updated_at, version, actor, reason)."""
        found = yield from self._read_entry(path)
        return None if found is None else found.info

    def _current_sha(self, path: str) -> Operation[str]:
        """The sha256 of the file at ``path``, ``""`` when there is none (for ``expected_sha``)."""
        found = yield from self._read_entry(path)
        return "" if found is None else found.info.sha256

    def _exists(self, path: str) -> Operation[bool]:
        """Whether a file exists at ``path``."""
        found = yield from self._read_entry(path)
        return found is not None

    def _list_paths(self, prefix: str = "") -> Operation[builtins.list[str]]:
        """The paths starting with ``prefix``, sorted (a string prefix: ``"user/"`` for a folder).

        One indexed key-range read (SQL: ``key >= prefix AND key < next(prefix)``).
        """
        infos = yield from self._files(prefix)
        return [info.path for info in infos]

    def _files(
        self, prefix: str = "", *, limit: int | None = None
    ) -> Operation[builtins.list[FileInfo]]:
        """The :class:`FileInfo` of every file whose path starts with ``prefix``, sorted by path.

        ``limit``: at most that many (the first by path).
        """
        prefix = check_prefix(prefix)
        limit = None if limit is None else check_int("limit", limit, 0)
        return (yield from Transaction.read(ops.list_files, self._layout, prefix, limit))

    def _audit_tail(self, n: int = 20) -> Operation[builtins.list[AuditRecord]]:
        """The newest ``n`` audit records, oldest first (the most recent last)."""
        n = check_int("n", n, 0)
        return (yield from Transaction.read(ops.read_audit, self._layout, n))

    def _audit_log(self) -> Operation[builtins.list[AuditRecord]]:
        """Every audit record, oldest first."""
        return (yield from Transaction.read(ops.read_audit, self._layout, None))

    def _history(self, path: str) -> Operation[builtins.list[FileInfo]]:
        """The kept versions of ``path``, oldest first (written with ``keep_versions=True``).

        Each :class:`FileInfo` is the file as that write left it (its
        ``version`` is the file's version then).  Deleting a file keeps its
        versions; ``delete_workspace`` removes them.
        """
        path = check_path(path)
        return (yield from Transaction.read(ops.file_history, self._layout, path))

    def _read_version(self, path: str, sha: str) -> Operation[ArtifactFile | None]:
        """The content ``path`` had with sha256 ``sha`` (a kept version, or the current file).

        ``None`` when neither has it.
        """
        path = check_path(path)
        wanted = check_expected_sha(sha, "sha")
        if not wanted:
            raise EntryValidationError("sha", "must be a sha256 (64 hex digits)")
        return (yield from Transaction.read(ops.read_version, self._layout, path, wanted))

    # ------------------------------------------------------------------ transcript
    def _append(self, message: Any) -> Operation[None]:
        """Append one message to the transcript (persisted at once, one row).

        A pydantic-ai ``ModelMessage`` (comes back as one) or any JSON value.

        Raises:
            EntryValidationError: The message is neither; nothing is written.
            NotFoundError: The workspace does not exist.
        """
        encoded = [encode_message(message)]
        yield from Transaction.write(ops.append_messages, self._layout, encoded)

    def _extend(self, messages: Iterable[Any]) -> Operation[int]:
        """Append several messages in order, all or nothing (one unit of work); how many.

        Raises:
            EntryValidationError: One is neither a pydantic-ai message nor
                JSON (``messages[i]`` is named); nothing is written.
        """
        if isinstance(messages, str | bytes) or not isinstance(messages, Iterable):
            raise EntryValidationError("messages", "must be a list of messages")
        encoded = [encode_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
        if encoded:
            yield from Transaction.write(ops.append_messages, self._layout, encoded)
        return len(encoded)

    def _messages(self, *, last: int | None = None) -> Operation[builtins.list[Any]]:
        """The transcript, oldest first (``last``: only the newest ``last`` messages)."""
        found = yield from self._transcript(last=last)
        return [m.message for m in found]

    def _transcript(
        self, *, last: int | None = None
    ) -> Operation[builtins.list[TranscriptMessage]]:
        """The transcript with each message's time, oldest first (``last``: as :meth:`messages`)."""
        last = None if last is None else check_int("last", last, 0)
        return (yield from Transaction.read(ops.read_messages, self._layout, last))

    # ------------------------------------------------------------------ whole workspace
    def _export_snapshot(self) -> Operation[WorkspaceSnapshot]:
        """Everything the workspace holds (files, audit log, versions, transcript).

        One read unit of work (a consistent snapshot on SQLite; on PostgreSQL
        each namespace is read by its own statement).

        Raises:
            NotFoundError: The workspace does not exist.
        """
        return (yield from Transaction.read(ops.export_snapshot, self._layout))

    # ------------------------------------------------------------------ public forms
    write_text = sync_method(_write_text)
    write_json = sync_method(_write_json)
    write_bytes = sync_method(_write_bytes)
    delete = sync_method(_delete)
    promote = sync_method(_promote)
    read = sync_method(_read)
    read_text = sync_method(_read_text)
    read_json = sync_method(_read_json)
    read_bytes = sync_method(_read_bytes)
    stat = sync_method(_stat)
    current_sha = sync_method(_current_sha)
    exists = sync_method(_exists)
    list_paths = sync_method(_list_paths)
    files = sync_method(_files)
    audit_tail = sync_method(_audit_tail)
    audit_log = sync_method(_audit_log)
    history = sync_method(_history)
    read_version = sync_method(_read_version)
    append = sync_method(_append)
    extend = sync_method(_extend)
    messages = sync_method(_messages)
    transcript = sync_method(_transcript)
    export_snapshot = sync_method(_export_snapshot)

    async_write_text = async_method(_write_text)
    async_write_json = async_method(_write_json)
    async_write_bytes = async_method(_write_bytes)
    async_delete = async_method(_delete)
    async_promote = async_method(_promote)
    async_read = async_method(_read)
    async_read_text = async_method(_read_text)
    async_read_json = async_method(_read_json)
    async_read_bytes = async_method(_read_bytes)
    async_stat = async_method(_stat)
    async_current_sha = async_method(_current_sha)
    async_exists = async_method(_exists)
    async_list_paths = async_method(_list_paths)
    async_files = async_method(_files)
    async_audit_tail = async_method(_audit_tail)
    async_audit_log = async_method(_audit_log)
    async_history = async_method(_history)
    async_read_version = async_method(_read_version)
    async_append = async_method(_append)
    async_extend = async_method(_extend)
    async_messages = async_method(_messages)
    async_transcript = async_method(_transcript)
    async_export_snapshot = async_method(_export_snapshot)
